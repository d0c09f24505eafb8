"""The Landlock system calls, through the kit's C calls, with no other dependency.

Landlock has no glibc wrappers, so we call ``syscall(2)`` with the numbers of the unified
syscall table (444-446: the same on x86_64, aarch64, arm, riscv, powerpc, s390x; only alpha
differs). Everything here is small and synchronous so that the sandboxed interpreter pays
a few hundred microseconds, not an extra process.

Access rights follow ``include/uapi/linux/landlock.h``; which of them a kernel knows is
given by its ABI version (probed with ``LANDLOCK_CREATE_RULESET_VERSION``). A right the
kernel knows is always *handled* (denied unless a rule grants it), so the sandbox is as
tight as the kernel allows.
"""

from __future__ import annotations

import errno
import os
import stat

from pysb_core.providerkit import CLong
from pysb_landlock import _libc

# -- syscall numbers ----------------------------------------------------------------------

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
#: openat2(2): the same number on every architecture (Linux >= 5.6, older than Landlock).
_SYS_OPENAT2 = 437
_AT_FDCWD = -100
_RESOLVE_NO_SYMLINKS = 0x04
#: Machines known to use the unified syscall table for these calls.
_SUPPORTED_MACHINES = frozenset(
    {
        "x86_64",
        "amd64",
        "aarch64",
        "arm64",
        "armv7l",
        "armv8l",
        "i386",
        "i686",
        "riscv64",
        "ppc64le",
        "ppc64",
        "s390x",
        "loongarch64",
        "mips64",
    }
)

_PR_SET_NO_NEW_PRIVS = 38
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2

# -- filesystem rights (ABI in the comment where it is > 1) ---------------------------------

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

#: Rights that make sense on a file (not a directory); the kernel rejects the others.
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

#: Read-only exposure: read and execute, list directories.
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
#: Read-write exposure. MAKE_CHAR and MAKE_BLOCK are deliberately absent: a root process
#: that may create a device node in a writable directory could open a disk through it.
FS_WRITE = (
    FS_READ
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE
    | FS_IOCTL_DEV
)
#: An existing device node used read-write (/dev/null, the terminal).
FS_DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV


# Bound at import time, before the Python guards patch ``os`` (see _libc.py): fstat
# raises no audit event, and opening goes through libc directly.
_os_fstat = os.fstat


class LandlockError(OSError):
    """A Landlock system call failed (``errno`` set) or the kernel lacks what is needed."""


def handled_fs(abi: int) -> int:
    """Every filesystem right the kernel of this ABI knows (so all of them are denied
    unless granted)."""
    if abi < 1:
        return 0
    rights = (FS_MAKE_SYM << 1) - 1  # ABI 1: bits 0..12
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def handled_net(abi: int) -> int:
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


# -- the kernel's structures (include/uapi/linux/landlock.h, openat2.h) ---------------------


def _ruleset_attr(handled_fs: int, handled_net: int, scoped: int) -> bytes:
    """``struct landlock_ruleset_attr``: three ``__u64``, 24 bytes; the kernel reads only the
    prefix that matches the size passed (ABI-dependent)."""
    return _libc.fields((handled_fs, 8), (handled_net, 8), (scoped, 8))


def _path_beneath_attr(allowed_access: int, parent_fd: int) -> bytes:
    """``struct landlock_path_beneath_attr``: ``__u64`` and ``__s32``, packed: 12 bytes."""
    return _libc.fields((allowed_access, 8), (parent_fd, 4))


def _net_port_attr(allowed_access: int, port: int) -> bytes:
    """``struct landlock_net_port_attr``: two ``__u64``, 16 bytes."""
    return _libc.fields((allowed_access, 8), (port, 8))


def _open_how(flags: int, mode: int, resolve: int) -> bytes:
    """``struct open_how``: three ``__u64``, 24 bytes."""
    return _libc.fields((flags, 8), (mode, 8), (resolve, 8))


def open_path(path: str, *, no_symlinks: bool) -> int:
    """An ``O_PATH`` fd for ``path`` (-1 and errno on failure). With ``no_symlinks`` the
    kernel refuses (ELOOP) a path with a symbolic link anywhere in it: the rule is then
    bound to the very directory the profile named, even if a component was swapped for a
    link after the profile was read (issue 22)."""
    if not no_symlinks:
        return int(_libc.open_(os.fsencode(path), os.O_PATH | os.O_CLOEXEC))
    how = _open_how(os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE_NO_SYMLINKS)
    return _syscall(
        CLong(_SYS_OPENAT2),
        _AT_FDCWD,
        os.fsencode(path),
        _libc.memory(how),
        CLong(len(how)),
    )


