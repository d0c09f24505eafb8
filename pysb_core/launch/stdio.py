"""Standard streams that are files on the host never reach the sandbox as those files.

A file descriptor is a capability to the file it was opened on, and on Linux more than
that: ``/proc/self/fd/N`` reopens the *file*, with any mode its permissions allow. A file
given as stdin (read-only) would become writable inside, a log given as stderr readable.
So when a standard stream is a regular file (or a directory or block device), the sandbox
gets a pipe instead and pysb copies the bytes across. Terminals, pipes and sockets pass
through unchanged: they carry only the stream.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # imported by every `pysb run` under a confining provider
if TYPE_CHECKING:
    import threading

_FILE_KINDS = (stat.S_ISREG, stat.S_ISDIR, stat.S_ISBLK)


def _is_file(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return any(kind(mode) for kind in _FILE_KINDS)


def _pump(src: int, dst: int, close_dst: bool) -> None:
    import _signal as signal

    from pysb_core.launch.execute import FORWARDED

    # Signals sent to pysb are the main thread's to forward (pysb_core.launch.execute.wait).
    signal.pthread_sigmask(signal.SIG_BLOCK, {*FORWARDED, signal.SIGCHLD})
    try:
        while True:
            try:
                chunk = os.read(src, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                try:
                    n = os.write(dst, view)
                except OSError:
                    return
                view = view[n:]
    finally:
        os.close(src)
        if close_dst:
            os.close(dst)


class StdioRelay:
    """Pipes in place of file-backed standard streams, and the threads that copy them."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.popen_kwargs: dict[str, int] = {}
        self._threads: list[threading.Thread] = []
        self._child_ends: list[int] = []
        self._starts: list[tuple[int, int, bool]] = []
        for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
            if not enabled or not _is_file(fd):
                continue
            r, w = os.pipe()
            if fd == 0:
                self.popen_kwargs[name] = r
                self._child_ends.append(r)
                self._starts.append((os.dup(0), w, True))
            else:
                self.popen_kwargs[name] = w
                self._child_ends.append(w)
                self._starts.append((r, fd, False))

    @classmethod
    def none(cls) -> StdioRelay:
        """A relay that relays nothing (no OS file boundary to protect)."""
        return cls(enabled=False)

    @property
    def active(self) -> bool:
        return bool(self._starts)

    def start(self) -> None:
        """After the sandbox is spawned: close the child's ends here, start copying."""
        for fd in self._child_ends:
            os.close(fd)
        self._child_ends.clear()
        if self._starts:  # `threading` (functools, collections) only for a relay that copies
            import threading
        for src, dst, close_dst in self._starts:
            t = threading.Thread(target=_pump, args=(src, dst, close_dst), daemon=True)
            t.start()
            self._threads.append(t)
        self._starts.clear()

    def finish(self, timeout: float = 5.0) -> None:
        """After the sandbox exited: let the copies drain (bounded: a process the program
        left running may hold a pipe open)."""
        for fd in self._child_ends:  # spawn failed: nothing was started
            os.close(fd)
        self._child_ends.clear()
        for src, dst, close_dst in self._starts:
            os.close(src)
            if close_dst:
                os.close(dst)
        self._starts.clear()
        for t in self._threads:
            t.join(timeout)
