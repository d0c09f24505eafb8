"""As root, every mount is read-only outside the writable exposures (issue 26 #8).

Landlock does not mediate metadata: ``chmod``, ``chown`` (to a group of its own), ``utime``
and the like succeed on any file the process owns, whatever the rules, and a root process
owns every system file. Seccomp sees a path only as a pointer. What the kernel checks for
every one of those calls, whoever the caller, is the mount: on a read-only mount they fail
with ``EROFS``. So for root, who holds ``CAP_SYS_ADMIN`` until :mod:`caps` drops it moments
later, :func:`read_only_outside` runs before the ruleset is enforced:

1. ``unshare(CLONE_NEWNS)``, and every mount made private (nothing propagates to or from
   the host; the namespace ends with the sandbox);
2. each writable exposure's mount tree cloned (``open_tree(OPEN_TREE_CLONE|AT_RECURSIVE)``:
   a detached copy in which every mount keeps its own flags, so what was read-only on the
   host stays so);
3. every mount marked read-only (``mount_setattr("/", AT_RECURSIVE, MOUNT_ATTR_RDONLY)``);
4. each copy attached over its exposure, outermost first (``move_mount``), and the working
   directory entered again through the new mounts.

Inside the writable exposures writes and metadata changes work as before (Landlock still
decides which); outside them every metadata call fails with ``EROFS``. Device nodes
(``/dev/null``, terminals) stay writable on a read-only mount, and Landlock already refused
every other write there. Afterwards the seccomp filter refuses the mount API and Landlock
refuses ``mount``/``umount``, and no capability is left to undo it. A normal user owns only
their own files, and has no ``CAP_SYS_ADMIN``: nothing changes for them (docs/providers.md,
landlock, "Metadata").
"""

from __future__ import annotations

import errno
import os

from pysb_core.providerkit import CLong, is_within
from pysb_landlock import _libc
from pysb_landlock.ruleset import open_path

CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH = 1, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100
#: machine -> (unshare, mount); open_tree, move_mount and mount_setattr share their numbers.
_SYS = {"x86_64": (272, 165), "aarch64": (97, 40)}
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442


def _mount_attr(attr_set: int) -> bytes:
    """``struct mount_attr``: ``attr_set``, ``attr_clr``, ``propagation``, ``userns_fd``,
    four ``__u64`` (32 bytes), only ``attr_set`` given."""
    return _libc.fields((attr_set, 8), (0, 8), (0, 8), (0, 8))


def needed(write: list[str]) -> bool:
    """Root, and not every path writable anyway (``expose-rw: [/]``)."""
    return os.geteuid() == 0 and "/" not in write


def _check(result: int, what: str) -> int:
    if result < 0:
        err = _libc.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def outermost(write: list[str]) -> list[str]:
    """The writable paths that lie in no other one (a copy brings its nested mounts)."""
    kept: list[str] = []
    for path in sorted(set(write), key=lambda p: (p.count("/"), p)):
        if not any(is_within(path, k) for k in kept):
            kept.append(path)
    return kept


def read_only_outside(write: list[str], exact: frozenset[str]) -> None:
    """Steps 1-4 of the module's docstring; an ``OSError`` leaves the run unstarted."""
    nr = _SYS.get(os.uname().machine)
    if nr is None:
        raise OSError(errno.ENOSYS, f"no mount system calls known for {os.uname().machine}")
    syscall = _libc.syscall
    _check(syscall(CLong(nr[0]), CLong(CLONE_NEWNS)), "unshare(CLONE_NEWNS)")
    _check(
        syscall(CLong(nr[1]), None, b"/", None, CLong(MS_REC | MS_PRIVATE), None),
        "making the mounts private",
    )
    copies: list[tuple[int, int]] = []  # (detached copy, where it goes)
    try:
        for path in outermost(write):
            target = open_path(path, no_symlinks=path in exact)
            if target < 0:
                err = _libc.get_errno()
                if err in (errno.ENOENT, errno.ENOTDIR):
                    continue  # Landlock grants nothing there either
                raise OSError(err, f"{path}: {os.strerror(err)}")
            try:
                copy = _check(
                    syscall(CLong(SYS_OPEN_TREE), target, b"",
                            OPEN_TREE_CLONE | AT_RECURSIVE | AT_EMPTY_PATH | os.O_CLOEXEC),
                    f"copying the mounts of {path}",
                )  # fmt: skip
            except OSError:
                _libc.close(target)
                raise
            copies.append((copy, target))
        attr = _mount_attr(MOUNT_ATTR_RDONLY)
        _check(
            syscall(CLong(SYS_MOUNT_SETATTR), AT_FDCWD, b"/", AT_RECURSIVE,
                    _libc.memory(attr), CLong(len(attr))),
            "making every mount read-only",
        )  # fmt: skip
        for copy, target in copies:
            _check(
                syscall(CLong(SYS_MOVE_MOUNT), copy, b"", target, b"",
                        MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
                "attaching a writable exposure again",
            )  # fmt: skip
    finally:
        for copy, target in copies:
            _libc.close(copy)
            _libc.close(target)
    # The working directory still names the mount it was entered through (now read-only).
    _check(_libc.chdir(os.fsencode(os.getcwd())), "entering the working directory again")
