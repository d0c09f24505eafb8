"""A guarded function behaves as the function it stands for (issue 17), on every
interpreter here: a C function kept as a class attribute does not bind to the instance
(``tempfile``'s ``_unlink = os.unlink``, ``test_pickle``'s ``loads = pickle.loads``), it
pickles and copies by name, and code compiled by a guarded ``exec`` / ``compile`` inherits
no ``from __future__`` flag of pysb's own (``dataclasses``' generated ``__init__``)."""

from __future__ import annotations

from pathlib import Path

import guarded

BODY = """
import copy, dataclasses, os, pickle, typing

class Keeper:  # C functions as class attributes: no binding, as in CPython
    stat = os.stat
    unlink = os.unlink
    loads = pickle.loads
    dumps = pickle.dumps

k = Keeper()
open("victim", "w").close()
t("bound_stat", lambda: k.stat(".").st_mode == os.stat(".").st_mode)
t("bound_unlink", lambda: (k.unlink("victim"), os.path.exists("victim"))[1])
t("bound_loads", lambda: k.loads(k.dumps([1, 2])))
t("pickle_face", lambda: pickle.loads(pickle.dumps(os.stat)) is os.stat)
t("copy_face", lambda: copy.copy(os.stat) is os.stat and copy.deepcopy(os.stat) is os.stat)
t("callable", lambda: callable(os.stat) and os.stat.__name__ == "stat")
import inspect
t("signature", lambda: str(inspect.signature(os.stat)))
t("argspec", lambda: inspect.getfullargspec(os.stat).kwonlyargs)

@dataclasses.dataclass
class Point:
    x: int
    y: "list[int]"

t("dataclass_hints", lambda: repr(typing.get_type_hints(Point.__init__)))
t("exec_annotations", lambda: (exec("def f(a: int) -> str: pass", ns := {}),
                                 ns["f"].__annotations__)[1])
t("compile_annotations", lambda: (exec(compile("def f(a: int): pass", "<s>", "exec"), ns := {}),
                                    ns["f"].__annotations__)[1])
"""


def test_guarded_functions_keep_their_python_semantics(tmp_path: Path, python: str) -> None:
    r = guarded.probe(
        BODY,
        cwd=tmp_path,
        python=python,
        imports=("copy", "dataclasses", "os", "pickle", "typing", "posix", "inspect"),
        exposures=[guarded.expose(tmp_path, rw=True)],
        api=(("allow", "deserialization"), ("allow", "dynamic-code")),
    )
    assert r["bound_stat"] == ("ok", "True"), r["bound_stat"]
    assert r["bound_unlink"] == ("ok", "False"), r["bound_unlink"]
    assert r["bound_loads"] == ("ok", "[1, 2]"), r["bound_loads"]
    assert r["pickle_face"] == ("ok", "True"), r["pickle_face"]
    assert r["copy_face"] == ("ok", "True"), r["copy_face"]
    assert r["callable"] == ("ok", "True"), r["callable"]
    assert r["signature"] == ("ok", "'(path, *, dir_fd=None, follow_symlinks=True)'"), r
    assert r["argspec"] == ("ok", "['dir_fd', 'follow_symlinks']"), r
    hints = r["dataclass_hints"]
    assert hints[0] == "ok" and "'x': <class 'int'>" in hints[1], hints
    assert "'return': <class 'NoneType'>" in hints[1], hints
    assert r["exec_annotations"] == ("ok", "{'a': <class 'int'>, 'return': <class 'str'>}")
    assert r["compile_annotations"] == ("ok", "{'a': <class 'int'>}")


def test_deleting_a_missing_name_says_it_is_missing(tmp_path: Path, python: str) -> None:
    """As the kernel does (the name is looked up before any permission): removing a name
    that does not exist in a read-only exposure is FileNotFoundError, not a refusal
    (``test.support``'s ``unlink`` ignores only the former)."""
    (tmp_path / "kept.txt").write_text("x")
    r = guarded.probe(
        """
        import os
        t("unlink_missing", lambda: os.unlink("gone.pyc"))
        t("remove_missing", lambda: os.remove("gone.pyc"))
        t("rmdir_missing", lambda: os.rmdir("gone"))
        t("unlink_kept", lambda: os.unlink("kept.txt"))
        """,
        cwd=tmp_path,
        python=python,
        imports=("os",),
        exposures=[guarded.expose(tmp_path)],
    )
    for case in ("unlink_missing", "remove_missing", "rmdir_missing"):
        assert r[case][0] == "FileNotFoundError", r[case]
    assert r["unlink_kept"][0] == "WriteDeniedError", r["unlink_kept"]


def test_a_failed_guarded_call_leaves_no_reference_cycle(tmp_path: Path, python: str) -> None:
    """An exception raised by a face (the original's, or a refusal) does not keep its
    frames alive until the collector runs: ``__del__`` runs when the last reference goes,
    as in CPython (``tempfile``'s tests count on it; open files would linger)."""
    r = guarded.probe(
        """
        import gc, os, weakref
        gc.disable()

        class Holder:
            def __init__(self, fail):
                try:
                    fail()
                except Exception:
                    pass

        for name, fail in [
            ("missing", lambda: os.lstat("no-such-file")),
            ("refused", lambda: open("/pysb-not-exposed/x")),
            ("import", lambda: __import__("csv")),
        ]:
            h = Holder(fail)
            ref = weakref.ref(h)
            del h
            t(name, lambda: ref() is None)
        """,
        cwd=tmp_path,
        python=python,
        imports=("os", "gc", "weakref"),
        exposures=[guarded.expose(tmp_path)],
    )
    assert r == {"missing": ("ok", "True"), "refused": ("ok", "True"), "import": ("ok", "True")}
