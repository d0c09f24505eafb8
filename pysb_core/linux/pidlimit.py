"""``limits: processes`` for a pysb run by root: a pids cgroup, made in one place.

The kernel exempts uid 0 of the initial user namespace from ``RLIMIT_NPROC`` (``copy_process``
exempts ``INIT_USER``), so for a root pysb the rlimit the bootstrap sets is a silent no-op.
A pids cgroup made for the launch counts the sandbox's tasks instead, whoever they run as,
with ``pids.max`` = the limit plus the provider's own processes. The base
:meth:`pysb_core.provider.Provider.pids_cgroup` makes it; the provider's host process joins
it between ``fork`` and ``exec`` (the first pre-exec step of the base ``launch``), or, for a
provider that joins it itself (``manages_process_limit``: unshare's init, from inside),
through :attr:`PidsCgroup.procs`. Without a writable pids controller the launch is refused
(fail closed).

Where the cgroup goes: below pysb's own cgroup when that one can have a pids child (cgroup
v2 with the controller delegated, the v1 ``pids`` hierarchy), else below the root of a
writable pids hierarchy.
"""

from __future__ import annotations

import itertools
import os
import time

from pysb_core.errors import SandboxError

#: Roots of the pids hierarchy, tried after pysb's own cgroup.
_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup", "/sys/fs/cgroup/unified")
#: Where the v1 pids hierarchy is mounted (alone, or with cpuacct).
_V1_MOUNTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/pids,cpuacct")
_counter = itertools.count()


def _words(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return []


def _own_places() -> list[str]:
    """The directories of this process's own cgroup that could take a pids child."""
    try:
        with open("/proc/self/cgroup") as f:
            entries = [ln.split(":", 2) for ln in f.read().splitlines() if ln.count(":") >= 2]
    except OSError:
        return []
    places = []
    for hid, controllers, path in entries:
        if controllers == "pids":  # v1
            places += [os.path.normpath(os.path.join(m, path.lstrip("/"))) for m in _V1_MOUNTS]
        elif hid == "0" and controllers == "":  # v2: the delegated subtree
            here = os.path.normpath(os.path.join("/sys/fs/cgroup", path.lstrip("/")))
            if "pids" in _words(os.path.join(here, "cgroup.controllers")):
                places.append(here)
    return places


def _can_hold_pids_children(place: str) -> bool:
    if not (os.path.isdir(place) and os.access(place, os.W_OK)):
        return False
    if os.path.exists(os.path.join(place, "tasks")):
        return True  # cgroup v1: a child of a pids hierarchy directory has pids.max
    subtree = os.path.join(place, "cgroup.subtree_control")
    if "pids" in _words(subtree):
        return True
    # v2: the controller is available here and can be enabled for the children
    return "pids" in _words(os.path.join(place, "cgroup.controllers")) and os.access(
        subtree, os.W_OK
    )


def find_controller() -> str | None:
    """The directory a pids cgroup for a launch is made in (``None``: there is none)."""
    seen = set()
    for place in [*_own_places(), *_ROOTS]:
        if place not in seen and _can_hold_pids_children(place):
            return place
        seen.add(place)
    return None


def needed(processes: int | None) -> bool:
    """Whether ``processes`` needs a cgroup here (root ignores RLIMIT_NPROC)."""
    return processes is not None and os.geteuid() == 0


def problem(processes: int | None) -> str | None:
    """Why ``limits: processes`` cannot be enforced here, or ``None`` when it can."""
    if not needed(processes) or find_controller() is not None:
        return None
    return (
        f"'limits: processes: {processes}' cannot be enforced: pysb runs as root, "
        "which RLIMIT_NPROC does not limit, and no writable pids cgroup controller "
        "was found (pysb's own cgroup with the pids controller delegated, "
        "/sys/fs/cgroup/pids, or cgroup v2 with 'pids' in cgroup.subtree_control). "
        "Run pysb as a normal user, or enable the pids controller."
    )


class PidsCgroup:
    """A pids cgroup made for one launch and removed after it."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls, processes: int, *, owner: str = "pysb") -> PidsCgroup:
        """Make the cgroup; raise SandboxError (the run does not start) if impossible."""
        parent = find_controller()
        if parent is None:
            raise SandboxError(
                problem(processes) or f"no pids cgroup for 'limits: processes: {processes}'"
            )
        subtree = os.path.join(parent, "cgroup.subtree_control")
        if os.path.exists(subtree) and "pids" not in _words(subtree):
            try:
                with open(subtree, "w") as f:
                    f.write("+pids")  # v2: enable the controller for the children
            except OSError:
                pass
        path = os.path.join(parent, f"{owner}-{os.getpid()}-{next(_counter)}")
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
                f"could not make a pids cgroup for 'limits: processes' under {parent}: "
                f"{exc.strerror or exc}"
            ) from None
        return cls(path)

    @property
    def procs(self) -> str:
        """Its ``cgroup.procs``: writing ``0`` to it moves the writing process in."""
        return os.path.join(self.path, "cgroup.procs")

    def join_self(self) -> None:
        """Move the calling process into the cgroup (runs between fork and exec)."""
        fd = os.open(self.procs, os.O_WRONLY)
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
