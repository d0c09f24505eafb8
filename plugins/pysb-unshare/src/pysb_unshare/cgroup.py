"""A pids cgroup for ``limits: processes`` when RLIMIT_NPROC cannot do the job.

The kernel never applies RLIMIT_NPROC to the host's root user (``copy_process`` exempts
``INIT_USER``), and when pysb runs as root the sandbox's uid 0 *is* that user. A ``pids``
cgroup counts the sandbox's tasks instead, whoever they run as. The cgroup is created below
pysb's own (v2: the unified hierarchy; v1: the ``pids`` hierarchy); the program's process
joins it itself, before its exec (``nsinit`` writes ``0`` to ``cgroup.procs`` through a file
opened before the pivot), so pysb's own helpers are not counted; it is removed after the run.
"""

from __future__ import annotations

import contextlib
import itertools
import os

from pysb_core.providerkit import ProviderUnavailableError

_COUNTER = itertools.count()


def _own_cgroup() -> tuple[str, str, bool] | None:
    """``(mount point, path, is v2)`` of this process's pids cgroup."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    entries = [ln.split(":", 2) for ln in lines if ln.count(":") >= 2]
    for _, controllers, path in entries:
        if controllers == "pids":
            for base in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/pids,cpuacct"):
                if os.path.isdir(base):
                    return base, path, False
    for hid, controllers, path in entries:
        if hid == "0" and controllers == "":
            for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                ctl = os.path.join(base, path.lstrip("/"), "cgroup.controllers")
                with contextlib.suppress(OSError), open(ctl) as f:
                    if "pids" in f.read().split():
                        return base, path, True
    return None


class PidsCgroup:
    """One sandbox's pids cgroup: at most ``limit`` tasks (the program's, threads included)."""

    def __init__(self, limit: int) -> None:
        found = _own_cgroup()
        if found is None:
            raise ProviderUnavailableError(
                "limits.processes needs a pids cgroup here (the sandbox's uid 0 is the host's "
                "root, which RLIMIT_NPROC does not limit), and none is available",
                fix="run pysb as an ordinary user, or give it a writable pids cgroup "
                "(cgroup v2 delegation or the v1 pids hierarchy)",
            )
        base, path, v2 = found
        parent = os.path.join(base, path.lstrip("/"))
        self.path = os.path.join(parent, f"pysb-{os.getpid()}-{next(_COUNTER)}")
        try:
            if v2:  # the controller must be enabled for the children of our cgroup
                with (
                    contextlib.suppress(OSError),
                    open(os.path.join(parent, "cgroup.subtree_control"), "w") as f,
                ):
                    f.write("+pids")
            os.mkdir(self.path, 0o755)
            with open(os.path.join(self.path, "pids.max"), "w") as f:
                f.write(str(limit))
        except OSError as exc:
            self.remove()
            raise ProviderUnavailableError(
                f"limits.processes: cannot create a pids cgroup under {parent}: {exc.strerror}",
                fix="run pysb as an ordinary user, or give it a writable pids cgroup",
            ) from None

    @property
    def procs(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def remove(self) -> None:
        """Remove the cgroup (it is empty once the sandbox is gone); idempotent."""
        with contextlib.suppress(OSError):
            os.rmdir(self.path)
