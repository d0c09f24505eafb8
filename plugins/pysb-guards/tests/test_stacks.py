"""Stack walks and stack dumps taken inside a guarded call (issue 17, item 1): code that a
guarded call runs -- an ``opener=`` callback of ``open``, code passed to the guarded
``exec`` -- and a thread blocked in a guarded call, as a watchdog (pytest-timeout) dumps
it. ``traceback.print_stack``/``format_stack``, ``inspect.stack``, ``logging``'s
``stack_info`` and ``faulthandler.dump_traceback`` neither raise nor show a frame of the
guards (``<pysb guard (importlib._bootstrap)>``, ``<pysb-door (importlib._bootstrap)>``), on
every interpreter here (3.11-3.13)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import guarded

PROGRAM = r"""
import faulthandler, inspect, io, json, logging, os, sys, threading, traceback

TARGET = {target!r}
FIFO = {fifo!r}
out = {{}}


def attempt(name, fn):
    try:
        out[name] = fn()
    except BaseException as failure:
        out[name] = "RAISED " + repr(failure)


def printed(fn):
    buf = io.StringIO()
    fn(buf)
    return buf.getvalue()


def dumped(all_threads):
    r, w = os.pipe()
    try:
        faulthandler.dump_traceback(w, all_threads=all_threads)
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as f:
        return f.read().decode()


log = io.StringIO()
logging.basicConfig(stream=log, level=logging.INFO)


def walks(prefix):
    attempt(prefix + "print_stack", lambda: printed(lambda f: traceback.print_stack(file=f)))
    attempt(prefix + "format_stack", lambda: "".join(traceback.format_stack()))
    attempt(prefix + "inspect_stack", lambda: repr([(i.filename, i.function)
                                                    for i in inspect.stack()]))
    attempt(prefix + "logging", lambda: (logging.info("here", stack_info=True), log.getvalue())[1])
    attempt(prefix + "faulthandler", lambda: dumped(False))


def opener(path, flags):
    walks("opener/")
    return os.open(path, flags, 0o600)


with open(TARGET, "w", opener=opener):
    pass
exec("walks('exec/')", globals())

# A thread blocked in a guarded call (os.open of a FIFO with no writer yet), dumped as a
# watchdog does it: every thread, from another one.
os.mkfifo(FIFO)
blocked = threading.Thread(target=lambda: os.close(os.open(FIFO, os.O_RDONLY)), name="b")
blocked.start()
import time
time.sleep(0.5)
attempt("threads/faulthandler", lambda: dumped(True))
attempt("threads/format_stack", lambda: "".join(
    traceback.format_stack(sys._current_frames()[blocked.ident])))
with open(FIFO, "wb"):
    pass
