"""``limits: processes`` for a pysb run by root: a pids cgroup.

The kernel exempts uid 0 of the initial user namespace from ``RLIMIT_NPROC``, so for a
root pysb the rlimit the bootstrap sets is a silent no-op. The provider's host process
therefore joins a pids cgroup made for this launch (between ``fork`` and ``exec``, so that
every process of the sandbox is counted) with ``pids.max`` = the limit plus the provider's
own processes. Without a writable pids controller the launch is refused (fail closed).
"""

from __future__ import annotations

import itertools
import os
import time

from pysb_core.errors import SandboxError

#: (pids hierarchy, how to recognise it) in order of preference.
_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup", "/sys/fs/cgroup/unified")
_counter = itertools.count()


def find_controller() -> str | None:
    """The first writable pids hierarchy where a child cgroup gets ``pids.max``."""
    for root in _ROOTS:
        if not (os.path.isdir(root) and os.access(root, os.W_OK)):
            continue
        if root.endswith("/pids") and os.path.exists(os.path.join(root, "tasks")):
            return root  # cgroup v1: a hierarchy of its own
        try:
            with open(os.path.join(root, "cgroup.subtree_control")) as f:
                if "pids" in f.read().split():
                    return root  # cgroup v2 with the pids controller enabled
        except OSError:
            continue
    return None


def needed(processes: int | None) -> bool:
    """Whether ``processes`` needs a cgroup here (root ignores RLIMIT_NPROC)."""
    return processes is not None and os.geteuid() == 0


class PidsCgroup:
    """A pids cgroup made for one launch and removed after it."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls, processes: int, *, owner: str = "pysb") -> PidsCgroup:
        """Make the cgroup; raise SandboxError (the run does not start) if impossible."""
        root = find_controller()
        if root is None:
            raise SandboxError(
                f"'limits: processes: {processes}' cannot be enforced: pysb runs as root, "
                "which RLIMIT_NPROC does not limit, and no writable pids cgroup controller "
                "was found (/sys/fs/cgroup/pids, or cgroup v2 with 'pids' in "
                "cgroup.subtree_control). Run pysb as a normal user, or enable the pids "
                "controller."
            )
        path = os.path.join(root, f"{owner}-{os.getpid()}-{next(_counter)}")
        try:
            os.mkdir(path, 0o755)
            with open(os.path.join(path, "pids.max"), "w") as f:
                f.write(str(processes))
        except OSError as exc:
            try:
                os.rmdir(path)
            except OSError:
                pass
            raise SandboxError(
                f"could not make a pids cgroup for 'limits: processes': {exc}"
            ) from exc
        return cls(path)

    def join_self(self) -> None:
        """Move the calling process into the cgroup (runs between fork and exec)."""
        fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def remove(self) -> None:
        """Remove the cgroup once empty; its last processes may take a moment to be reaped."""
        deadline = time.monotonic() + 1.0
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return  # a process left behind keeps it; it is empty later and harmless
                time.sleep(0.01)
