"""Every callable the guards replace looks like CPython's own (issue 28, item 3): the same
``__module__``, ``__qualname__``, ``__name__``, ``__doc__`` and ``inspect.signature``, and
no ``__wrapped__`` leading to an original. One generic check over every face the guards
put in the modules a program commonly loads, against plain Python, on 3.11 to 3.13."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import guarded

DESCRIBE = r"""
import importlib, inspect, json, sys

MODULES = [
    "builtins", "os", "posix", "io", "_io", "socket", "_socket", "signal", "_signal",
    "subprocess", "_posixsubprocess", "shutil", "pathlib", "ctypes", "_ctypes", "pickle",
    "_pickle", "sys", "gc", "threading", "_thread", "importlib", "faulthandler", "pty",
    "resource", "select", "tempfile", "sqlite3", "glob", "zipfile", "fileinput", "mmap",
    "multiprocessing", "asyncio", "time", "fcntl", "ssl", "traceback", "inspect", "runpy",
    "code", "sysconfig", "platform", "shlex", "importlib.util", "warnings",
]
ONLY = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None


def is_face(value):
    if isinstance(value, staticmethod):
        value = value.__func__
    return getattr(value, "__pysb_face__", False) is True


def describe(value):
    out = {}
    for attr in ("__module__", "__qualname__", "__name__", "__doc__"):
        try:
            got = getattr(value, attr)
        except AttributeError:
            got = "<no such attribute>"
        out[attr] = got if isinstance(got, (str, type(None))) else repr(type(got))
    try:
        out["signature"] = str(inspect.signature(value))
    except (ValueError, TypeError) as e:
        out["signature"] = "raised " + type(e).__name__
    # CPython's test_inspect reads it on every C function (None: no signature)
    out["has __text_signature__"] = hasattr(value, "__text_signature__")
    wrapped = getattr(value, "__wrapped__", None)
    # a staticmethod's own __wrapped__ (the face of a C function) leads to no original
    out["__wrapped__ leads to"] = None if wrapped is None or is_face(wrapped) else repr(wrapped)
    return out


for name in MODULES:  # loaded first: a text signature may name another module's value
    try:
        importlib.import_module(name)
    except ImportError:
        pass
found = {}
for where in ONLY or ():  # plain Python: the same names, looked up as a program does
    name = max((m for m in MODULES if where.startswith(m + ".")), key=len)
    value = importlib.import_module(name)
    for part in where[len(name) + 1 :].split("."):
        value = getattr(value, part)
    found[where] = describe(value)
for name in MODULES if ONLY is None else ():
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    for key, value in list(vars(module).items()):
        places = [(f"{name}.{key}", value, lambda v=value: v)]
        if isinstance(value, type) and value.__module__ == module.__name__:
            places += [
                (f"{name}.{key}.{attr}", member, lambda c=value, a=attr: getattr(c, a))
                for attr, member in list(vars(value).items())
            ]
        for where, raw, resolved in places:
            if is_face(raw):
                found[where] = describe(resolved())
