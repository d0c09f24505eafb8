"""A C module whose functions a set-aside module holds comes with it (issue 28 item 3,
CPython's ``import_fresh_module``): pysb's start-up loads ``stat`` (and ``_stat``), the
import guard sets both aside and hands ``stat`` back on the program's import. Under CPython
``_stat`` then stands in ``sys.modules`` (``stat``'s ``from _stat import *`` put it there),
so ``del sys.modules['_stat']`` and a new import give a fresh instance, which is collected
once dropped; it gave the set-aside one, held by ``stat`` (CPython's test_struct under
landlock, whose set-up loaded ``struct``). And library code importing it for the program
(a pickle naming it) is judged as before: it counts as loaded only for the program's own
imports. On 3.11-3.13."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import guarded

FRESH = r"""
import gc, importlib, json, sys, weakref
import stat
out = {"there": "_stat" in sys.modules}
held = stat.S_ISDIR.__self__
sys.modules.pop("_stat", None)
fresh = importlib.import_module("_stat")
out["fresh"] = fresh is not held
out["same functions"] = fresh.S_ISDIR(0o040000) == held.S_ISDIR(0o040000)
ref = weakref.ref(fresh)
sys.modules.pop("_stat")
del fresh
gc.collect()
out["collected"] = ref() is None
print(json.dumps(out))
"""

ON_BEHALF = r"""
import json, pickle, sys
import stat
out = {"there": "_stat" in sys.modules}
try:
    pickle._loads(b"c_stat\nS_ISDIR\n.")
    out["pickle"] = "ESCAPED"
except ImportError as e:
    out["pickle"] = type(e).__name__
print(json.dumps(out))
"""


def test_a_set_aside_modules_accelerator_is_in_sys_modules(tmp_path: Path, python: str) -> None:
    script = tmp_path / "prog.py"
    script.write_text(FRESH)
    plain = subprocess.run([python, str(script)], capture_output=True, text=True, check=False)
    assert plain.returncode == 0, plain.stderr
    expected = json.loads(plain.stdout)
    assert expected == {"there": True, "fresh": True, "same functions": True, "collected": True}
    for imports in (("gc", "importlib", "json", "sys", "weakref", "stat", "_stat"), ("*",)):
        result = guarded.run(
            "",
            script=script,
            cwd=tmp_path,
            python=python,
            imports=imports,
            exposures=[guarded.expose(tmp_path)],
            api=(("allow", "introspection"),),
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1]) == expected, imports


def test_library_code_still_cannot_import_it_for_the_program(tmp_path: Path, python: str) -> None:
    script = tmp_path / "prog.py"
    script.write_text(ON_BEHALF)
    result = guarded.run(
        "",
        script=script,
        cwd=tmp_path,
        python=python,
        imports=("json", "pickle", "sys", "stat"),
        exposures=[guarded.expose(tmp_path)],
        api=(("allow", "deserialization"),),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out == {"there": True, "pickle": "ImportDeniedError"}, out
