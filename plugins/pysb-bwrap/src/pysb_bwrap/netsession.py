"""Launch-time plumbing for a bwrap sandbox whose network rules allow traffic.

bwrap creates the namespaces, reports the sandbox's PID on ``--info-fd`` and then waits on
``--block-fd`` before it executes the program. In that window ``pysb_core.net.netns`` loads
the packet filter into the namespace and attaches the user-mode network; only then is the
program released. Any failure raises, and :meth:`Provider.launch` kills the sandbox,
which never ran the program (fail closed).
"""

from __future__ import annotations

import os
import select
import time

from pysb_core.providerkit import Record, SandboxError, field, mutable_record

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    import subprocess
    from typing import Any

#: How long bwrap may take to report its PID (it is milliseconds in practice).
INFO_TIMEOUT = 20.0
BWRAP_FAILED = (
    "bwrap could not set the sandbox up (exit {status}; its own message, above, says what "
    "failed); the program was not started"
)


def _exit_of(proc: subprocess.Popen[bytes], timeout: float = 2.0) -> str | None:
    """pysb's explanation when bwrap has exited (or does within ``timeout``): its set-up
    failed, and it said why on stderr. ``None`` while it still runs."""
    import subprocess

    try:
        status = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return BWRAP_FAILED.format(status=status)


@mutable_record
class Resources(Record):
    """Host-side temporary files and pipe ends of one launch, released exactly once."""

    tmpdir: str | None = None
    fds: set[int] = field(default_factory=set)

    def file(self, name: str, data: bytes, mode: int) -> str:
        if self.tmpdir is None:
            import tempfile  # only for launches that mask files or filter the network

            self.tmpdir = tempfile.mkdtemp(prefix="pysb-bwrap-")
        path = os.path.join(self.tmpdir, name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.chmod(path, mode)
        return path

    def memfile(self, data: bytes) -> int:
        """An fd holding ``data`` from its start, for ``bwrap --file FD DEST`` (bwrap reads
        and closes its copy; ours is closed once bwrap has started)."""
        fd = os.memfd_create("pysb-bwrap", os.MFD_CLOEXEC)
        self.fds.add(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def copy(self, path: str, limit: int = 1 << 20) -> int | None:
        """:meth:`memfile` of the host file ``path``; None when it cannot be read or is
        larger than ``limit`` (the caller then binds it)."""
        try:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
        except OSError:
            return None
        return self.memfile(data) if len(data) <= limit else None

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.fds.update((r, w))
        return r, w

    def close(self, fd: int) -> None:
        if fd in self.fds:
            self.fds.discard(fd)
            os.close(fd)

    def close_all(self, fds: list[int]) -> None:
        for fd in fds:
            self.close(fd)

    def release(self) -> None:
        for fd in list(self.fds):
            self.close(fd)
        if self.tmpdir is not None:
            import shutil

            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


@mutable_record
class NetworkLaunch(Record):
    """The pipes bwrap shares with pysb, and the network to attach when it reports in."""

    net: Any  # pysb_core.net.netns.NetnsNetwork
    res: Resources
    info_r: int
    info_w: int
    block_r: int
    block_w: int

    @classmethod
    def create(cls, net: Any, res: Resources) -> NetworkLaunch:
        info_r, info_w = res.pipe()
        block_r, block_w = res.pipe()
        return cls(net, res, info_r, info_w, block_r, block_w)

    @property
    def child_fds(self) -> list[int]:
        return [self.info_w, self.block_r]

    def on_started(self, proc: subprocess.Popen[bytes]) -> None:
        """Filter and connect the namespace, then let bwrap start the program."""
        self.res.close(self.info_w)
        self.res.close(self.block_r)
        pid = self._read_child_pid(proc)
        try:
            self._wait_for_id_maps(pid, proc)
            self.net.attach(pid)
            os.write(self.block_w, b"1")
        except (SandboxError, OSError) as exc:
            # bwrap reports the PID before it sets the sandbox up: when that set-up failed,
            # what failed here is a consequence. The first error is bwrap's own.
            first = _exit_of(proc)
            if first is not None:
                raise SandboxError(first) from exc
            raise
        self.res.close(self.block_w)

    def _read_child_pid(self, proc: subprocess.Popen[bytes]) -> int:
        import json

        data = b""
        deadline = time.monotonic() + INFO_TIMEOUT
        while True:
            try:
                return int(json.loads(data)["child-pid"])
            except (ValueError, KeyError):
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError("bwrap did not report its sandbox's PID in time")
            ready, _, _ = select.select([self.info_r], [], [], min(left, 0.5))
            chunk = os.read(self.info_r, 4096) if ready else b""
            if ready and not chunk:
                raise SandboxError(_exit_of(proc) or BWRAP_FAILED.format(status="?"))
            data += chunk

    @staticmethod
    def _wait_for_id_maps(pid: int, proc: subprocess.Popen[bytes]) -> None:
        """bwrap reports the PID right after ``clone``, possibly before the user namespace's
        uid/gid maps are written; joining it earlier fails (``setgid: Invalid argument``)."""
        deadline = time.monotonic() + INFO_TIMEOUT
        while True:
            try:
                with open(f"/proc/{pid}/uid_map") as u, open(f"/proc/{pid}/gid_map") as g:
                    if u.read().strip() and g.read().strip():
                        return
            except OSError:
                pass
            if proc.poll() is not None:
                raise SandboxError("bwrap exited before the sandbox was ready; not started")
            if time.monotonic() > deadline:
                raise SandboxError("bwrap's user namespace never got its id maps; not started")
            time.sleep(0.0005)

    def close(self) -> None:
        self.net.close()
