"""Reading a watched process: its strings, addresses, links and sockets, in its own view.

Everything read here was written by sandboxed code, so it is hostile data: every read is
bounded (a path at most ``PATH_MAX`` bytes, an address at most 128, a link chain at most
40 links), a path is kept only when it is valid UTF-8 without control characters, and a
failure of any read is an answer ("unknown"), never an exception out of the supervisor.
"""

from __future__ import annotations

import ctypes
import os
import re
import socket
import sys

PATH_MAX = 4096
_PAGE = os.sysconf("SC_PAGE_SIZE")
#: ``auxv`` entry holding the address of the 16 random bytes the kernel gives each exec.
AT_RANDOM = 25
_SYS_PIDFD_GETFD = 438
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def read_bytes(mem: int, address: int, size: int) -> bytes | None:
    """``size`` bytes at ``address`` of the process whose ``/proc/PID/mem`` is ``mem``."""
    if address <= 0 or size <= 0 or address >= 1 << 63:
        return None
    try:
        data = os.pread(mem, size, address)
    except (OSError, OverflowError, ValueError):
        return None
    return data if len(data) == size else None


def read_string(mem: int, address: int) -> bytes | None:
    """The NUL-terminated string at ``address`` (at most ``PATH_MAX`` bytes), read page by
    page so that a string ending just before an unmapped page is still read."""
    if address <= 0 or address >= 1 << 63:
        return None
    out = b""
    size = min(_PAGE - (address % _PAGE), 256)  # most paths are short: read a little first
    while len(out) < PATH_MAX:
        size = min(size, _PAGE - (address % _PAGE), PATH_MAX - len(out))
        try:
            chunk = os.pread(mem, size, address)
        except (OSError, OverflowError, ValueError):
            return None
        end = chunk.find(b"\0")
        if end >= 0:
            return out + chunk[:end]
        if len(chunk) < size:
            return None
        out += chunk
        address += size
        size = PATH_MAX
    return None  # longer than PATH_MAX: the kernel refuses it too (ENAMETOOLONG)


def text(raw: bytes) -> str | None:
    """A path as text: valid UTF-8 without control characters, else None (not learned)."""
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(decoded) else decoded


def identity(tid: int) -> tuple[int, bytes] | None:
    """``(thread group id, AT_RANDOM bytes)`` of thread ``tid``: the random bytes differ
    for every exec and are shared by a fork, so they tell the guarded interpreter (and
    its forks) from every program it executed."""
    try:
        with open(f"/proc/{tid}/status", "rb") as f:
            status = f.read(4096)
        with open(f"/proc/{tid}/auxv", "rb") as f:
            auxv = f.read(4096)
        tgid = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith(b"Tgid:")
        )
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    order = sys.byteorder
    for i in range(0, len(auxv) - 15, 16):
        if int.from_bytes(auxv[i : i + 8], order) == AT_RANDOM:
            address = int.from_bytes(auxv[i + 8 : i + 16], order)
            try:
                fd = os.open(f"/proc/{tid}/mem", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            try:
                random = read_bytes(fd, address, 16)
            finally:
                os.close(fd)
            return None if random is None else (tgid, random)
    return None


def link(tid: int, name: str) -> str | None:
    """``/proc/TID/NAME`` (``cwd``, ``fd/N``) as an absolute path, None when it is no path
    (a pipe, a socket, a deleted directory)."""
    try:
        target = os.readlink(f"/proc/{tid}/{name}")
    except OSError:
        return None
    if not target.startswith("/") or target.endswith(" (deleted)") or len(target) > PATH_MAX:
        return None
    return target


def canonical(path: str, follow: bool, tgid: int, tid: int) -> str | None:
    """``path`` (absolute) with its links resolved as the process ``tid`` sees them: its
    ``/proc/self`` and ``/proc/thread-self`` are its own, not pysb's (``/dev/stdin`` is a
    link to ``/proc/self/fd/0``); the last link is kept when ``follow`` is false. None for
    what is not a path (``/proc/PID/fd/N`` of a pipe)."""
    if not follow:
        head, _, tail = path.rstrip("/").rpartition("/")
        if tail not in ("", ".", ".."):
            base = canonical(head or "/", True, tgid, tid)
            return None if base is None else (base.rstrip("/") + "/" + tail)
    out = ""
    rest = [p for p in reversed(path.split("/")) if p and p != "."]
    links = 0
    missing = False
    while rest:
        name = rest.pop()
        if name == "..":
            out, missing = out[: out.rfind("/")], False
            continue
        candidate = out + "/" + name
        if missing or links > 40:
            out = candidate
            continue
        if candidate == "/proc/self":
            target = str(tgid)
        elif candidate == "/proc/thread-self":
            target = f"{tgid}/task/{tid}"
        else:
            try:
                target = os.readlink(candidate)
            except (FileNotFoundError, NotADirectoryError):
                missing, out = True, candidate
                continue
            except OSError:  # not a link (EINVAL), or unreadable
                out = candidate
                continue
        links += 1
        if candidate.startswith("/proc/") and not target.startswith("/") and ":[" in target:
            return None  # a pipe or socket the process holds
        if target.startswith("/"):
            out = ""
        rest.extend(p for p in reversed(target.split("/")) if p and p != ".")
    return out or "/"


def socket_type(pidfd: int, fd: int) -> tuple[int, int] | None:
    """``(family, type)`` of the process's descriptor ``fd`` (a copy taken with
    ``pidfd_getfd`` and closed at once), or None."""
    if not 0 <= fd < 1 << 31:
        return None
    copy = _libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
    if copy < 0:
        return None
    try:
        sock = socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        return None
    try:
        return int(sock.family), int(sock.type) & 0xF
    finally:
        sock.close()


def sockaddr(raw: bytes) -> tuple[str, str, int] | None:
    """``("inet", host, port)``, ``("unix", path, 0)`` or None for a ``struct sockaddr`` of
    exactly the length the call gave (one the kernel refuses as too short is None)."""
    if len(raw) < 2:
        return None
    family = int.from_bytes(raw[:2], sys.byteorder)
    if family == socket.AF_INET and len(raw) >= 16:  # shorter: the kernel says EINVAL
        host = socket.inet_ntop(socket.AF_INET, raw[4:8])
        return "inet", host, int.from_bytes(raw[2:4], "big")
    if family == socket.AF_INET6 and len(raw) >= 24:
        host = socket.inet_ntop(socket.AF_INET6, raw[8:24])
        return "inet", host, int.from_bytes(raw[2:4], "big")
    if family == socket.AF_UNIX and len(raw) > 2 and raw[2] != 0:
        name = text(raw[2:].split(b"\0", 1)[0])
        return None if name is None else ("unix", name, 0)
    return None
