# ruff: noqa: E501  (attack snippets are kept on one line each, as written)
"""The short way of ``__import__`` and ``importlib.import_module`` (``_seal``'s gates).

An import of a name whose top-level package the profile lists goes straight to the original;
everything else still meets the judge. These tests pin what the short way may never change:
it answers by the exact name only (not by what ``sys.modules`` holds, not by a ``str``
subclass's say-so), a refused name stays refused however often the allowed ones ran,
learning still records, and nothing of the gate's state is reachable from the program.
"""

from __future__ import annotations

import _frozen_importlib
import builtins
import importlib
import sys
import textwrap
from pathlib import Path

import guarded
import pytest
from pysb_guards import _seal
from pysb_guards.imports import engine as _importengine

# ---------------------------------------------------------------------------------------
# The gate itself, in this process
# ---------------------------------------------------------------------------------------


def _slow_recorder() -> tuple[list, object]:
    seen: list = []

    def judge(args: tuple, kwargs: dict) -> object:
        seen.append(args[0])
        return _seal.Refusal(ModuleNotFoundError(f"refused {args[0]!r}"))

    return seen, judge


def test_gate_sends_only_exact_listed_names_the_short_way() -> None:
    seen, judge = _slow_recorder()
    original = builtins.__import__
    slow = _seal.make_door(original, judge, name="__import__")
    fast = {"json"}
    gate = _seal.make_gate("__import__", original, slow, fast)
    face = _seal.make_face(gate, original, None, "__import__")

    class Liar(str):
        """Claims to be "json" to a set lookup, says "csv" to the C import."""

        def __hash__(self) -> int:
            return hash("json")

        def __eq__(self, other: object) -> bool:
            return True

    assert face("json") is sys.modules["json"]
    assert face("json.decoder", None, None, ["JSONDecoder"], 0) is sys.modules["json.decoder"]
    for name, args in [
        ("csv", ()),
        ("jsonx", ()),
        ("", ()),
        (".json", ()),
        (Liar("csv"), ()),
        ("json", (None, None, (), 1)),  # relative: the judge resolves it
        ("json", (None, None, (), False)),  # not the int 0
    ]:
        seen.clear()
        with pytest.raises(ModuleNotFoundError):
            face(name, *args)
        assert seen == [name], (name, args)
    # dotted names of listed packages join the set; nothing else does
    assert fast == {"json", "json.decoder"}


def test_gate_set_stays_bounded() -> None:
    seen, judge = _slow_recorder()
    original = importlib.import_module
    fast = {"json"}
    gate = _seal.make_gate(
        "import_module", _frozen_importlib._gcd_import, _seal.make_door(original, judge), fast
    )
    face = _seal.make_face(gate, original, None, "import_module")
    for i in range(_seal.GATE_LIMIT + 50):
        with pytest.raises(ModuleNotFoundError):
            face(f"json.nope{i}")
    assert len(fast) == _seal.GATE_LIMIT and seen == []
    assert face("json.decoder") is sys.modules["json.decoder"]  # still the short way
    assert "json.decoder" not in fast and seen == []


def test_gate_import_module_uses_gcd_import_and_keeps_its_errors() -> None:
    seen, judge = _slow_recorder()
    original = importlib.import_module
    slow = _seal.make_door(original, judge, name="import_module")
    gate = _seal.make_gate("import_module", _frozen_importlib._gcd_import, slow, {"json"})
    face = _seal.make_face(gate, original, None, "import_module")
    assert face("json") is sys.modules["json"]
    assert face("json.decoder", "anything") is sys.modules["json.decoder"]
    assert seen == []
    with pytest.raises(ModuleNotFoundError) as info:
        face("json.no_such_submodule")
    assert seen == []
    # the face raised it, with the original's frames and without the gate's
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)  # readable: no door frame in it
        tb = tb.tb_next
    assert _seal.DOOR_FILE not in frames and _seal.FACE_FILE in frames
    with pytest.raises(ModuleNotFoundError, match="refused 'csv'"):
        face("csv")
    assert seen == ["csv"]


def test_gate_answers_by_name_not_by_what_sys_modules_holds(monkeypatch) -> None:
    _, judge = _slow_recorder()
    original = builtins.__import__
    gate = _seal.make_gate("__import__", original, _seal.make_door(original, judge), {"json"})
    face = _seal.make_face(gate, original, None, "__import__")
    planted = object()
    monkeypatch.setitem(sys.modules, "json", planted)
    assert face("json") is planted  # what the unguarded import answers too
    monkeypatch.setitem(sys.modules, "csv", sys.modules["os"])  # loaded, harmless, unlisted
    with pytest.raises(ModuleNotFoundError):
        face("csv")


