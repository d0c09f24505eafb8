"""The namespaces of a sandbox's network, held open, and a way into them for a host program.

**Which user namespace.** The network namespace is owned by the user namespace it was made
in, and only that one gives the capabilities to configure it. It is not always the one the
sandbox process ends up in: an unprivileged bwrap makes a user namespace that maps uid 0 to
the user, sets the sandbox up in it, then moves into a nested one that maps the user's own
uid (while pysb attaches the network). ``/proc/PID/ns/user`` then names the nested one, and
joining it gives nothing over the network (``setns(CLONE_NEWNET): Operation not
permitted``). So :class:`SandboxNamespaces` asks the kernel for the network namespace's
owner (``ioctl(NS_GET_USERNS)``) and keeps both open; the helpers join them through
``/proc/self/fd/N``, whatever the sandbox process does meanwhile.

**Capabilities.** ``nsenter --user --net`` works for root, but not for a normal user:
entering a user namespace it sets the groups (``setgroups`` is denied in a namespace an
unprivileged user made: "nsenter: setgroups failed"), and with ``--preserve-credentials``
the program it starts keeps no capability, since ``execve`` drops the capabilities of every
uid but 0 of the namespace. So :meth:`SandboxNamespaces.entering` is a ``preexec_fn``: the
forked child ``setns``-es into the owner (its creator, pysb's uid, holds every capability
there) and the network namespace, then makes ``CAP_NET_ADMIN`` and ``CAP_NET_RAW``
*ambient*, the one kind of capability that survives the ``execve`` of an ordinary program
by a non-root uid. ``nft`` then runs with exactly those two capabilities, in the sandbox's
namespaces only, and so do the programs it starts (the ``sh`` that sets ``route_localnet``
first). Nothing is asked of the host: no set-uid helper, no sysctl. On its way the child
reads the owner's uid and gid maps (:attr:`SandboxNamespaces.maps`), which say whether
slirp4netns can make its own sandbox there (:mod:`pysb_core.net.netns.usernet`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CAP_NET_ADMIN = 12
CAP_NET_RAW = 13
#: ``ioctl(ns_fd, NS_GET_USERNS)``: a new fd of the user namespace owning ``ns_fd``.
NS_GET_USERNS = 0xB701
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
_CAPS_V3 = 0x20080522


def _inode(path_or_fd: str | int) -> tuple[int, int]:
    st = os.stat(path_or_fd)
    return st.st_dev, st.st_ino


class SandboxNamespaces:
    """The network namespace of sandbox process ``pid`` and the user namespace owning it.

    ``user_fd`` is ``None`` when the owner is pysb's own user namespace (nothing to join).
    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, pid: int) -> None:
        import fcntl

        self.pid = pid
        self.user_fd: int | None = None
        #: The owner's ``(uid_map, gid_map)`` as read from inside it, once :meth:`entering`
        #: ran (``None`` before, or when the owner is pysb's own namespace).
        self.maps: tuple[str, str] | None = None
        self.net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            owner = fcntl.ioctl(self.net_fd, NS_GET_USERNS)  # close-on-exec, as every ns fd
            if _inode(owner) == _inode("/proc/self/ns/user"):
                os.close(owner)
            else:
                self.user_fd = owner
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> SandboxNamespaces:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in (self.user_fd, self.net_fd):
            if fd is not None and fd >= 0:
                os.close(fd)
        self.user_fd = None
        self.net_fd = -1

    @property
    def fds(self) -> list[int]:
        """The descriptors a helper started with ``pass_fds`` needs."""
        return [fd for fd in (self.user_fd, self.net_fd) if fd is not None]

    @staticmethod
    def path(fd: int) -> str:
        """The name under which a child that inherited ``fd`` opens the namespace."""
        return f"/proc/self/fd/{fd}"

    def owner_root_is(self, uid: int, gid: int) -> bool:
        """uid and gid 0 of the owning namespace are ``uid``/``gid`` outside it (known once
        :meth:`entering` ran; pysb's own namespace: only when both are 0)."""
        if self.user_fd is None:
            return uid == 0 and gid == 0
        if self.maps is None:
            return False
        uid_map, gid_map = (m.split() for m in self.maps)
        return uid_map[:2] == ["0", str(uid)] and gid_map[:2] == ["0", str(gid)]

    def pid_in_owner(self) -> bool:
        """The sandbox process is still in the owning user namespace (not a nested one)."""
        if self.user_fd is None:
            return True
        try:
            return _inode(f"/proc/{self.pid}/ns/user") == _inode(self.user_fd)
        except OSError:
            return False

    @contextlib.contextmanager
    def holder(self) -> Iterator[int]:
        """A process of pysb's own sitting in the owner and the network namespace while
        the block runs; yields its PID. For a helper that finds the namespaces by PID only
        (slirp4netns's sandbox step joins ``/proc/PID/ns/user``) when the sandbox process
        itself has moved on to a nested user namespace."""
        import shutil

        sleep = shutil.which("sleep", path="/usr/bin:/bin") or "sleep"
        enter = self.entering(caps=())
        try:
            proc = subprocess.Popen(
                [sleep, "3600"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                preexec_fn=enter,
                start_new_session=True,
            )
        finally:
            enter.parent_done()  # type: ignore[attr-defined]
            self.read_maps()
        try:
            yield proc.pid
        finally:
            proc.kill()  # our own child, by PID
            proc.wait()

    def entering(self, caps: tuple[int, ...] = (CAP_NET_ADMIN, CAP_NET_RAW)) -> Callable[[], None]:
        """A ``preexec_fn``: the forked child joins the owner and the network namespace with
        ``caps`` ambient, and reports the owner's id maps (read back by :meth:`read_maps`).
        Everything is resolved here, in the parent; the function only makes system calls."""
        from pysb_core.linux import cfuncs

        setns = cfuncs.function("setns")
        capget = cfuncs.function("capget")
        capset = cfuncs.function("capset")
        prctl = cfuncs.function("prctl")
        get_errno = cfuncs.get_errno
        user_fd, net_fd = self.user_fd, self.net_fd
        header = _CAPS_V3.to_bytes(4, "little") + bytes(4)
        header_buf, header_ptr = cfuncs.buffer(header)
        data_buf, data_ptr = cfuncs.buffer(bytes(24))  # two {effective, permitted, inheritable}
        report_r, report_w = os.pipe()  # both close-on-exec
        self._report_r = report_r

        def fail(what: str) -> None:
            err = get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

        def report() -> None:
            text = []
            for name in ("uid_map", "gid_map"):
                fd = os.open(f"/proc/self/{name}", os.O_RDONLY)
                try:
                    text.append(os.read(fd, 4096))
                finally:
                    os.close(fd)
            os.write(report_w, b"\0".join(text))

        def enter() -> None:
            if user_fd is not None:
                if setns(user_fd, CLONE_NEWUSER) != 0:
                    fail("setns into the user namespace owning the sandbox's network")
                report()
            if setns(net_fd, CLONE_NEWNET) != 0:
                fail("setns into the sandbox's network namespace")
            if capget(cfuncs.Pointer(header_ptr), cfuncs.Pointer(data_ptr)) != 0:
                fail("capget")
            raw = bytearray(data_buf.raw)  # type: ignore[attr-defined]
            for cap in caps:
                at = 12 * (cap // 32) + 8  # the inheritable word of the cap's 32-bit half
                value = int.from_bytes(raw[at : at + 4], "little") | (1 << (cap % 32))
                raw[at : at + 4] = value.to_bytes(4, "little")
            data_buf.raw = bytes(raw)  # type: ignore[attr-defined]
            if capset(cfuncs.Pointer(header_ptr), cfuncs.Pointer(data_ptr)) != 0:
                fail("capset")
            for cap in caps:
                if prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0:
                    fail(f"making capability {cap} ambient")

        def after_fork_in_parent() -> None:
            os.close(report_w)

        enter.parent_done = after_fork_in_parent  # type: ignore[attr-defined]
        enter.buffers = (header_buf, data_buf)  # type: ignore[attr-defined]  # alive as long
        return enter

    def read_maps(self) -> None:
        """After the child of :meth:`entering` started: take the maps it reported."""
        report_r = getattr(self, "_report_r", None)
        if report_r is None:
            return
        self._report_r = None
        try:
            chunks = []
            while chunk := os.read(report_r, 8192):
                chunks.append(chunk)
        finally:
            os.close(report_r)
        parts = b"".join(chunks).decode(errors="replace").split("\0")
        if len(parts) == 2:
            self.maps = (parts[0], parts[1])


@contextlib.contextmanager
def scratch_namespace() -> Iterator[int]:
    """A process of pysb's own in a new user namespace (pysb's uid as its root) and a new
    network namespace, alive while the block runs; yields its PID. Nothing reaches it:
    it has only its own loopback, and exits when pysb closes its standard input. For
    trying out what a launch will load into a sandbox's namespace
    (:meth:`pysb_core.net.netns.session.NetnsNetwork.preflight`)."""
    import shutil

    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if unshare is None:
        raise OSError("unshare (util-linux) is not installed")
    proc = subprocess.Popen(
        [unshare, "--user", "--map-root-user", "--net", "--", "/bin/sh", "-c", "echo; read x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        if proc.stdout.readline() != b"\n":  # the namespaces exist once sh runs
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise OSError(f"unshare --user --net failed: {err or proc.wait()}")
        yield proc.pid
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()  # our own child, by PID
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
