"""The system calls a learning run watches in the programs it executes, and their meaning.

Each watched call is a :class:`Call`: the ``(dirfd argument, path argument)`` pairs it
names, the files guard's kind of access (``open``, ``stat``, ``mkdir``, ``write``,
``chdir``, ``exec``) and how to tell a write and a no-follow access from its arguments;
network calls name where their address is. Only the native ABI of x86_64 and aarch64 is
watched (the filter lets foreign ABIs through unwatched; docs/learning.md).

Loaded in the sandboxed interpreter too (the filter is built from these numbers): only
built-in modules.
"""

from __future__ import annotations

import os

#: ``dirfd`` value meaning "the working directory".
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000


class Call:
    """One watched system call.

    ``paths``: ``(dirfd arg or None, path arg)`` pairs; ``kind``: the access kind;
    ``write``: always a write, or ``"open"`` (the open flags say: argument ``flags``),
    ``"how"`` (``openat2``: the flags are the first word of the struct at ``flags``);
    ``nofollow``: True (never follows the last link), False (always follows), or an
    ``(argument, bit)`` pair; ``net``: ``"addr"`` (sockaddr at argument ``addr``, length
    at ``addr + 1``), ``"msg"`` (a ``struct msghdr`` at argument 1), or None.
    """

    __slots__ = ("addr", "flags", "kind", "net", "nofollow", "paths", "write")

    def __init__(
        self,
        kind: str,
        paths: tuple[tuple[int | None, int], ...] = (),
        *,
        write: bool | str = False,
        flags: int = 0,
        nofollow: bool | tuple[int, int] = False,
        net: str | None = None,
        addr: int = 1,
    ) -> None:
        self.kind, self.paths, self.write, self.flags = kind, paths, write, flags
        self.nofollow, self.net, self.addr = nofollow, net, addr


_P0 = ((None, 0),)
_AT = ((0, 1),)
_NOFOLLOW_A3 = (3, AT_SYMLINK_NOFOLLOW)

#: name -> meaning, for every call watched on some machine.
CALLS: dict[str, Call] = {
    "open": Call("open", _P0, write="open", flags=1),
    "openat": Call("open", _AT, write="open", flags=2),
    "openat2": Call("open", _AT, write="how", flags=2),
    "creat": Call("write", _P0, write=True),
    "stat": Call("stat", _P0),
    "lstat": Call("stat", _P0, nofollow=True),
    "newfstatat": Call("stat", _AT, nofollow=_NOFOLLOW_A3),
    "statx": Call("stat", _AT, nofollow=(2, AT_SYMLINK_NOFOLLOW)),
    "access": Call("stat", _P0),
    "faccessat": Call("stat", _AT),
    "faccessat2": Call("stat", _AT, nofollow=_NOFOLLOW_A3),
    "readlink": Call("stat", _P0, nofollow=True),
    "readlinkat": Call("stat", _AT, nofollow=True),
    "execve": Call("exec", _P0),
    "execveat": Call("exec", _AT),
    "chdir": Call("chdir", _P0),
    "mkdir": Call("mkdir", _P0, write=True, nofollow=True),
    "mkdirat": Call("mkdir", _AT, write=True, nofollow=True),
    "mknod": Call("write", _P0, write=True, nofollow=True),
    "mknodat": Call("write", _AT, write=True, nofollow=True),
    "rmdir": Call("write", _P0, write=True, nofollow=True),
    "unlink": Call("write", _P0, write=True, nofollow=True),
    "unlinkat": Call("write", _AT, write=True, nofollow=True),
    "rename": Call("write", ((None, 0), (None, 1)), write=True, nofollow=True),
    "renameat": Call("write", ((0, 1), (2, 3)), write=True, nofollow=True),
    "renameat2": Call("write", ((0, 1), (2, 3)), write=True, nofollow=True),
    "link": Call("write", ((None, 0), (None, 1)), write=True, nofollow=True),
    "linkat": Call("write", ((0, 1), (2, 3)), write=True, nofollow=True),
    "symlink": Call("write", ((None, 1),), write=True, nofollow=True),
    "symlinkat": Call("write", ((1, 2),), write=True, nofollow=True),
    "truncate": Call("write", _P0, write=True),
    "chmod": Call("write", _P0, write=True),
    "fchmodat": Call("write", _AT, write=True),
    "fchmodat2": Call("write", _AT, write=True, nofollow=_NOFOLLOW_A3),
    "chown": Call("write", _P0, write=True),
    "lchown": Call("write", _P0, write=True, nofollow=True),
    "fchownat": Call("write", _AT, write=True, nofollow=(4, AT_SYMLINK_NOFOLLOW)),
    "utime": Call("write", _P0, write=True),
    "utimes": Call("write", _P0, write=True),
    "futimesat": Call("write", _AT, write=True),
    "utimensat": Call("write", _AT, write=True, nofollow=_NOFOLLOW_A3),
    "connect": Call("connect", net="addr", addr=1),
    "bind": Call("bind", net="addr", addr=1),
    "sendto": Call("sendto", net="addr", addr=4),
    "sendmsg": Call("sendmsg", net="msg"),
}

