"""A program ends under ``pysb run`` exactly as under ``python``: the same exit status,
output, ``atexit`` callbacks (in their order, their errors reported), threads waited for,
files never closed still written, ``__del__`` methods and ``finally`` blocks of suspended
generators run. pysb ends both of its processes without the interpreter's finalization
when nothing is left for it (pysb_core.linux.quickexit); these programs are the cases
where something is, or where the exit's own steps show."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pysb_core.testing import BASE_ENV, Project, pysb_command, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap"]
OPEN = "version: 1\nimports: '*'\nfiles:\n  expose-rw: [.]\napi:\n  allow: ['*']\n"

PROGRAMS = {
    "atexit order and status": """
import atexit, sys
atexit.register(print, "registered first, runs last")
atexit.register(lambda: print("registered second, runs first"))
print("main")
sys.exit(3)
""",
    "atexit callback fails": """
import atexit
def broken():
    raise ValueError("boom")
atexit.register(broken)
atexit.register(print, "after the broken one")
print("main")
""",
    "uncaught exception, then atexit": """
import atexit
atexit.register(print, "atexit ran")
raise KeyError("missing")
""",
    "exit with a message": """
import atexit, sys
atexit.register(print, "atexit ran")
sys.exit("a message for stderr")
""",
    "statuses the interpreter converts": """
import sys
sys.exit(256 + 4)
""",
    "negative status": """
import sys
sys.exit(-1)
""",
    "file never closed": """
f = open("written.txt", "w")
f.write("kept by the exit")
print("main")
""",
    "__del__ and a suspended generator": """
class Noisy:
    def __del__(self):
        print("__del__ ran")
kept = Noisy()
def gen():
    try:
        yield 1
    finally:
        print("finally ran")
g = gen()
next(g)
print("main")
""",
    "thread waited for": """
import threading, time
def work():
    time.sleep(0.3)
    print("thread done", flush=True)
threading.Thread(target=work).start()
print("main done", flush=True)
""",
    "weakref.finalize and an unclosed temporary directory": """
import tempfile, weakref
class Plain:
    pass
kept = Plain()
weakref.finalize(kept, print, "finalized at exit")
gone = weakref.finalize(Plain(), print, "finalized at once")
later = weakref.finalize(kept, print, "finalized at teardown")
later.atexit = False
tmp = tempfile.TemporaryDirectory(dir=".")
print("main")
""",
    "output flushed": """
import sys
sys.stdout.write("x" * 300000)
sys.stderr.write("to stderr, unflushed")
sys.exit(7)
""",
    "output flushed by atexit": """
import atexit, sys
atexit.register(sys.stdout.write, "written by atexit, flushed after it")
""",
}

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _outcome(argv: list[str], cwd: str) -> tuple[int, str, str, str | None]:
    r = subprocess.run(
        argv, cwd=cwd, env=BASE_ENV, capture_output=True, text=True, timeout=60, check=False
    )
    try:
        with open(f"{cwd}/written.txt") as f:
            written: str | None = f.read()
    except FileNotFoundError:
        written = None
    return r.returncode, r.stdout, _ADDRESS.sub(" at 0x...", r.stderr), written


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_the_exit_is_pythons(tmp_path, case: str, provider: str) -> None:
    if provider != "subprocess":
        require_provider(provider)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "prog.py").write_text(PROGRAMS[case])
    project = Project(tmp_path / "sandboxed")
    project.root.mkdir()
    project.profile(OPEN)
    (project.root / "prog.py").write_text(PROGRAMS[case])
    expected = _outcome([sys.executable, "prog.py"], str(plain))
    got = _outcome([*pysb_command(), "run", "--provider", provider, "prog.py"], str(project.root))
    # The same program in two directories; the tracebacks name it. (CPython names a
    # script by its absolute path, pysb by the path given: not the exit's business.)
    got = (got[0], got[1], got[2].replace(f"{project.root}/", ""), got[3])
    expected = (*expected[:2], expected[2].replace(f"{plain}/", ""), expected[3])
    assert got == expected
