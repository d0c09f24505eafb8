"""A warning's ``stacklevel`` counts the program's frames only (issue 28, CPython's test_re
and test_warnings): a module's body run by an import, code run by the guarded ``exec`` and a
finder of the program's asked by the guard's finder warn with ``stacklevel`` 1 to 4, through
``warnings``' C and Python implementations, and each warning names the line it names under
plain Python -- never a face or door of the guards (``<pysb-door>``) nor the guard's finder.
With a list of imports (the ``__import__`` and ``import_module`` gates in place) and with
``"*"`` (no gates; the import system still runs a module's body through the guarded
``exec``), on every interpreter here (3.11-3.13)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import guarded
import pytest

PROGRAM = r'''
import builtins, importlib, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import warnings as c_warnings

# warnings' Python implementation: a fresh module, loaded while _warnings is blocked
saved = sys.modules.pop("warnings"), sys.modules.get("_warnings")
sys.modules["_warnings"] = None
import warnings as py_warnings
sys.modules["warnings"], sys.modules["_warnings"] = saved
assert py_warnings.warn is not c_warnings.warn

SOURCE = "import builtins\nbuiltins.IMPL.warn('x', UserWarning, stacklevel=builtins.LEVEL)\n"


class Finder:
    """A finder of the program's that warns when asked for pickle (and finds nothing)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pickle":
            builtins.IMPL.warn("f", UserWarning, stacklevel=builtins.LEVEL)
        return None


def one(how):
    sys.modules.pop("pkg.wm", None)
    if "pkg" in sys.modules:
        vars(sys.modules["pkg"]).pop("wm", None)
    with c_warnings.catch_warnings(record=True, module=c_warnings) as c_seen, \
            py_warnings.catch_warnings(record=True, module=py_warnings) as py_seen:
        c_warnings.simplefilter("always")
        py_warnings.simplefilter("always")
        if how == "import":
            import pkg.wm
        elif how == "from":
            from pkg import wm
        elif how == "__import__":
            __import__("pkg.wm")
        elif how == "import_module":
            importlib.import_module("pkg.wm")
        elif how == "exec":
            exec(SOURCE, {})
        elif how == "finder":
            sys.modules.pop("pickle", None)
            sys.meta_path.insert(0, Finder)
            try:
                import pickle
            finally:
                sys.meta_path.remove(Finder)
    return [(w.filename, w.lineno) for w in c_seen + py_seen]


def each():
    out = {}
    for impl in ("c", "py"):
        builtins.IMPL = c_warnings if impl == "c" else py_warnings
        for how in ("import", "from", "__import__", "import_module", "exec", "finder"):
            for level in (1, 2, 3, 4):
                builtins.LEVEL = level
                try:
                    out[f"{impl} {how} {level}"] = one(how)
                except Exception as e:
                    out[f"{impl} {how} {level}"] = f"RAISED {type(e).__name__}: {e}"
    return out


def main():
    print(json.dumps(each()))


main()
'''

MODULE = 'import builtins\nbuiltins.IMPL.warn("m", UserWarning, stacklevel=builtins.LEVEL)\n'


@pytest.mark.parametrize("imports", ["listed", "star"])
def test_warnings_stacklevels_skip_the_guards_frames(
    tmp_path: Path, python: str, imports: str
) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "wm.py").write_text(MODULE)
    plain = subprocess.run([python, str(script)], capture_output=True, text=True, check=False)
    assert plain.returncode == 0, plain.stderr
    expected = json.loads(plain.stdout)
    assert len(expected) == 48 and all(type(v) is list and len(v) == 1 for v in expected.values())
    listed = ("builtins", "importlib", "json", "os", "sys", "warnings", "pkg", "pickle")
    result = guarded.run(
        "",
        script=script,
        cwd=tmp_path,
        python=python,
        imports=listed if imports == "listed" else ("*",),
        exposures=[guarded.expose(tmp_path)],
        api=(("allow", "dynamic-code"),),
    )
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.splitlines()[-1])
    differ = {k: (v, got.get(k)) for k, v in expected.items() if got.get(k) != v}
    assert not differ, json.dumps(differ, indent=1)
