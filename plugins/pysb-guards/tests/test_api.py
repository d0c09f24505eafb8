"""The sensitive-API guard, in real child interpreters."""

from __future__ import annotations

from pathlib import Path

import guarded


def _marker_cmd(path: Path) -> str:
    return f"touch {path}"


def test_denied_by_default_with_both_allow_lines(tmp_path: Path, python: str) -> None:
    marker = tmp_path / "ran"
    r = guarded.probe(
        f"""
        import os
        t("system", lambda: os.system({_marker_cmd(marker)!r}))
        def attrs():
            try:
                os.system("true")
            except PermissionError as e:
                return (e.qualname, e.category, e.suggested_rule)
        t("attrs", attrs)
        """,
        python=python,
        cwd=tmp_path,
    )
    assert r["system"][0] == "ApiDeniedError"
    assert "`api: allow: [os.system]`" in r["system"][1]
    assert "`api: allow: [process-exec]`" in r["system"][1]
    assert r["attrs"] == ("ok", "('os.system', 'process-exec', 'api: allow: [os.system]')")
    assert not marker.exists()


def test_each_door_of_a_chain_is_judged(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    body = f"""
        import subprocess
        t("run", lambda: subprocess.run(["touch", {str(marker)!r}]).returncode)
        """
    r = guarded.probe(body, api=(("allow", "subprocess.run"),), cwd=tmp_path)
    assert r["run"][0] == "ApiDeniedError" and "'subprocess.Popen'" in r["run"][1]
    r = guarded.probe(
        body, api=(("allow", "subprocess.run"), ("allow", "subprocess.Popen")), cwd=tmp_path
    )
    assert r["run"][0] == "ApiDeniedError" and "_posixsubprocess.fork_exec" in r["run"][1]
    assert not marker.exists()
    r = guarded.probe(body, api=(("allow", "process-exec"),), cwd=tmp_path)
    assert r["run"] == ("ok", "0") and marker.exists()


def test_a_rule_on_one_spelling_decides_both(tmp_path: Path) -> None:
    body = """
        import os, posix
        t("os", lambda: os.system("true"))
        t("posix", lambda: posix.system("true"))
        """
    r = guarded.probe(body, api=(("allow", "posix.system"),), cwd=tmp_path)
    assert r["os"] == ("ok", "0") and r["posix"] == ("ok", "0")
    r = guarded.probe(body, api=(("allow", "process-exec"), ("deny", "os.system")), cwd=tmp_path)
    assert r["os"][0] == "ApiDeniedError" and r["posix"][0] == "ApiDeniedError"
    r = guarded.probe(body, api=(("deny", "os.system"), ("allow", "os.system")), cwd=tmp_path)
    assert r["os"][0] == "ApiDeniedError"


def test_threads_on_every_version(python: str) -> None:
    body = """
        import threading, _thread
        out = []
        def start():
            th = threading.Thread(target=lambda: out.append(1))
            th.start()
            th.join()
            return out
        t("thread", start)
        t("raw", lambda: _thread.start_new_thread(lambda: None, ()))
        """
    r = guarded.probe(body, python=python)
    assert r["thread"][0] == "ApiDeniedError" and r["raw"][0] == "ApiDeniedError"
    r = guarded.probe(body, api=(("allow", "threading.Thread.start"),), python=python)
    assert r["thread"][0] == "ApiDeniedError"  # the inner door (_start_*_thread) stops it
    assert "_thread.start_" in r["thread"][1]
    r = guarded.probe(body, api=(("allow", "threads"),), python=python)
    assert r["thread"] == ("ok", "[1]") and r["raw"][0] == "ok"


def test_dynamic_code_is_judged_for_the_program_only(python: str) -> None:
    body = """
        import collections, dataclasses
        x = 41
        t("eval", lambda: eval("x + 1"))
        def run_exec():
            exec("y = 2", globals())
            return globals()["y"]
        t("exec", run_exec)
        t("compile", lambda: compile("1", "<s>", "eval"))
        t("namedtuple", lambda: collections.namedtuple("P", "a b")(1, 2).b)
        t("dataclass", lambda: dataclasses.make_dataclass("D", ["a"])(3).a)
        """
    r = guarded.probe(body, python=python)
    assert r["eval"][0] == "ApiDeniedError" and "builtins.eval" in r["eval"][1]
    assert r["exec"][0] == "ApiDeniedError" and r["compile"][0] == "ApiDeniedError"
    assert r["namedtuple"] == ("ok", "2") and r["dataclass"] == ("ok", "3")
    r = guarded.probe(body, api=(("allow", "dynamic-code"),), python=python)
    assert r["eval"] == ("ok", "42") and r["exec"] == ("ok", "2")


def test_deserialization_including_the_unpatchable_unpickler() -> None:
    r = guarded.probe(
        """
        import pickle, io, collections
        data = pickle.dumps(collections.OrderedDict(a=1))
        t("loads", lambda: pickle.loads(data))
        t("Unpickler", lambda: pickle.Unpickler(io.BytesIO(data)).load())
        t("plain", lambda: pickle.Unpickler(io.BytesIO(pickle.dumps([1, "a"]))).load())
        """,
    )
    assert r["loads"][0] == "ApiDeniedError"
    assert r["Unpickler"][0] == "ApiDeniedError"  # judged through its audit event
    assert "'pickle.Unpickler'" in r["Unpickler"][1]
    assert r["plain"] == ("ok", "[1, 'a']")  # plain data names no global


def test_introspection_and_native() -> None:
    r = guarded.probe(
        """
        import gc, sys, ctypes
        t("gc", lambda: gc.get_referents(sys))
        t("objects", lambda: len(gc.get_objects()))
        t("settrace", lambda: sys.settrace(None))
        t("cdll", lambda: ctypes.CDLL(None))
        t("string_at", lambda: ctypes.string_at(id(1), 8))
        t("pythonapi", lambda: ctypes.pythonapi.Py_IsInitialized())
        """,
    )
    for key in ("gc", "objects", "settrace", "cdll", "string_at", "pythonapi"):
        assert r[key][0] == "ApiDeniedError", (key, r[key])


def test_learning_records_and_refuses_nothing(tmp_path: Path) -> None:
    res = guarded.run(
        "import os\nos.system('true')\nprint(eval('1+1'))\nimport threading\n"
        "th = threading.Thread(target=print); th.start(); th.join()\n",
        learn=True,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    learned = {e.target for e in res.learned("api")}
    assert {"os.system", "builtins.eval", "threading.Thread.start"} <= learned
    assert not res.denials()
