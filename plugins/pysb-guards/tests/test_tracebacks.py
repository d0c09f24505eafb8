"""Tracebacks stay Python's under the guards (issue 17): no frame of pysb's own code in a
traceback the program formats, and formatting one never raises -- after a refusal by a
face, by the audit hook (the backstop), by the import gate, and for an error of the
program's own code run through a guarded ``exec``. On every interpreter here (3.11-3.13:
the traceback module and the interpreter's printer differ)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import guarded

PROGRAM = r"""
import io, json, logging, os, sys, traceback, inspect

HIDDEN = {hidden!r}
CASES = {{
    "audit_hook": lambda: open(HIDDEN, "w"),   # open() is judged by the audit hook
    "face": lambda: os.stat(HIDDEN),           # os.stat by its face
    "import": lambda: __import__("socket"),   # the import gate
    "api": lambda: os.system("true"),          # a sensitive API
    "exec": lambda: exec("1/0", {{}}),          # the program's error under a guarded exec
}}
log = io.StringIO()
logging.basicConfig(stream=log, level=logging.INFO)
out = {{}}
SHOW = {{  # each on an exception of its own: the first reader must not clean it for the next
    "format_exc": lambda e: traceback.format_exc(),
    "format_exception": lambda e: "".join(traceback.format_exception(e)),
    "extract_tb": lambda e: repr([tuple(f) for f in traceback.extract_tb(e.__traceback__)]),
    "inspect_trace": lambda e: repr([(f.filename, f.function) for f in inspect.trace()]),
    "walk": lambda e: repr([(f.f_code.co_filename, f.f_code.co_name)
                            for f, _ in traceback.walk_tb(e.__traceback__)]),
    "logging": lambda e: (logging.exception("failed"), log.getvalue())[1],
    "excepthook": lambda e: _hook(e),
}}
for name, fn in CASES.items():
    entry = out[name] = {{}}
    for how, show in SHOW.items():
        try:
            fn()
        except BaseException as e:
            try:
                entry[how] = show(e)
            except BaseException as failure:
                entry[how] = "RAISED " + repr(failure)

print(json.dumps(out))
"""

HOOK = r"""
def _hook(e):
    saved, sys.stderr = sys.stderr, io.StringIO()
    try:
        sys.excepthook(type(e), e, e.__traceback__)
        return sys.stderr.getvalue()
    finally:
        sys.stderr = saved
"""


def test_no_pysb_frame_and_no_failure_in_formatted_tracebacks(tmp_path: Path, python: str) -> None:
    hidden = str(tmp_path / "outside" / "x")
    script = tmp_path / "prog.py"
    body = PROGRAM.format(hidden=hidden)
    head, _, tail = body.partition("log = io.StringIO()")
    script.write_text(head + HOOK + "log = io.StringIO()" + tail)
    result = guarded.run(
        "",
        script=script,
        cwd=tmp_path,
        python=python,
        imports=("io", "json", "logging", "os", "sys", "traceback", "inspect"),
        exposures=[guarded.expose(tmp_path)],
        api=(("allow", "dynamic-code"),),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert set(out) == {"audit_hook", "face", "import", "api", "exec"}
    for case, entry in out.items():
        for how, text in entry.items():
            where = f"{case}/{how}:\n{text}"
            assert "RAISED" not in text, where
            files = re.findall(r"(?:File \"|\(')([^\"']+)[\"']", text)
            assert files, where
            assert {Path(f).name for f in files} <= {"prog.py", "<string>"}, where
    exec_text = out["exec"]["format_exc"]
    assert exec_text.rstrip().endswith("ZeroDivisionError: division by zero"), exec_text
    assert 'File "<string>", line 1, in <module>' in exec_text, exec_text


THREAD = r"""
import os, threading
t = threading.Thread(target=os.stat, args=({hidden!r},))
t.start()
t.join()
"""


def test_a_thread_dying_of_a_refusal_shows_no_pysb_frame(tmp_path: Path, python: str) -> None:
    """``threading.excepthook`` prints with C code before 3.13: it, too, gets the guards'
    entries dropped first."""
    result = guarded.run(
        THREAD.format(hidden="/pysb-not-exposed/x"),
        cwd=tmp_path,
        python=python,
        imports=("os", "threading"),
        exposures=[guarded.expose(tmp_path)],
        api=(("allow", "threads"),),
    )
    assert result.returncode == 0, result.stderr
    assert "FileDeniedError" in result.stderr, result.stderr
    assert "<pysb" not in result.stderr, result.stderr


BAD_HOOK_ARGUMENTS = r"""
import io, sys, threading, types


def outcome(call):
    saved, sys.stderr = sys.stderr, io.StringIO()
    try:
        call()
        result = "returned"
    except BaseException as e:
        result = f"{type(e).__name__}: {e}"
    finally:
        printed, sys.stderr = sys.stderr.getvalue(), saved
    return f"{result} | printed: {printed.splitlines()[-1:]}"


