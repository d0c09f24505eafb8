"""The import guard, in real child interpreters."""

from __future__ import annotations

import guarded
import pytest


def test_absent_imports_allow_only_the_interpreters_own(python: str) -> None:
    r = guarded.probe(
        """
        t("json", lambda: __import__("json"))
        t("os", lambda: __import__("os"))
        t("sys", lambda: __import__("sys").platform)
        t("encodings", lambda: "x".encode("cp1252"))
        """,
        imports=None,
        python=python,
    )
    assert r["json"][0] == "ImportDeniedError"
    assert "`imports: [json]`" in r["json"][1]
    assert r["os"][0] == "ImportDeniedError"
    assert r["sys"][0] == "ok" and r["encodings"][0] == "ok"


def test_listed_names_submodules_and_library_imports(python: str) -> None:
    r = guarded.probe(
        """
        import json.decoder
        t("json", lambda: __import__("json").dumps([1]))
        t("decoder", lambda: json.decoder.JSONDecoder().decode("[2]"))
        t("re", lambda: __import__("re"))
        t("email_sub", lambda: __import__("email.message"))
        """,
        imports=("json", "email"),
        python=python,
    )
    assert r["json"] == ("ok", "'[1]'")
    assert r["decoder"] == ("ok", "[2]")
    # json imports re for itself; the program may not.
    assert r["re"][0] == "ImportDeniedError"
    assert r["email_sub"][0] == "ok"


def test_denial_is_a_module_not_found_error_and_an_event() -> None:
    res = guarded.run(
        "try:\n import socket\nexcept ModuleNotFoundError as e:\n print(type(e).__name__, e.name)",
        imports=("json",),
    )
    assert res.stdout.strip() == "ImportDeniedError socket"
    deny = res.denials("imports")
    assert deny and deny[0].target == "socket" and deny[0].suggested_rule == "imports: [socket]"


def test_star_allows_everything_but_the_guards_themselves() -> None:
    r = guarded.probe(
        """
        t("socket", lambda: __import__("socket").AF_INET > 0)
        t("guards", lambda: __import__("pysb_guards.files.guard"))
        """,
        imports=("*",),
    )
    assert r["socket"] == ("ok", "True")
    assert r["guards"][0] == "ImportDeniedError"


def test_import_module_and_dunder_import_are_judged() -> None:
    r = guarded.probe(
        """
        import importlib
        t("import_module", lambda: importlib.import_module("csv"))
        t("dunder", lambda: __import__("csv"))
        t("importlib_dunder", lambda: importlib.__import__("csv"))
        t("relative_ok", lambda: importlib.import_module(".decoder", "json"))
        """,
        imports=("importlib", "json"),
    )
    for key in ("import_module", "dunder", "importlib_dunder"):
        assert r[key][0] == "ImportDeniedError", key
    assert r["relative_ok"][0] == "ok"


def test_framework_modules_are_taken_out_of_sys_modules() -> None:
    r = guarded.probe(
        """
        t("guards", lambda: [m for m in __sys.modules if m.startswith("pysb_guards")])
        t("os", lambda: "os" in __sys.modules)
        """,
        imports=None,
    )
    assert r["guards"] == ("ok", "[]")
    assert r["os"] == ("ok", "False")  # loaded by the interpreter, set aside until allowed


def test_program_module_is_always_allowed(tmp_path) -> None:
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    script = tmp_path / "main.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n"
        "import main\nprint('ok', main.__name__)\n"
    )
    res = guarded.run(
        "", script=script, imports=None, cwd=tmp_path, exposures=[guarded.expose(tmp_path)]
    )
    assert "ok main" in res.stdout, res.stderr
    script.write_text("import helper\n")
    res = guarded.run(
        "", script=script, imports=None, cwd=tmp_path, exposures=[guarded.expose(tmp_path)]
    )
    assert "ImportDeniedError" in res.stderr and "imports: [helper]" in res.stderr