blocked.join()
print(json.dumps(out))
"""


def test_stack_walks_and_dumps_inside_a_guarded_call(tmp_path: Path, python: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM.format(target=str(work / "t.txt"), fifo=str(work / "fifo")))
    result = guarded.run(
        "",
        script=script,
        cwd=tmp_path,
        python=python,
        imports=(
            "faulthandler",
            "inspect",
            "io",
            "json",
            "logging",
            "os",
            "sys",
            "threading",
            "traceback",
            "time",
        ),
        exposures=[guarded.expose(tmp_path), guarded.expose(work, rw=True)],
        api=(("allow", "dynamic-code"), ("allow", "threads"), ("allow", "introspection")),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert len(out) == 12, sorted(out)
    for how, text in out.items():
        where = f"{how}:\n{text}"
        assert "RAISED" not in text, where
        assert "<pysb" not in text, where
        files = {
            Path(a or b).name for a, b in re.findall(r"File \"([^\"]+)\"|\('([^']+)', '", text)
        }
        threads = {"threading.py"} if how.startswith("threads/") else set()
        assert "prog.py" in files and files <= {"prog.py", "<string>", *threads}, where
    for where in ("opener", "exec"):
        assert "in opener" in out["opener/faulthandler"]
        assert "in walks" in out[f"{where}/faulthandler"]
        assert out[f"{where}/faulthandler"].startswith("Stack (most recent call first):\n")
    # The program's line that called open() heads the blocked thread's stack, as unguarded.
    dump = out["threads/faulthandler"]
    blocked = dump.split("\n\n")
    assert len(blocked) == 2 and blocked[1].startswith("Current thread 0x"), dump
    assert re.match(r'Thread 0x[0-9a-f]{16} \(most recent call first\):\n  File ".*prog.py", '
                    r"line \d+ in <lambda>\n", blocked[0]), dump  # fmt: skip
    assert "in <lambda>" in out["threads/format_stack"].splitlines()[-2]


def test_the_replacements_carry_their_modules_names(tmp_path: Path, python: str) -> None:
    """A replacement names the module and function it stands in for, as CPython's own
    does (CPython's test_traceback lists ``traceback.__all__`` by ``__module__``)."""
    script = tmp_path / "prog.py"
    script.write_text(
        "import faulthandler, inspect, traceback\n"
        "for fn in (traceback.walk_stack, inspect.getouterframes, faulthandler.dump_traceback):\n"
        "    print(fn.__module__, fn.__name__)\n"
    )
    result = guarded.run(
        "",
        script=script,
        cwd=tmp_path,
        python=python,
        imports=("faulthandler", "inspect", "traceback"),
        exposures=[guarded.expose(tmp_path)],
        api=(("allow", "introspection"),),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-4:-1] == [
        "traceback walk_stack",
        "inspect getouterframes",
        "faulthandler dump_traceback",
    ], result.stdout


CURRENT_FRAMES = """\
import sys, threading, traceback

def inner():
    return sys._current_frames()[threading.get_ident()]

here = sys._current_frames()[threading.get_ident()]
print(here is sys._getframe(), here.f_code.co_name)
frame = inner()
print(frame.f_code.co_name, frame.f_back.f_code.co_name, frame.f_lineno)
print([(f.name, f.lineno) for f in traceback.extract_stack(frame)])
"""


def test_current_frames_gives_the_calling_threads_own_frame(tmp_path: Path, python: str) -> None:
    """``sys._current_frames()`` gives the calling thread's newest frame: the caller's
    own, as under CPython (it was the guarded call's door, whose code is refused)."""
    import subprocess

    script = tmp_path / "prog.py"
    script.write_text(CURRENT_FRAMES)
    plain = subprocess.run([python, str(script)], capture_output=True, text=True, check=False)
    assert plain.returncode == 0, plain.stderr
    result = guarded.run(
        "",
        script=script,
        cwd=tmp_path,
        python=python,
        imports=("sys", "threading", "traceback"),
        exposures=[guarded.expose(tmp_path)],
        api=(("allow", "introspection"),),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain.stdout


TRACED = r"""
import json, os, sys, threading

seen, errors = [], []


def tracer(frame, event, arg):
    try:  # what CPython's test_import's tracer reads (test_concurrency)
        seen.append(frame.f_code.co_filename)
    except BaseException as e:
        errors.append(repr(e))
    return None


def work():
    sys.path.insert(0, {folder!r})
    import fresh_module  # the import gate, the finder (a door), pysb's plain code
    os.stat(".")  # a guarded call: a face and a door
    return fresh_module.VALUE


out = {{}}
for setter, getter in ((sys.settrace, sys.gettrace), (sys.setprofile, sys.getprofile)):
    sys.modules.pop("fresh_module", None)
    setter(tracer)
    same = getter() is tracer
    work()
    setter(None)
    out[setter.__name__] = {{"same": same, "unset": getter() is None}}
threading.settrace(tracer)
thread = threading.Thread(target=work)
thread.start()
thread.join()
threading.settrace(None)
out["own"] = sorted({{f for f in seen if f.startswith("<pysb") or "pysb_" in f}})
out["errors"] = errors
out["program"] = "fresh_module" in "".join(seen)
print(json.dumps(out))
"""


def test_trace_and_profile_functions_see_the_programs_frames_only(
    tmp_path: Path, python: str
) -> None:
    """A trace or profile function is called for the program's frames, not pysb's: it
    read ``f_code`` of the import finder's door (CPython's test_import.test_concurrency
    raised 'the code of a guard door is not readable'), and ``sys.gettrace()`` gives the
    program's function back (issue 28)."""
    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / "fresh_module.py").write_text("def f():\n    return 1\n\nVALUE = f()\n")
    result = guarded.run(
        TRACED.format(folder=str(folder)),
        python=python,
        cwd=tmp_path,
        exposures=[guarded.expose(str(tmp_path))],
        api=(("allow", "introspection"), ("allow", "threads")),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["errors"] == [], out
    assert out["own"] == [], out
    assert out["program"] is True, out  # the program's own frames were traced
    for setter in ("settrace", "setprofile"):
        assert out[setter] == {"same": True, "unset": True}, out