bad = types.SimpleNamespace(
    exc_type=ValueError, exc_value=ValueError("v"), exc_traceback=1, err_msg=None,
    object=None, thread=None,
)
for name, call in [
    ("excepthook(1, '1', 1)", lambda: sys.excepthook(1, "1", 1)),
    ("excepthook(ValueError, ..., 1)", lambda: sys.excepthook(ValueError, ValueError("v"), 1)),
    ("excepthook()", lambda: sys.excepthook()),
    ("__excepthook__(1, 2, 3)", lambda: sys.__excepthook__(1, 2, 3)),
    ("unraisablehook(bad tb)", lambda: sys.unraisablehook(bad)),
    ("unraisablehook(1)", lambda: sys.unraisablehook(1)),
    ("threading.excepthook(bad tb)", lambda: threading.excepthook(bad)),
    ("threading.excepthook(1)", lambda: threading.excepthook(1)),
]:
    print(name, "->", outcome(call))
"""


def test_the_hooks_judge_their_arguments_as_cpythons(tmp_path: Path, python: str) -> None:
    """The hooks behind which pysb drops its traceback entries (before 3.13) take what
    CPython's take and refuse what they refuse: ``sys.excepthook(1, '1', 1)`` is
    CPython's TypeError (it was an AttributeError of pysb's own step, reading
    ``tb_next`` of 1), a traceback that is not one passes through to CPython's hook."""
    import subprocess

    plain = subprocess.run(
        [python, "-c", BAD_HOOK_ARGUMENTS], capture_output=True, text=True, check=False
    )
    assert plain.returncode == 0, plain.stderr
    result = guarded.run(
        BAD_HOOK_ARGUMENTS,
        cwd=tmp_path,
        python=python,
        imports=("io", "sys", "threading", "types"),
        exposures=[guarded.expose(tmp_path)],
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == plain.stdout.splitlines()


C_PRINTED = r"""
import io, sys
import _testcapi


def c_printed(call):
    try:
        call()
    except BaseException as e:
        saved, sys.stderr = sys.stderr, io.StringIO()
        try:
            _testcapi.exception_print(e)  # the interpreter's C printer, as test_traceback's
            return sys.stderr.getvalue()
        finally:
            sys.stderr = saved
    return "returned"


x = 5
def local_namespaces():
    y = 3
    exec("print('exec sees', x + y)")
    return eval("x + y")


for name, call in [
    ("compile", lambda: compile("1 $ 2", "<src>", "exec")),
    # (a code's file is named: pysb's start-up stub is a `-c` whose source 3.13 shows for
    # "<string>" entries, a difference of its own)
    ("exec", lambda: exec(compile("1/0", "<src>", "exec"), {})),
    ("eval", lambda: eval(compile("1/0", "<src>", "eval"))),
    ("exec compile", lambda: exec(compile("def f():\n    return 1/0\nf()", "<src>", "exec"))),
]:
    print(name, "->", c_printed(call))
print("namespaces", local_namespaces())
"""


def test_c_printer_shows_no_face_of_an_allowed_exec(tmp_path: Path, python: str) -> None:
    """With ``dynamic-code`` allowed, ``exec`` / ``eval`` / ``compile`` are the builtins
    themselves (nothing to judge), so a traceback through them reads as CPython's even to
    C code that takes it as it is (``_testcapi.exception_print``, CPython's
    test_traceback's CPythonTracebackErrorCaretTests: the face's entry showed before 3.13).
    Their default namespaces are the caller's, as under CPython."""
    import subprocess

    script = tmp_path / "printed.py"
    script.write_text(C_PRINTED)
    plain = subprocess.run(
        [python, str(script)], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert plain.returncode == 0, plain.stderr
    result = guarded.run(
        "",
        script=script,
        cwd=tmp_path,
        python=python,
        imports=("io", "sys", "_testcapi"),
        exposures=[guarded.expose(tmp_path)],
        api=(("allow", "dynamic-code"),),
    )
    assert result.returncode == 0, result.stderr
    assert "<pysb" not in result.stdout, result.stdout
    assert result.stdout.splitlines() == plain.stdout.splitlines()


def test_exec_alone_allowed_keeps_eval_refused(tmp_path: Path, python: str) -> None:
    """The builtins go unfaced only when all three are allowed: the ``exec`` / ``compile``
    events cannot tell ``eval`` from ``exec``, so with one allowed the faces decide."""
    result = guarded.run(
        "exec('print(\"exec ran\")')\n"
        "try:\n    eval('1')\n    print('eval ran')\nexcept PermissionError as e:\n"
        "    print('eval refused', type(e).__name__)\n",
        cwd=tmp_path,
        python=python,
        imports=("builtins",),
        exposures=[guarded.expose(tmp_path)],
        api=(("allow", "builtins.exec"),),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["exec ran", "eval refused ApiDeniedError"], (
        result.stdout
    )
