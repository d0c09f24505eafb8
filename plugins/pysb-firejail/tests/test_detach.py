"""pysb_firejail.child.detach: the first step of the reaper (and of the lifeline watcher)
in the copy of the program that ``fork`` made. Here in a fresh interpreter of its own (the
reaper's end-to-end cases, under firejail, are tests/security/test_run_end.py)."""

from __future__ import annotations

import ast
import subprocess
import sys

SCRIPT = """\
import gc, os, sys
from pysb_firejail.child import detach
assert "signal" not in sys.modules and gc.isenabled()  # else the test proves nothing
r, w = os.pipe()
spare = os.dup(0)
pid = os.fork()
if pid == 0:
    try:
        detach("pysb-test", keep=(w,))
        with open("/proc/self/status") as f:
            blocked = next(l.split()[1] for l in f if l.startswith("SigBlk:"))
        with open("/proc/self/comm") as f:
            comm = f.read().strip()
        try:
            os.fstat(spare)
            closed = False
        except OSError:
            closed = True
        os.write(w, repr([gc.isenabled(), "signal" in sys.modules, blocked, comm,
                          closed, os.getsid(0) == os.getpid()]).encode())
    finally:
        os._exit(0)
os.close(w)
os.waitpid(pid, 0)
print(os.read(r, 4096).decode())
"""


def test_detach_copies_nothing_of_the_programs_heap_it_need_not() -> None:
    """No collection in the fork (it would write to, and so copy, the whole heap shared
    with the program: 7 ms of CPU per run) and no ``signal`` module (its enums are built
    in Python); still every signal blocked, other descriptors closed, a session and a
    name of its own."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    gc_on, signal_imported, blocked, comm, closed, own_session = ast.literal_eval(out)
    assert gc_on is False
    assert signal_imported is False
    assert int(blocked, 16) & ((1 << 31) - 1) == (1 << 31) - 1 & ~((1 << 8) | (1 << 18))
    assert comm == "pysb-test"
    assert closed is True
    assert own_session is True
