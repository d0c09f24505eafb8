"""bwrap's own set-up failure, told apart from the program's exit status.

bwrap exits 1 with its message on stderr (``bwrap: Can't make symlink at /bin: File
exists``) when it cannot build the sandbox -- the same status as a program that exits 1.
With ``--json-status-fd`` bwrap writes ``{"exit-code": N}`` when the sandboxed program
ends, and nothing of the kind when its set-up failed before the program ran. So the
launched process reads that pipe once bwrap has exited: status 1 without an exit code is
bwrap's failure, reported as pysb's (``pysb: error:``, exit 125) after bwrap's own words.
"""

from __future__ import annotations

import os
import sys

from pysb_core.wrapper_process import WrapperProcess

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    import subprocess

SETUP_FAILED = (
    "pysb: error: bwrap could not set the sandbox up (its own message, above, says what "
    "failed); the program was not started\n"
)


class BwrapProcess(WrapperProcess):
    """A bwrap host process whose set-up failure becomes status 125 with pysb's words."""

    status_fd: int | None = None

    def _judge_exit(self) -> None:
        fd, self.status_fd = self.status_fd, None
        if fd is None:
            return
        try:
            data = b""
            if self.returncode == 1:
                os.set_blocking(fd, False)
                while True:
                    try:
                        chunk = os.read(fd, 4096)
                    except BlockingIOError:
                        break
                    if not chunk:
                        break
                    data += chunk
                if b'"exit-code"' not in data:
                    sys.stderr.write(SETUP_FAILED)
                    sys.stderr.flush()
                    self.returncode = 125
        finally:
            os.close(fd)

    def poll(self) -> int | None:
        status = super().poll()
        if status is not None and self.status_fd is not None:
            self._judge_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        super().wait(timeout)
        if self.status_fd is not None:
            self._judge_exit()
        return self.returncode  # type: ignore[return-value]


def watch(status_r: int) -> object:
    """``on_started`` hook (after :func:`pysb_core.wrapper_process.adopt`): the process
    becomes a :class:`BwrapProcess` reading its own copy of the status pipe."""

    def started(proc: subprocess.Popen[bytes]) -> None:
        proc.__class__ = BwrapProcess
        proc.status_fd = os.dup(status_r)  # type: ignore[attr-defined]

    return started