#: machine -> name -> number (the native ABI).
NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {
        "open": 2, "stat": 4, "lstat": 6, "access": 21, "connect": 42, "sendto": 44,
        "sendmsg": 46, "bind": 49, "execve": 59, "truncate": 76, "chdir": 80, "rename": 82,
        "mkdir": 83, "rmdir": 84, "creat": 85, "link": 86, "unlink": 87, "symlink": 88,
        "readlink": 89, "chmod": 90, "chown": 92, "lchown": 94, "utime": 132, "mknod": 133,
        "utimes": 235, "openat": 257, "mkdirat": 258, "mknodat": 259, "fchownat": 260,
        "futimesat": 261, "newfstatat": 262, "unlinkat": 263, "renameat": 264,
        "linkat": 265, "symlinkat": 266, "readlinkat": 267, "fchmodat": 268,
        "faccessat": 269, "utimensat": 280, "renameat2": 316, "execveat": 322,
        "statx": 332, "openat2": 437, "faccessat2": 439, "fchmodat2": 452,
    },
    "aarch64": {
        "mknodat": 33, "mkdirat": 34, "unlinkat": 35, "symlinkat": 36, "linkat": 37,
        "renameat": 38, "truncate": 45, "faccessat": 48, "chdir": 49, "fchmodat": 53,
        "fchownat": 54, "openat": 56, "readlinkat": 78, "newfstatat": 79, "utimensat": 88,
        "bind": 200, "connect": 203, "sendto": 206, "sendmsg": 211, "execve": 221,
        "renameat2": 276, "execveat": 281, "statx": 291, "openat2": 437,
        "faccessat2": 439, "fchmodat2": 452,
    },
}  # fmt: skip

EXEC_CALLS = ("execve", "execveat")


def by_number(machine: str) -> dict[int, tuple[str, Call]]:
    """number -> (name, meaning) for ``machine``'s native ABI."""
    return {nr: (name, CALLS[name]) for name, nr in NUMBERS.get(machine, {}).items()}


#: Open flags that make an open a write: an access mode, creating, truncating.
OPEN_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
#: ``O_TMPFILE`` (a file made in a directory) holds ``O_DIRECTORY``'s bit: all bits count.
O_TMPFILE = getattr(os, "O_TMPFILE", 0)


def is_write(call: Call, flags: int) -> bool:
    """Whether one call writes, given its open flags (``flags``, when it has some)."""
    if call.write is True:
        return True
    if call.write in ("open", "how"):
        return bool(flags & OPEN_WRITE) or bool(O_TMPFILE and flags & O_TMPFILE == O_TMPFILE)
    return False


def follows(call: Call, args: tuple[int, ...], flags: int) -> bool:
    """Whether the call follows a link in the last component of its path."""
    if call.write in ("open", "how") and flags & os.O_NOFOLLOW:
        return False
    if call.nofollow is True:
        return False
    if isinstance(call.nofollow, tuple):
        arg, bit = call.nofollow
        return not args[arg] & bit
    return True
