"""``limits: processes`` when pysb runs as root: a pids cgroup, since rlimits do not apply.

The kernel exempts uid 0 of the initial user namespace from ``RLIMIT_NPROC`` (and
firejail's ``--noroot`` is not available to root), so ``--rlimit-nproc`` would be a
silent no-op for a root pysb. The provider then makes a pids cgroup of its own
(``pids.max`` = the limit plus firejail's two processes: its host process and the
sandbox's PID 1) and the firejail process joins it between ``fork`` and ``exec``, so that
every process of the sandbox is counted. Without a writable pids controller the launch is
refused (fail closed) rather than run without the limit. The other limits are rlimits,
which firejail applies (``--rlimit-*``) and the bootstrap applies again.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pysb_core.policy import Limits

#: firejail's own processes inside the cgroup: the host process and the sandbox's PID 1.
FIREJAIL_PROCESSES = 2
#: (pids controller directory, file a process writes its PID to) in order of preference.
CONTROLLERS = (
    ("/sys/fs/cgroup/pids", "cgroup.procs"),  # cgroup v1
    ("/sys/fs/cgroup", "cgroup.procs"),  # cgroup v2 (pids enabled at the root)
    ("/sys/fs/cgroup/unified", "cgroup.procs"),
)
_counter = itertools.count()


def find_controller() -> str | None:
    """The first pids hierarchy where a child cgroup with ``pids.max`` can be made."""
    for root, _ in CONTROLLERS:
        if not (os.path.isdir(root) and os.access(root, os.W_OK)):
            continue
        # v1: a hierarchy of its own (the root cgroup has no pids.max; children do).
        v1 = root.endswith("/pids") and os.path.exists(os.path.join(root, "tasks"))
        if v1 or _v2_has_pids(root):
            return root
    return None


def _v2_has_pids(root: str) -> bool:
    try:
        with open(os.path.join(root, "cgroup.subtree_control")) as f:
            return "pids" in f.read().split()
    except OSError:
        return False


def processes_problem(limits: Limits, *, as_root: bool) -> str | None:
    """Why ``limits.processes`` cannot be enforced here, or ``None`` when it can."""
    if limits.processes is None or not as_root or find_controller() is not None:
        return None
    return (
        f"'processes: {limits.processes}' cannot be enforced: pysb runs as root, which "
        "RLIMIT_NPROC does not limit, and no writable pids cgroup controller was found "
        "(/sys/fs/cgroup/pids or a cgroup v2 hierarchy with 'pids' in "
        "cgroup.subtree_control); run pysb as a normal user, or make the pids controller "
        "available"
    )


@dataclass
class PidsCgroup:
    """A pids cgroup made for one launch and removed after it."""

    path: str

    @classmethod
    def create(cls, processes: int) -> PidsCgroup:
        root = find_controller()
        if root is None:
            raise OSError("no writable pids cgroup controller")
        path = os.path.join(root, f"pysb-firejail-{os.getpid()}-{next(_counter)}")
        os.mkdir(path, 0o755)
        try:
            with open(os.path.join(path, "pids.max"), "w") as f:
                f.write(str(processes + FIREJAIL_PROCESSES))
        except OSError:
            os.rmdir(path)
            raise
        return cls(path)

    def join_self(self) -> None:
        """Move the calling process into the cgroup (runs between fork and exec)."""
        fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def remove(self) -> None:
        """Remove the cgroup; its last processes may take a moment to be reaped."""
        deadline = time.monotonic() + 1.0
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return  # a process left behind keeps it; it is empty and harmless
                time.sleep(0.01)
