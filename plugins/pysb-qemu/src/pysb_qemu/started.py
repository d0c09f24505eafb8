"""Runs inside the guest's interpreter (a ``ChildSetup``, the last step before the
program): tells the guest's ``/init`` that the program starts now.

``limits: wall-time`` is the program's time. Under emulation (TCG) the interpreter's own
start-up and pysb's set-up inside the guest take seconds, which no other provider counts
either; so ``/init`` starts the host's clock only when this runs. The signal is the end of
file on a FIFO ``/init`` reads: ``/pysb/run`` opens its write end as :data:`FD`, and closing
it here is the announcement, so the program never holds it (it cannot move the clock
later, and ``/init`` forwards only the first end of file). A start that never comes (the
interpreter dies first) still ends the FIFO, at the process's exit.
"""

from __future__ import annotations

import os

#: The guest fd of the FIFO's write end (below the port fds, 200+, and /init's 250).
FD = 199


def announce(fd: int = FD) -> None:
    try:
        os.close(fd)
    except OSError:
        pass  # not started by /pysb/run (a plan without the FIFO): nothing to tell