@pytest.mark.parametrize(
    "attack",
    [
        # the loader of an unlisted module, found and run by hand
        "import importlib.util as u, sys\n"
        "spec = u.find_spec('csv') or sys.meta_path[-1].find_spec('csv', None)\n"
        "m = u.module_from_spec(spec); spec.loader.exec_module(m)",
        # importlib._bootstrap's own entry point, with the guard finder removed first
        "import importlib._bootstrap as b, sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'GuardFinder']\n"
        "b._gcd_import('csv')",
        # a file loader built by hand
        "import importlib.machinery as m, os\n"
        "path = os.path.join(os.path.dirname(os.__file__), 'csv.py')\n"
        "m.SourceFileLoader('csv', path).load_module()",
        # a frozen module's loader, by hand (runpy's code is frozen into the interpreter)
        "import importlib.machinery as m, importlib.util as u\n"
        "spec = m.FrozenImporter.find_spec('runpy')\n"
        "mod = u.module_from_spec(spec); spec.loader.exec_module(mod)",
        # an extension module of the standard library loaded under a listed package's name
        "import importlib.util as u, os\n"
        "d = os.path.join(os.path.dirname(os.__file__), 'lib-dynload')\n"
        "f = [x for x in os.listdir(d) if x.startswith('_csv.')][0]\n"
        "u.module_from_spec(u.spec_from_file_location('importlib._csv', os.path.join(d, f)))",
        # a second instance of a guarded C module
        "import importlib.machinery as m, sys\n"
        "spec = m.BuiltinImporter.find_spec('posix')\n"
        "m.BuiltinImporter.create_module(spec)",
    ],
)
def test_loader_level_imports_are_refused(attack: str, python: str) -> None:
    code = (
        f"try:\n    exec({attack!r})\n    print('ESCAPED')\nexcept Exception as e:\n"
        "    print('refused', type(e).__name__, e)\n"
    )
    res = guarded.run(
        code, imports=("importlib", "os"), python=python, api=(("allow", "dynamic-code"),)
    )
    assert "refused" in res.stdout, res.stdout + res.stderr
    assert "ESCAPED" not in res.stdout


# ---------------------------------------------------------------------------------------
# Imports that library code makes for the program (tests/security/import_escapes.py)
# ---------------------------------------------------------------------------------------

sys_path_security = str(guarded.ROOT / "tests" / "security")
if sys_path_security not in guarded.sys.path:
    guarded.sys.path.insert(0, sys_path_security)
import import_escapes  # noqa: E402


def _corpus_run(code: str, python: str) -> guarded.Result:
    return guarded.run(
        code, imports=import_escapes.IMPORTS, api=(("allow", "*"),), python=python, timeout=120
    )


# One cell per attack and interpreter (an attack x interpreter matrix: the fast tier runs
# each attack on one interpreter, each interpreter at least once; conftest.py).
@pytest.mark.parametrize("label,code", [pytest.param(*a, id=a[0]) for a in import_escapes.ATTACKS])
def test_library_code_does_not_import_for_the_program(python: str, label: str, code: str) -> None:
    """Every attack of the corpus, each in a child of its own, on every interpreter."""
    res = _corpus_run(import_escapes.program(code), python)
    assert "held" in res.stdout, res.stdout + res.stderr[-600:]
    assert "ESCAPED" not in res.stdout, res.stdout + res.stderr[-600:]


@pytest.mark.parametrize("label,code", [pytest.param(*a, id=a[0]) for a in import_escapes.ALLOWED])
def test_library_code_still_imports_for_itself(python: str, label: str, code: str) -> None:
    res = _corpus_run(code, python)
    lines = res.stdout.strip().splitlines()
    assert res.returncode == 0 and lines and lines[-1] == "ok", res.stdout + res.stderr[-600:]


def test_library_frames_decide_by_the_instruction_they_run(python: str) -> None:
    """The rule's pieces, one by one, under `imports: [threading, json]`: a library's
    import *statement* is its own; its call of ``__import__`` (``Thread.run`` calling its
    target) is the program's, whoever called the library, unless the name is its own
    package's or a module already loaded."""
    r = guarded.probe(
        """
        import threading, json
        def call(name):
            return threading.Thread(target=__import__, args=(name,)).run()
        t("statement", lambda: json.loads("[1]"))
        t("call-unlisted", lambda: call("csv"))
        t("call-loaded", lambda: call("json"))
        t("call-own-package", lambda: call("threading"))
        """,
        imports=("threading", "json"),
        api=(("allow", "*"),),
        python=python,
    )
    assert r["statement"][0] == "ok"
    assert r["call-unlisted"][0] == "ImportDeniedError"
    assert r["call-loaded"][0] == "ok"
    assert r["call-own-package"][0] == "ok"


def test_c_code_imports_the_interpreters_own_helpers(python: str) -> None:
    """datetime's C code imports ``time`` (strftime) and ``_strptime`` (strptime) on
    demand: listing datetime is enough, and ``time`` itself needs no rule."""
    r = guarded.probe(
        """
        import datetime
        t("strftime", lambda: datetime.date(2020, 1, 2).strftime("%Y-%m-%d"))
        t("strptime", lambda: datetime.datetime.strptime("2021", "%Y").year)
        t("csv", lambda: __import__("csv"))
        """,
        imports=("datetime",),
        python=python,
    )
    assert r["strftime"] == ("ok", "'2020-01-02'")
    assert r["strptime"] == ("ok", "2021")
    assert r["csv"][0] == "ImportDeniedError"