def test_gate_code_is_a_door() -> None:
    """The gate's constants hold the original and the set of names: its code must be
    unreadable like any door's (the audit hook refuses ``__code__`` of DOOR_NS functions)."""
    gate = _seal.make_gate("__import__", builtins.__import__, builtins.__import__, set())
    assert gate.__globals__ is _seal.DOOR_NS
    assert gate.__closure__ is None
    assert gate.__code__.co_filename == _seal.DOOR_FILE  # no audit hook in this process


def test_templates_compile_silently_and_doors_load_only_constants() -> None:
    """``_seal`` is compiled from source wherever no .pyc can be written: its placeholders
    must draw no SyntaxWarning. And a door's code must reach nothing but its constants."""
    import dis
    import warnings

    for path in Path(_seal.__file__).parent.glob("*.py"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(path.read_text(), str(path), "exec")
    for name, code in _seal._TEMPLATES.items():
        if name.startswith("build"):
            continue
        loads = {
            i.opname
            for i in dis.get_instructions(code)
            if i.opname.startswith(("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLOSURE"))
        }
        assert not loads, (name, loads)
        assert code.co_freevars == () and code.co_cellvars == ()


def test_standard_import_module_is_recognised() -> None:
    ns = _seal.seal_group(
        [_importengine._e_is_standard_import_module],
        FUNCTION=type(test_standard_import_module_is_recognised),
        BOOTSTRAP=_frozen_importlib,
        GCD_IMPORT=_frozen_importlib._gcd_import,
        DICT_GET=_seal.builders()["DICT_GET"],
    )
    is_standard = ns["_e_is_standard_import_module"]
    assert is_standard(importlib.import_module)

    def import_module(name, package=None):  # a wrapper put in place before the guards
        return importlib.import_module(name, package)

    assert not is_standard(import_module)
    assert not is_standard(_frozen_importlib._gcd_import)
    assert not is_standard(len)


# ---------------------------------------------------------------------------------------
# In a sandboxed interpreter
# ---------------------------------------------------------------------------------------


def test_refused_names_stay_refused_whatever_sys_modules_holds(python: str) -> None:
    r = guarded.probe(
        """
        import importlib, json
        def stmt_csv():
            import csv
        def stmt_json():
            import json
            return json.dumps([2])
        for _ in range(2000):
            importlib.import_module("json"); __import__("json.decoder")
        t("planted", lambda: (__sys.modules.__setitem__("json", 42), importlib.import_module("json"), __import__("json"))[1:])
        __sys.modules["json"] = json
        t("os_as_csv", lambda: (__sys.modules.__setitem__("csv", __sys.modules["sys"]), importlib.import_module("csv"))[1])
        t("os_as_csv_dunder", lambda: __import__("csv"))
        t("os_as_csv_stmt", stmt_csv)
        t("posix", lambda: importlib.import_module("posix"))
        t("re_loaded_by_json", lambda: ("re" in __sys.modules, importlib.import_module("re")))
        t("re_dunder", lambda: __import__("re", globals(), None, ["compile"], 0))
        del __sys.modules["json"]
        t("json_again", lambda: importlib.import_module("json").dumps([1]))
        t("json_again_stmt", stmt_json)
        t("submodule", lambda: importlib.import_module("json.decoder").__name__)
        t("other_package_sub", lambda: importlib.import_module("xml.dom"))
        t("prefix_lookalike", lambda: importlib.import_module("jsonx"))
        t("relative_outside", lambda: importlib.import_module(".dom", "xml"))
        t("relative_dunder", lambda: __import__("dom", {"__package__": "xml", "__name__": "xml"}, None, ["x"], 1))
        t("kw_name", lambda: importlib.import_module(name="csv"))
        t("kw_dunder", lambda: __import__(name="csv", level=0))
        t("kw_ok", lambda: importlib.import_module(name="json", package=None).__name__)
        """,
        imports=("json", "importlib"),
        python=python,
    )
    assert r["planted"] == ("ok", "(42, 42)"), r["planted"]
    for key in (
        "os_as_csv",
        "os_as_csv_dunder",
        "os_as_csv_stmt",
        "posix",
        "re_dunder",
        "other_package_sub",
        "prefix_lookalike",
        "relative_outside",
        "relative_dunder",
        "kw_name",
        "kw_dunder",
    ):
        assert r[key][0] == "ImportDeniedError", (key, r[key])
    assert r["re_loaded_by_json"][0] == "ImportDeniedError"
    assert r["json_again"] == ("ok", "'[1]'")
    assert r["json_again_stmt"] == ("ok", "'[2]'")
    assert r["submodule"] == ("ok", "'json.decoder'")
    assert r["kw_ok"] == ("ok", "'json'")


def test_str_subclasses_take_the_judges_way(python: str) -> None:
    r = guarded.probe(
        """
        import importlib
        class Liar(str):
            def partition(self, sep):
                return ("json", "", "")
            def startswith(self, prefix, *a):
                return False
            def __getitem__(self, i):
                return "json"
        t("import_module", lambda: importlib.import_module(Liar("csv")))
        t("dunder", lambda: __import__(Liar("csv")))
        t("loaded", lambda: __import__(Liar("posix")))
        t("loaded_import_module", lambda: importlib.import_module(Liar("posix")))
        t("sub", lambda: importlib.import_module(Liar("xml.dom")))
        """,
        imports=("json", "importlib"),
        python=python,
    )
    for key, got in r.items():
        assert got[0] == "ImportDeniedError", (key, got)


# The same probes, with and without the guards: where the import is allowed, what comes
# back (or what is raised, and how it reads) must not depend on the short way.
_SAME = """
import importlib
def from_nope():
    from json import nope
def stmt_tool():
    import json.tool
t("ok", lambda: importlib.import_module("json").__name__)
t("sub", lambda: importlib.import_module("json.decoder", "x").__name__)
t("missing_sub", lambda: importlib.import_module("json.nope"))
t("missing_attr", from_nope)
t("none_entry", lambda: (__sys.modules.__setitem__("json.tool", None), importlib.import_module("json.tool")))
t("none_entry_stmt", stmt_tool)
t("not_str", lambda: importlib.import_module(1))
t("relative_no_package", lambda: importlib.import_module(".decoder"))
t("relative", lambda: importlib.import_module("..json", "json.decoder").__name__)
t("dunder_fromlist", lambda: __import__("json", None, None, ["decoder"], 0).decoder.__name__)
t("dunder_bad_level", lambda: __import__("json", None, None, (), -1))
t("dunder_too_many", lambda: __import__("json", None, None, (), 0, 1))
t("dunder_bad_kw", lambda: __import__("json", nope=1))
t("import_module_too_many", lambda: importlib.import_module("json", None, 1))
t("dunder_none", lambda: __import__(None))
"""


def test_allowed_imports_behave_as_without_the_guards(python: str) -> None:
    guarded_r = guarded.probe(_SAME, imports=("json", "importlib"), python=python)
    plain_r = guarded.probe(_SAME, imports=("json", "importlib"), python=python, families=())
    assert guarded_r.keys() == plain_r.keys()
    for key in plain_r:
        kind, text = plain_r[key]
        got_kind, got_text = guarded_r[key]
        assert got_kind == kind, (key, guarded_r[key], plain_r[key])
        if key in ("dunder_too_many", "import_module_too_many", "dunder_bad_kw"):
            continue  # the argument checker names the face, with the same complaint
        assert got_text == text, (key, guarded_r[key], plain_r[key])


def test_learning_still_records_through_the_gates(python: str) -> None:
    res = guarded.run(
        "import importlib\n"
        "for _ in range(500):\n    importlib.import_module('json'); import json\n"
        "importlib.import_module('csv')\n__import__('xml.dom')\nimport tomllib\n"
        "for _ in range(3):\n    importlib.import_module('csv')\n",
        imports=("json", "importlib"),
        learn=True,
        python=python,
    )
    assert res.returncode == 0, res.stderr
    learned = {e.target for e in res.learned("imports")}
    assert {"csv", "xml", "tomllib"} <= learned, learned
    assert "json" not in learned and "importlib" not in learned
    assert not res.denials()


def test_tracebacks_through_the_gates_are_readable(tmp_path: Path, python: str) -> None:
    """An error raised by a module's body on its first import, through each gate: the
    traceback the program gets can be formatted by the traceback module (no door frame in
    it) and shows the module's own line."""
    (tmp_path / "broken.py").write_text("x = 1\nraise ValueError('broken body')\n")
    script = tmp_path / "main.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, traceback, importlib
            sys.path.insert(0, {str(tmp_path)!r})
            def stmt():
                import broken
            for how in (lambda: importlib.import_module("broken"), lambda: __import__("broken"),
                        stmt, lambda: importlib.import_module("nope_mod")):
                try:
                    how()
                except Exception:
                    text = traceback.format_exc()
                    assert "<pysb-door" not in text, text
                    print("formatted", text.count("broken.py"), sys.exc_info()[0].__name__)
            """
        )
    )
    res = guarded.run(
        "",
        script=script,
        imports=("importlib", "broken", "nope_mod"),
        cwd=tmp_path,
        exposures=[guarded.expose(tmp_path)],
        python=python,
    )
    lines = [line for line in res.stdout.splitlines() if line.startswith("formatted")]
    assert lines == ["formatted 1 ValueError"] * 3 + ["formatted 0 ModuleNotFoundError"], (
        res.stdout + res.stderr
    )


def test_code_run_under_a_gate_cannot_reach_its_state(tmp_path: Path, python: str) -> None:
    """A module imported through a gate runs its body under the gate's frame: walking up,
    it finds neither the set of allowed names (to add one) nor the original."""
    (tmp_path / "hunter.py").write_text(
        textwrap.dedent(
            """
            import sys
            found = []
            def grab(obj, depth=0):
                if depth > 2:
                    return
                if isinstance(obj, set) and "json" in obj:
                    obj.add("csv")
                    found.append("set")
                if isinstance(obj, (list, tuple)):
                    for o in obj:
                        grab(o, depth + 1)
                if isinstance(obj, dict):
                    for o in list(obj.values()):
                        grab(o, depth + 1)
                for attr in ("__code__", "__closure__", "__globals__", "__defaults__"):
                    try:
                        inner = getattr(obj, attr)
                    except (AttributeError, PermissionError):
                        continue
                    if attr == "__code__":
                        grab(inner.co_consts, depth + 1)
                    elif attr == "__closure__":
                        grab([c.cell_contents for c in inner or ()], depth + 1)
                    else:
                        grab(inner, depth + 1)
            try:
                f = sys._getframe()
            except PermissionError:
                f = None
            while f is not None:
                grab(f.f_locals)
                if f.f_globals is not globals():
                    grab(f.f_globals)
                try:
                    grab(f.f_code.co_consts)
                except AttributeError:
                    pass
                f = f.f_back
            for fn in (__import__, sys.modules["importlib"].import_module):
                grab(fn)
            """
        )
    )
    script = tmp_path / "main.py"
    script.write_text(
        f"import sys, importlib\nsys.path.insert(0, {str(tmp_path)!r})\n"
        "for load in (lambda: importlib.import_module('hunter'), lambda: __import__('hunter')):\n"
        "    sys.modules.pop('hunter', None)\n    load()\n"
        "    print('found', sys.modules['hunter'].found)\n"
        "try:\n    import csv\n    print('ESCAPED')\nexcept ImportError as e:\n"
        "    print('refused', type(e).__name__)\n"
    )
    res = guarded.run(
        "",
        script=script,
        imports=("json", "importlib", "hunter"),
        cwd=tmp_path,
        exposures=[guarded.expose(tmp_path)],
        python=python,
    )
    assert "ESCAPED" not in res.stdout
    assert res.stdout.splitlines()[-3:] == [
        "found []",
        "found []",
        "refused ImportDeniedError",
    ], res.stdout + res.stderr


def test_program_module_takes_the_short_way(tmp_path: Path, python: str) -> None:
    """The program's own module is allowed without a rule (it joins the gates' names before
    the guards are armed); other names are still refused."""
    script = tmp_path / "main.py"
    script.write_text(
        f"import importlib, sys\nsys.path.insert(0, {str(tmp_path)!r})\n"
        "if __name__ == '__main__':\n"
        "    for _ in range(3):\n"
        "        print('ok', importlib.import_module('main').__name__, __import__('main').__name__)\n"
        "    try:\n        import csv\n    except ImportError as e:\n"
        "        print('refused', type(e).__name__)\n"
    )
    res = guarded.run(
        "",
        script=script,
        imports=("importlib",),
        cwd=tmp_path,
        exposures=[guarded.expose(tmp_path)],
        python=python,
    )
    assert res.stdout.splitlines() == ["ok main main"] * 3 + ["refused ImportDeniedError"], (
        res.stdout + res.stderr
    )
