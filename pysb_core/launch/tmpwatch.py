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
(its options have none): they are watched the same way, through ``/proc/PID/root`` of a
process of the sandbox.

Not a boundary, and said so in docs/security.md: what the program writes within one
interval lands before it is seen, and a file it unlinked while keeping it open is not
seen at all (its blocks stay allocated until it closes it, at the end of the run).
"""

from __future__ import annotations

import os
import time

#: Seconds between two measurements.
INTERVAL = 0.2
#: The exit status of a run ended by this limit (128 + SIGXFSZ).
EXIT_STATUS = 153


class TmpWatch:
    """The measurement of one sandbox's temporary directories against its limit.

    ``host`` are host directories; ``inside`` are paths inside the sandbox's own mount
    namespace (firejail's private ``/tmp`` and ``/dev/shm``, tmpfs without a size), read
    through ``/proc/PID/root`` of a process of the sandbox (a descendant of ``pid``, the
    host process pysb started, whose root is not the host's).
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
        pid: int | None = None,
    ) -> None:
        self.host = host
        self.inside = inside or []
        self.pid = pid
        self.limit = limit
        self.source = source
        self.used = 0
        self._next = 0.0

    def exceeded(self) -> bool:
        """Measure (at most every INTERVAL seconds); True once the limit is passed."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + INTERVAL
        used = [usage(d) for d in self.host]
        root = self._sandbox_root() if self.inside else None
        if root is not None:
            used += [usage(root + d) for d in self.inside]
        self.used = max(used, default=0)  # each directory is bounded on its own, as a tmpfs
        return self.used > self.limit

    def _sandbox_root(self) -> str | None:
        """``/proc/PID/root`` of a process of the sandbox in a mount namespace that is not
        pysb's (firejail keeps the host's root directory, in a namespace of its own)."""
        if self.pid is None:
            return None
        from pysb_core.linux.proctree import descendants

        try:
            ours = os.readlink("/proc/self/ns/mnt")
        except OSError:
            return None
        for pid in reversed(descendants(self.pid)):  # the program is the deepest
            try:
                if os.readlink(f"/proc/{pid}/ns/mnt") != ours:
                    return f"/proc/{pid}/root"
            except OSError:
                continue
        return None

    def message(self) -> str:
        from pysb_core.builtin.oslayer import limit_text

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
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
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
                    stack.append(entry.path)
    return total
