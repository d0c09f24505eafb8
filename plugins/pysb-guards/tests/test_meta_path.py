"""``sys.meta_path`` is the program's own list (issue 28, CPython's test_pkgutil): the
import guard takes its decision in ``importlib._bootstrap._find_spec``, before any finder
of the list is asked, instead of a finder of its own kept at the head of the list (put back
there before every import, so that a program's ``insert(0, f)`` ... ``del meta_path[0]``
deleted the guard's finder and kept its own, which then answered every later import). The
list keeps the program's order, as under plain Python, and the gate holds whatever the
program does with the list or with ``_find_spec`` (fail closed), on 3.11-3.13."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import guarded

ORDER = r"""
import json, sys
import importlib.machinery as m


class Importer:
    "A PEP 302 importer of the program's, for one name (as test_pkgutil's)."

    def find_spec(self, name, path=None, target=None):
        return m.ModuleSpec(name, self) if name == "mine" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.value = 42


out = {}
before = list(sys.meta_path)
importer = Importer()
sys.meta_path.insert(0, importer)
import mine
import json.decoder, csv  # imports while it is there (each put the guard's finder first)
out["head"] = sys.meta_path[0] is importer
out["rest"] = sys.meta_path[1:] == before
del sys.meta_path[0]
out["deleted"] = sys.meta_path == before
sys.modules.pop("mine")
try:
    import mine
    out["after"] = "imported"
except ImportError as e:
    out["after"] = type(e).__name__
out["value"] = 42
print(json.dumps(out))
"""

GATE = r"""
import importlib, json, sys
import importlib._bootstrap as bootstrap
import importlib.machinery as m
import importlib.util

seen = []


class Finder:
    "A finder of the program's that answers csv (unlisted) and pickle (patched) itself."

    @staticmethod
    def find_spec(name, path=None, target=None):
        seen.append(name)
        if name in ("csv", "pickle"):
            return m.PathFinder.find_spec(name, path)
        return None


out = {}
full = list(sys.meta_path)
import pickle
guarded_type = type(pickle.loads)


def attempt(how, fn):
    try:
        fn()
        out[how] = "ESCAPED"
    except ImportError as e:
        out[how] = type(e).__name__


def import_csv():
    import csv


sys.meta_path.insert(0, Finder)
attempt("first", import_csv)
attempt("util.find_spec", lambda: importlib.util.find_spec("csv"))
attempt("import_module", lambda: importlib.import_module("csv"))
attempt("_gcd_import", lambda: bootstrap._gcd_import("csv"))
sys.meta_path[:] = [Finder]
attempt("alone", import_csv)
sys.meta_path = [Finder, *full]
attempt("new list", import_csv)
original = bootstrap._find_spec
bootstrap._find_spec = lambda name, path, target=None: m.PathFinder.find_spec(name, path)
attempt("replaced", import_csv)  # the __import__ gate refuses it first
attempt("replaced, _gcd_import", lambda: bootstrap._gcd_import("csv"))  # the exec event
import json.tool  # an import the interpreter starts: the guard's _find_spec is put back
out["put back"] = bootstrap._find_spec is original
out["asked for csv"] = "csv" in seen
del sys.modules["pickle"]
import pickle
out["pickle by its finder"] = "pickle" in seen
out["patched"] = type(pickle.loads) is guarded_type
print(json.dumps(out))
"""


def test_meta_path_keeps_the_programs_order(tmp_path: Path, python: str) -> None:
    """A finder the program puts first stays first, and deleting index 0 deletes it."""
    script = tmp_path / "prog.py"
    script.write_text(ORDER)
    plain = subprocess.run([python, str(script)], capture_output=True, text=True, check=False)
    assert plain.returncode == 0, plain.stderr
    expected = json.loads(plain.stdout)
    assert expected["head"] and expected["deleted"], expected
    for imports in (("json", "sys", "importlib", "csv", "mine"), ("*",)):
        result = guarded.run(
            "",
            script=script,
            cwd=tmp_path,
            python=python,
            imports=imports,
            exposures=[guarded.expose(tmp_path)],
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1]) == expected, imports


def test_the_import_gate_holds_whatever_the_program_does_with_meta_path(
    tmp_path: Path, python: str
) -> None:
    """An unlisted module is refused before any finder of the program's is asked: with the
    program's finder first, alone, in a new list, through ``importlib.util.find_spec``,
    ``import_module`` and ``_gcd_import``, and with ``_find_spec`` replaced (the module's
    code is refused as it would run; the guard's is put back at the next import). A module
    its finder answers gets the guards' patches all the same."""
    script = tmp_path / "prog.py"
    script.write_text(GATE)
    result = guarded.run(
        "",
        script=script,
        cwd=tmp_path,
        python=python,
        imports=("importlib", "json", "sys", "pickle"),
        exposures=[guarded.expose(tmp_path)],
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    refused = ("first", "util.find_spec", "import_module", "_gcd_import", "alone", "new list")
    refused += ("replaced", "replaced, _gcd_import")
    assert {k: out[k] for k in refused} == dict.fromkeys(refused, "ImportDeniedError"), out
    assert out["put back"] is True and out["asked for csv"] is False, json.dumps(out)
    assert out["pickle by its finder"] and out["patched"], out
