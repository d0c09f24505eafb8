"""Tracebacks through ``<string>`` read as under ``python`` (issue 28, tracebacks), and ``-c``
code compiled as ``python -c`` compiles it.

From 3.13 the interpreter keeps the lines of its ``-c`` command in ``linecache`` under
``<string>``, so a traceback of ``python -c CODE`` shows CODE's lines. The sandbox's
interpreter is started with pysb's own ``-c`` stub: a traceback through any ``<string>``
frame (``exec("1/0")`` in a script) showed pysb's bootstrap line, and one of
``pysb run -c CODE`` none of CODE's. Compared with the same interpreter run plainly, under
subprocess, landlock and bwrap, on 3.11 to 3.13 (before 3.13 there is nothing to differ).
"""

from __future__ import annotations

import subprocess

import pytest

from pysb_core.testing import Project, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap"]
PROFILE = "version: 1\nimports: [traceback, linecache]\napi: {allow: ['*']}\n"

SCRIPT = """\
import traceback

try:
    exec("x = 1\\n1/0")
except ZeroDivisionError:
    traceback.print_exc()
"""
CODE = "import linecache\nprint(linecache.getline('<string>', 2), end='')\nx = 1\n1/0\n"


def _traceback(text: str) -> list[str]:
    """The lines from ``Traceback`` on (the program's own output and pysb's notes aside)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Traceback"))
    return lines[start:]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_exec_in_a_script_shows_no_line_of_pysb(
    project: Project, provider: str, pysb_python: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.file("tb.py", SCRIPT)
    project.profile(PROFILE)
    plain = subprocess.run(
        [pysb_python, "tb.py"], cwd=project.root, capture_output=True, text=True, check=False
    )
    res = project.run("run", "--provider", provider, "tb.py", python=pysb_python)
    assert res.returncode == 0, res.stdout + res.stderr
    boxed = _traceback(res.stderr)
    assert boxed == _traceback(plain.stderr), res.stderr
    pysbs = ("pysb_core", "bootstrap", "<pysb", "sys.path[:]")  # pysb's code and its stub
    assert not any(mark in line for line in boxed for mark in pysbs), res.stderr


@pytest.mark.parametrize("provider", PROVIDERS)
def test_dash_c_tracebacks_show_the_programs_lines(
    project: Project, provider: str, pysb_python: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.profile(PROFILE)
    plain = subprocess.run(
        [pysb_python, "-c", CODE], cwd=project.root, capture_output=True, text=True, check=False
    )
    res = project.run("run", "--provider", provider, "-c", CODE, python=pysb_python)
    assert res.returncode == plain.returncode == 1, res.stdout + res.stderr
    assert res.stdout == plain.stdout, res.stdout  # linecache's line 2 of <string>, as plain
    assert _traceback(res.stderr) == _traceback(plain.stderr), res.stderr


#: ``-c`` code as the interpreter compiles it: no ``__future__`` flag of pysb's bootstrap
#: (``annotations`` would make the annotation the string ``'int'``), the program's own
#: ``__future__`` imports honoured, a syntax error reported as ``python -c`` reports it.
COMPILED = {
    "annotations": "def f(x: int) -> str: pass\nprint(f.__annotations__)",
    "future-import": "from __future__ import annotations\ndef f(x: int): pass\n"
    "print(f.__annotations__)",
    "future-flags": "import sys\nprint(sys._getframe().f_code.co_flags & 0x1FE0000)",
    "syntax-error": "x = (",
}


@pytest.mark.parametrize("code", list(COMPILED.values()), ids=list(COMPILED))
def test_dash_c_is_compiled_as_python_compiles_it(
    project: Project, code: str, pysb_python: str
) -> None:
    project.profile("version: 1\nimports: [__future__]\n")
    plain = subprocess.run(
        [pysb_python, "-c", code], cwd=project.root, capture_output=True, text=True, check=False
    )
    res = project.run("run", "--provider", "subprocess", "-c", code, python=pysb_python)
    assert (res.returncode, res.stdout) == (plain.returncode, plain.stdout), res.stderr
    assert res.stderr == plain.stderr