def _syscall(*args: object) -> int:
    return int(_libc.syscall(*args))


def _check(result: int, what: str) -> int:
    if result < 0:
        err = _libc.get_errno()
        raise LandlockError(err, f"{what}: {os.strerror(err)}")
    return result


def machine_supported() -> bool:
    uname = os.uname()
    return uname.sysname == "Linux" and uname.machine.lower() in _SUPPORTED_MACHINES


def abi_version() -> int:
    """The kernel's Landlock ABI, or raise :class:`LandlockError` saying why there is none
    (ENOSYS: not built in; EOPNOTSUPP: built in but not enabled at boot)."""
    if not machine_supported():
        uname = os.uname()
        raise LandlockError(0, f"Landlock is not supported on {uname.sysname} {uname.machine}")
    res = _syscall(CLong(_SYS_CREATE_RULESET), None, CLong(0), _CREATE_RULESET_VERSION)
    return _check(res, "landlock_create_ruleset(VERSION)")


def no_new_privs() -> None:
    """Required before restrict_self for an unprivileged process; set it always (no
    set-uid binary may regain what the sandbox took away)."""
    args = (_PR_SET_NO_NEW_PRIVS, *(CLong(v) for v in (1, 0, 0, 0)))
    _check(_libc.prctl(*args), "prctl(PR_SET_NO_NEW_PRIVS)")


class Ruleset:
    """An open ruleset fd: add rules, then :meth:`restrict_self` (or :meth:`close`)."""

    def __init__(
        self, abi: int, *, net: int | None = None, scope: bool = True, abstract_scope: bool = True
    ) -> None:
        """``net`` narrows which TCP operations are handled (``None``: all the ABI knows);
        an operation left unhandled is not restricted at all. ``scope`` scopes signals and,
        with ``abstract_scope``, abstract Unix sockets."""
        self.abi = abi
        self.handled_fs = handled_fs(abi)
        self.handled_net = handled_net(abi) if net is None else net & handled_net(abi)
        self.scoped = scopes(abi) if scope else 0
        if not abstract_scope:
            self.scoped &= ~SCOPE_ABSTRACT_UNIX_SOCKET
        attr = _libc.memory(_ruleset_attr(self.handled_fs, self.handled_net, self.scoped))
        size = 8 if abi < 4 else 16 if abi < 6 else 24
        self.fd = _check(
            _syscall(CLong(_SYS_CREATE_RULESET), attr, CLong(size), 0),
            "landlock_create_ruleset",
        )

    def add_path(self, path: str, access: int, *, no_symlinks: bool = False) -> bool:
        """Grant ``access`` beneath ``path`` (a file gets only file rights). Return False when
        the path does not exist (nothing granted: fail closed). ``no_symlinks``: ``path``
        is canonical (a profile's exposure) and must still be; a symbolic link in it now
        is an error, never followed."""
        fd = open_path(path, no_symlinks=no_symlinks)
        if fd < 0:
            err = _libc.get_errno()
            if no_symlinks and err == errno.ELOOP:
                raise LandlockError(
                    err,
                    f"{path}: a component of this exposure was replaced by a symbolic link "
                    "after the profile was read; refusing to follow it",
                )
            if err in (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP):
                return False
            raise LandlockError(err, f"open({path!r}, O_PATH): {os.strerror(err)}")
        try:
            if not stat.S_ISDIR(_os_fstat(fd).st_mode):
                access &= FS_FILE_RIGHTS
            access &= self.handled_fs
            if not access:
                return False
            attr = _libc.memory(_path_beneath_attr(access, fd))
            _check(
                _syscall(CLong(_SYS_ADD_RULE), self.fd, _RULE_PATH_BENEATH, attr, 0),
                f"landlock_add_rule({path!r})",
            )
            return True
        finally:
            _libc.close(fd)

    def add_port(self, port: int, access: int) -> None:
        access &= self.handled_net
        if not access:
            return
        attr = _libc.memory(_net_port_attr(access, port))
        _check(
            _syscall(CLong(_SYS_ADD_RULE), self.fd, _RULE_NET_PORT, attr, 0),
            f"landlock_add_rule(port {port})",
        )

    def restrict_self(self) -> None:
        """Enforce the ruleset on the calling thread (and everything it later starts)."""
        try:
            no_new_privs()
            _check(
                _syscall(CLong(_SYS_RESTRICT_SELF), self.fd, 0),
                "landlock_restrict_self",
            )
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            _libc.close(self.fd)
            self.fd = -1
