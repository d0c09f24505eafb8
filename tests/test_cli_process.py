"""The ``pysb run`` process: collector paused during start-up, quick exit only when nothing
is left to finalize."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from pysb_core.testing import BASE_ENV, pysb_command, trust_profile

# Run in a fresh interpreter: the test runner itself holds files, generators and threads.
DECIDE = """
import gc, io, sys, weakref
from pysb_core.linux.quickexit import nothing_to_finalize

out = {"fresh": nothing_to_finalize()}
f = open(sys.argv[1], "w")
out["open file"] = nothing_to_finalize()
f.close()
out["closed file"] = nothing_to_finalize()
memory = io.BytesIO(b"x")
out["memory file"] = nothing_to_finalize()

def gen():
    try:
        yield 1
    finally:
        print("finally")

g = gen()
out["generator not started"] = nothing_to_finalize()
next(g)
out["suspended generator"] = nothing_to_finalize()
g.close()

class WithDel:
    def __del__(self):
        pass

obj = WithDel()
out["__del__"] = nothing_to_finalize()
del obj

class Plain:
    pass

target = Plain()
ref = weakref.ref(target, lambda r: print("callback"))
out["weakref callback"] = nothing_to_finalize()
del ref
dead = weakref.ref(Plain(), print)
out["callback of a dead referent"] = nothing_to_finalize()
kept = weakref.WeakSet([target]), weakref.WeakValueDictionary({1: target})
out["weak containers"] = nothing_to_finalize()
weakref.finalize(target, print, "finalized")
out["weakref.finalize"] = nothing_to_finalize()
print(out)
"""


def test_what_is_left_to_finalize(tmp_path: Path) -> None:
    """The quick exit's test (pysb_core.linux.quickexit) on real objects: what an exit
    would finalize visibly stops it, what it would not does not -- whatever plugins are
    installed (no plugin is asked)."""
    r = subprocess.run(
        [sys.executable, "-c", DECIDE, str(tmp_path / "f")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    decided = next(line for line in r.stdout.splitlines() if line.startswith("{"))
    assert ast.literal_eval(decided) == {
        "fresh": True,
        "open file": False,
        "closed file": True,
        "memory file": True,
        "generator not started": True,
        "suspended generator": False,
        "__del__": False,
        "weakref callback": False,
        "callback of a dead referent": True,
        "weak containers": True,
        "weakref.finalize": False,  # left for the normal exit (its atexit runs first)
    }


def test_exit_status_and_output_survive_the_quick_exit(tmp_path: Path) -> None:
    (tmp_path / ".pysb.yaml").write_text("version: 1\nimports: [sys]\n")
    trust_profile(tmp_path / ".pysb.yaml")
    big = "print('x' * 200000); import sys; sys.stderr.write('done\\n'); sys.exit(7)"
    r = subprocess.run(
        [*pysb_command(), "run", "--verbose", "-c", big],
        cwd=tmp_path,
        env=BASE_ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 7, r.stderr
    assert r.stdout == "x" * 200000 + "\n"
    assert "chosen by 'auto'" in r.stderr and r.stderr.endswith("done\n")