print(json.dumps(found))
"""

#: What a face cannot take from its original, each with its reason (docs/compat.md):
#: (attribute, where, the face's value, CPython's) -> known.
CTYPES_POINTERS = ("ctypes.memmove", "ctypes.memset")


#: Modules whose faces of C functions name the module itself (api.engine._OWN_MODULE_FACES:
#: no ``__all__``, so a routine that is not built in belongs where its ``__module__`` says).
OWN_MODULE_FACES = ("signal",)


def known(attr: str, where: str, face: object, plain: object) -> bool:
    if attr == "has __text_signature__" and face is True and plain is False:
        return True  # a Python function's face says its parameters in a text signature
    if attr == "__module__" and face is None and plain == "<no such attribute>":
        return True  # a face is a function, which has a __module__; a C method has none
    if attr == "__module__" and face in OWN_MODULE_FACES and plain == "_" + face:
        return True  # signal.alarm (and _signal.alarm, the same object) say 'signal'
    if where in CTYPES_POINTERS:  # ctypes function pointers: no name, the class's module
        return attr in ("__module__", "__name__", "__qualname__", "signature")
    # a default that is no literal (pty._read) cannot be written in a text signature
    return attr == "signature" and where == "pty.spawn"


def _described_in_the_sandbox(script: Path, python: str, **rules: Any) -> dict[str, Any]:
    """What ``script`` (:data:`DESCRIBE`) prints under every guard, the file system open."""
    result = guarded.run(
        "",
        script=script,
        cwd=script.parent,
        python=python,
        exposures=[guarded.expose("/")],
        api=(("allow", "*"),),
        **rules,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_every_face_looks_like_the_function_it_replaces(tmp_path: Path, python: str) -> None:
    script = tmp_path / "describe.py"
    script.write_text(DESCRIBE)
    faces = _described_in_the_sandbox(script, python, network=("allow tcp 127.0.0.1 80 out",))
    assert len(faces) > 150, sorted(faces)  # every guard's faces: files, api, network...
    assert {"signal.alarm", "os.stat", "subprocess.run", "sys._current_frames"} <= set(faces)
    plain_run = subprocess.run(
        [python, str(script), json.dumps(sorted(faces))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert plain_run.returncode == 0, plain_run.stderr
    plain = json.loads(plain_run.stdout)
    differences = []
    for where, described in sorted(faces.items()):
        assert where in plain, where
        for attr, value in described.items():
            theirs = plain[where][attr]
            if value != theirs and not known(attr, where, value, theirs):
                differences.append(f"{where} {attr}: {value!r}, CPython's: {theirs!r}")
    assert not differences, "\n".join(differences)


SIGNAL_ROUTINES = r"""
import inspect, json, signal
# CPython's test_signal.test_functions_module_attr (bpo-27718): what pydoc shows
print(json.dumps({
    name: value.__module__
    for name, value in vars(signal).items()
    if inspect.isroutine(value) and not inspect.isbuiltin(value) and value.__module__ != "signal"
}))
"""


def test_every_routine_of_signal_that_is_no_builtin_says_signal(python: str) -> None:
    """The faces over ``_signal``'s C functions (``alarm``, ``setitimer``, ``raise_signal``,
    ``pthread_kill``) are no builtins: like signal.py's own Python functions, they say
    ``'signal'`` (they said ``'_signal'``: CPython's test_signal failed under every
    provider). The call still goes through the face."""
    code = SIGNAL_ROUTINES + "import _signal\nprint(_signal.alarm is signal.alarm)\n"
    code += "signal.alarm(0)\n"
    result = guarded.run(code, python=python, api=(("deny", "signal.alarm"),))
    assert json.loads(result.stdout.splitlines()[0]) == {}, result.stdout
    assert result.stdout.splitlines()[1] == "True"
    assert "call of 'signal.alarm' (process-control) refused" in result.stderr
    plain = subprocess.run([python, "-c", SIGNAL_ROUTINES], capture_output=True, text=True)
    assert json.loads(plain.stdout) == {}, plain.stderr


#: The guards' Python stand-ins for stack walkers (``pysb_guards._stacks``): no faces (they
#: walk the stack themselves, leaving the guards' frames out), but they must look the same.
STACK_WALKERS = (
    "faulthandler.dump_traceback",
    "traceback.walk_stack",
    "inspect.getouterframes",
    "warnings._is_internal_frame",
    "warnings._next_external_frame",
)


def test_the_stack_walkers_look_like_cpythons_own(tmp_path: Path, python: str) -> None:
    """``faulthandler.dump_traceback`` stands in for a C function: inspect finds the C
    function's text signature on it, or none where the C function has none (CPython's
    test_inspect read ``__text_signature__`` on it: AttributeError on 3.13)."""
    script = tmp_path / "describe.py"
    script.write_text(DESCRIBE)
    only = json.dumps(STACK_WALKERS)
    sandboxed_script = tmp_path / "describe_walkers.py"
    sandboxed_script.write_text(f"import sys\nsys.argv[1:] = [{only!r}]\n{DESCRIBE}")
    sandboxed = _described_in_the_sandbox(sandboxed_script, python)
    plain_run = subprocess.run([python, str(script), only], capture_output=True, text=True)
    assert plain_run.returncode == 0, plain_run.stderr
    plain = json.loads(plain_run.stdout)
    assert set(sandboxed) == set(STACK_WALKERS)
    differences = [
        f"{where} {attr}: {value!r}, CPython's: {plain[where][attr]!r}"
        for where, described in sorted(sandboxed.items())
        for attr, value in described.items()
        if value != plain[where][attr]
    ]
    assert not differences, "\n".join(differences)
