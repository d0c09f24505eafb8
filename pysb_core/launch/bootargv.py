"""The sandboxed interpreter's command line: ``python [CPython options] -c STUB FD``.

One place for it, because two start it: the launch plan (:mod:`pysb_core.launch.pipeline`)
and the interpreter started ahead of it (:mod:`pysb_core.launch.prestart`), which must
exec exactly what the plan would. Imports nothing: ``pysb run`` builds it before the rest
of pysb is loaded.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Sequence

#: The ``-c`` stub that starts the bootstrap; the payload fd number follows as argv[1].
#: While pysb imports its own modules, pysb's roots go first and ``-c``'s own entry (the
#: working directory, ``''``) goes: a package of the program named like pysb's own (the
#: pysb checkout itself) must not be what the sandbox imports as pysb. The bootstrap puts
#: the interpreter's own order back (``S``) and gives the program its sys.path[0].
BOOT_STUB = (
    "import sys;P={paths!r};S=sys.path[:];sys.path[:]=P+[p for p in S if p and p not in P];"
    "from pysb_core.child.bootstrap import main;main(sys.argv[1],S)"
)

#: The first bytes on the payload pipe of an interpreter started ahead when a hint of what
#: to import precedes the payload (written by :func:`pysb_core.launch.prestart.hint`, read
#: by ``pysb_core.child.bootstrap._use_the_wait``).
HINT_MAGIC = b"PYSB-AHEAD-HINT\n"

#: The directory holding the ``pysb_core`` package (the first import root of the sandbox).
CORE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def boot_argv(python_opts: Sequence[str], payload_fd: int) -> list[str]:
    """The interpreter's command line: this interpreter, the user's CPython options, the
    stub, and the descriptor its payload comes on. Only pysb_core's root is in it (short:
    firejail caps an argument at 4 KiB); the other import roots travel in the payload."""
    return [
        sys.executable,
        *python_opts,
        "-c",
        BOOT_STUB.format(paths=[CORE_ROOT]),
        str(payload_fd),
    ]
