"""A read-only root mount before firejail starts, when pysb runs as root.

firejail makes every whitelisted path a bind mount of its own, and the bind mount takes
the per-mount flags of its source. Its source is the host's root mount, writable, so
``--read-only=/work`` then remounts each whitelisted path below ``/work`` one by one:
a bind mount onto itself, a remount, and a fresh read of the whole (growing) mount table
to check it, about 0.35 ms each on this machine, 4-5 ms for pysb's ~15 interpreter and
source directories. Made from a source that is read-only already, the bind mounts are
read-only from the start and firejail's remounts find nothing left to do.

So the forked child, right before it executes firejail, makes a mount namespace of its
own (together with the network namespace of :mod:`pysb_firejail.netns`) and, in it:

1. marks every mount a slave (``MS_REC | MS_SLAVE``): nothing mounted here reaches the
   host;
2. when ``/run/firejail`` lies on the root mount (no tmpfs ``/run``), binds it onto
   itself, so that firejail's own bookkeeping there (its host-side process writes
   ``/run/firejail/sandbox/PID`` and the like) stays writable and lands in the host's
   directory;
3. remounts the root mount read-only (``MS_REMOUNT | MS_BIND | MS_RDONLY``, its other
   per-mount flags kept): a flag of this namespace's copy of the mount, no new mount.

The command is the same with or without this step (firejail's own ``--read-only``
entries, ``--read-only=/`` among them, still say how every path ends up), so the step
changes what firejail has to do, not the sandbox. firejail reads its configuration and
everything else as before: only writability changes. A failure raises in the child,
which fails the launch (exit 125); firejail, which makes its own mounts slaves the same
way, could not start where that fails either. A normal user cannot make a mount
namespace without a user namespace, in which firejail's set-uid start does not work:
there nothing changes.
"""

from __future__ import annotations

import os

from pysb_firejail.hostfs import FIREJAIL_RUN

TYPE_CHECKING = False  # imported by firejail runs: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 0x80000
#: Per-mount flags a bind remount sets from its arguments; ``statvfs`` reports them with
#: the same values (``ST_NOSUID``...). The atime flags are left out: a remount without
#: any keeps them as they are.
_KEPT = MS_NOSUID | MS_NODEV | MS_NOEXEC


def usable(*, as_root: bool, root_writable: bool) -> bool:
    """pysb runs as root, the profile does not expose ``/`` read-write, and firejail's
    ``/run/firejail`` exists (firejail could not create it on a read-only root)."""
    return as_root and not root_writable and os.path.isdir(FIREJAIL_RUN)


def firejail_run_on_root() -> bool:
    """``/run/firejail`` lies on the root file system (no tmpfs ``/run``): then it gets a
    mount of its own, which stays writable (a separate mount of the same file system
    would get one more: harmless)."""
    return os.stat(FIREJAIL_RUN).st_dev == os.stat("/").st_dev


def remount_flags(st_flags: int) -> int:
    """The flags that remount the root read-only and keep its other per-mount flags."""
    return MS_REMOUNT | MS_BIND | MS_RDONLY | (st_flags & _KEPT)


def read_only_root(*, bind_firejail_run: bool) -> Callable[[], None]:
    """A step for the forked child, after ``unshare(CLONE_NEWNS)``: the list above.
    Everything it needs is resolved here, in the parent (no imports after ``fork``)."""
    from pysb_core.providerkit import CLong, c_errno, c_function

    libc_mount = c_function("mount")
    get_errno = c_errno
    long = CLong  # mount's flags are an unsigned long
    remount = remount_flags(os.statvfs("/").f_flag)
    run = FIREJAIL_RUN.encode()

    def mount(source: bytes | None, target: bytes, flags: int) -> None:
        if libc_mount(source, target, None, long(flags), None) != 0:
            err = get_errno()
            raise OSError(err, f"mount({target.decode()}, {flags:#x}): {os.strerror(err)}")

    def step() -> None:
        mount(None, b"/", MS_REC | MS_SLAVE)
        if bind_firejail_run:
            mount(run, run, MS_BIND | MS_REC)
        mount(None, b"/", remount)

    return step
