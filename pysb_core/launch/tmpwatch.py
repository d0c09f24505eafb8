"""``limits: tmp`` for a private temporary directory on the host's disk (SPEC §4).

Under a provider with a mount namespace the private ``/tmp`` is a tmpfs of that size, and
the kernel answers ``ENOSPC`` past it. Under ``subprocess`` and ``landlock`` it is a host
directory (:mod:`pysb_core.launch.tmpdir`): no unprivileged mechanism bounds the size of one
directory (``RLIMIT_FSIZE`` bounds every file the program writes, exposures included; a
tmpfs or a quota needs privileges), so pysb's parent watches it instead: every
:data:`INTERVAL` seconds while it waits for the sandbox it adds up the blocks allocated
below the directory (``st_blocks``, so a ``fallocate`` counts and a sparse hole does not;
each inode once), and past the limit it ends the sandbox with exit status 153
(128 + ``SIGXFSZ``, the signal of a file size limit) and a message naming the limit.

firejail's private ``/tmp`` and ``/dev/shm`` are tmpfs mounts it makes without a size
(its options have none): they are watched the same way, through directory descriptors
pysb's bootstrap opens inside the sandbox before the program runs and hands out over a
socket (``SCM_RIGHTS``). ``/proc/PID/root`` would not do: a normal user's firejail sandbox
lives in a user namespace of its own (``--noroot``), and the kernel refuses the user
access to the ``/proc`` links of its processes (the watch then saw nothing at all). No
descriptor arriving by the time the channel closes ends the run: a watch that cannot
watch fails closed.

Not a boundary, and said so in docs/security.md: what the program writes within one
interval lands before it is seen, and a file it unlinked while keeping it open is not
seen at all (its blocks stay allocated until it closes it, at the end of the run).
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # imported by every `pysb run`: no collections at start
if TYPE_CHECKING:
    from collections.abc import Iterator

#: Seconds between two measurements.
INTERVAL = 0.2
#: The exit status of a run ended by this limit (128 + SIGXFSZ).
EXIT_STATUS = 153


class TmpWatch:
    """The measurement of one sandbox's temporary directories against its limit.

    ``host`` are host directories; ``inside`` are paths inside the sandbox's own mount
    namespace (firejail's private ``/tmp`` and ``/dev/shm``, tmpfs without a size), whose
    descriptors arrive on ``channel`` (sent by pysb's bootstrap: ``pysb_core.child.bootstrap``).
    """

    INTERVAL = INTERVAL
    EXIT_STATUS = EXIT_STATUS

    def __init__(
        self,
        host: list[str],
        limit: int,
        source: str,
        *,
        inside: list[str] | None = None,
        channel: int | None = None,
    ) -> None:
        self.host = host
        self.inside = inside or []
        self.limit = limit
        self.source = source
        self.used = 0
        self.failure: str | None = None
        self._channel = channel if self.inside else None
        self._inside_fds: list[int] = []
        self._next = 0.0

    def exceeded(self) -> bool:
        """Measure (at most every INTERVAL seconds); True once the limit is passed (or the
        directories inside could not be watched)."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + INTERVAL
        self._receive()
        if self.failure is not None:
            return True
        try:
            used = [usage(d) for d in self.host] + [usage_fd(fd) for fd in self._inside_fds]
        except TooDeep as exc:
            self.failure = str(exc)
            return True
        self.used = max(used, default=0)  # each directory is bounded on its own, as a tmpfs
        return self.used > self.limit

    def _receive(self) -> None:
        """Take the sandbox's directory descriptors once they are sent (not yet: later)."""
        if self._channel is None:
            return
        import _socket as socket  # the C module: socket.py imports enum, selectors...
        import _struct  # not array: importing array imports collections (~1 ms)

        size = _struct.calcsize("i")
        fds: list[int] = []
        sock = socket.socket(fileno=os.dup(self._channel))
        sock.setblocking(False)  # (socket.recv_fds would ignore its flags)
        try:
            _msg, ancdata, _flags, _addr = sock.recvmsg(
                64, socket.CMSG_SPACE(8 * size), socket.MSG_CMSG_CLOEXEC
            )
        except BlockingIOError:
            return  # the bootstrap has not run yet
        except OSError:
            ancdata = []
        finally:
            sock.close()
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                count = len(data) // size
                fds.extend(_struct.unpack(f"{count}i", data[: count * size]))
        os.close(self._channel)
        self._channel = None
        import stat

        for fd in fds:  # hostile-proof: only directories are kept, and at most 8 of them
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                self._inside_fds.append(fd)
            else:
                os.close(fd)
        if len(self._inside_fds) != len(self.inside):
            self.failure = (
                "the sandbox did not hand its private temporary directories to pysb's "
                "watch, so their size could not be bounded"
            )

    def close(self) -> None:
        """Close the channel and the descriptors (the run has ended)."""
        for fd in [*self._inside_fds, *([self._channel] if self._channel is not None else [])]:
            os.close(fd)
        self._inside_fds, self._channel = [], None

    def message(self) -> str:
        from pysb_core.builtin.oslayer import limit_text

        if self.failure is not None:
            return (
                f"tmp limit of {limit_text('memory', self.limit)} ({self.source}): "
                f"{self.failure}; the sandbox was ended"
            )
        return (
            f"tmp limit of {limit_text('memory', self.limit)} reached ({self.source}): the "
            f"private temporary directory (or /dev/shm) held {self.used} bytes; the sandbox "
            "was ended"
        )


def usage(directory: str) -> int:
    """Bytes allocated below ``directory`` (each inode once; links never followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [directory]
    while stack:
        top = stack.pop()
        try:
            entries = os.scandir(top)
        except OSError:
            continue
        nbytes, subdirs = _count(entries, seen)
        total += nbytes
        stack += [os.path.join(top, name) for name in subdirs]
    return total


def _count(entries: Iterator[os.DirEntry], seen: set[tuple[int, int]]) -> tuple[int, list[str]]:
    """Bytes allocated by the entries of one directory not ``seen`` before (links not
    followed), and the names of its subdirectories. Closes ``entries``."""
    total = 0
    subdirs = []
    try:
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
    except OSError:
        pass
    return total, subdirs


#: Directory levels :func:`usage_fd` descends (a descriptor is open for each level).
MAX_DEPTH = 256


class TooDeep(Exception):
    """A tree inside the sandbox is deeper than :data:`MAX_DEPTH`: not measurable."""


def usage_fd(top: int) -> int:
    """Bytes allocated below the directory open as ``top`` (each inode once), walked
    through descriptors: each directory is opened from its parent's with ``O_NOFOLLOW``,
    so a link the program puts there never leads the walk out of its tree. Deeper than
    :data:`MAX_DEPTH` raises :class:`TooDeep` (fail closed: the run is ended)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    stack: list[tuple[int, list[str]]] = []

    def enter(fd: int) -> None:
        nonlocal total
        try:
            nbytes, subdirs = _count(os.scandir(fd), seen)
        except OSError:
            nbytes, subdirs = 0, []
        total += nbytes
        stack.append((fd, subdirs))

    enter(os.dup(top))
    try:
        while stack:
            fd, subdirs = stack[-1]
            if not subdirs:
                os.close(fd)
                stack.pop()
                continue
            name = subdirs.pop()
            try:
                sub = os.open(name, flags, dir_fd=fd)
            except OSError:
                continue
            if len(stack) >= MAX_DEPTH:
                os.close(sub)
                raise TooDeep(
                    f"a directory tree in the sandbox's temporary directory is deeper than "
                    f"{MAX_DEPTH} levels, so its size could not be measured"
                )
            enter(sub)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return total
