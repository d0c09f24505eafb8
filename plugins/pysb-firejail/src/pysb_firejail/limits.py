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

from pysb_core.providerkit import PidsCgroup as CorePidsCgroup
from pysb_core.providerkit import find_pids_controller

TYPE_CHECKING = False  # imported by every firejail run: no typing at run time
if TYPE_CHECKING:
    from pysb_core.providerkit import Limits

#: firejail's own processes inside the cgroup: the host process and the sandbox's PID 1.
FIREJAIL_PROCESSES = 2
find_controller = find_pids_controller


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


class PidsCgroup(CorePidsCgroup):
    """The core's pids cgroup, sized for firejail's own two processes."""

    @classmethod
    def create(cls, processes: int, *, owner: str = "pysb-firejail") -> PidsCgroup:  # type: ignore[override]
        group = CorePidsCgroup.create(processes + FIREJAIL_PROCESSES, owner=owner)
        return cls(group.path)
