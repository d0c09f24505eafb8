# ruff: noqa: E501  (attack programs read better with long lines)
"""Escapes an outside review found through the Python layer (issue 22, items 3, 7-11, 15).

Every attack is a real program run with ``pysb run`` under a profile that does *not* allow
what it tries; it prints ``ESCAPED ...`` when the forbidden thing happened and ``held`` at
the end. The Python layer is the only boundary under ``subprocess``, so every attack runs
there; the ones whose outcome depends on the OS layer too (native code from memory, the
renamed exposure) also run under the namespace and Landlock providers.

Layout (under the test's ``tmp_path``)::

    outside/secret.txt      a secret no exposure covers
    project/                the working directory, holds the profile
    project/pub/            ``expose-ro``
    project/rw/             ``expose-rw``
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from pathlib import Path

import pytest
from review_escapes import (
    CASES,
    CTYPES_FROM_ADDRESS,
    CWD_RACE,
    FIND_SPEC_REWRITTEN,
    NATIVE_FROM_MEMORY,
    PROC_FD_REPOINTED,
    RENAMED,
    RENAMED_C_MODULES,
    SHM,
    SPWD,
    SQLITE,
    SQLITE_AUTHORIZERS,
    SQLITE_OTHER_CONNECTIONS,
    SQLITE_READ_ONLY,
    SQLITE_URIS,
    TCL,
    program,
    refusals,
)

from pysb_core.testing import require_provider, run_pysb

OS_PROVIDERS = ["landlock", "bwrap", "unshare"]


def hole(item: str) -> pytest.MarkDecorator:
    """An escape of issue 22 not closed yet: strict, so that its fix flips the test."""
    return pytest.mark.xfail(strict=True, reason=f"HOLE (issue 22, item {item})")


class Box:
    """The layout above and one run of a program in it."""

    def __init__(self, root: Path, provider: str) -> None:
        self.provider = provider
        self.token = secrets.token_hex(8)
        self.outside = root / "outside"
        self.project = root / "project"
        self.secret = self.outside / "secret.txt"
        for d in (self.outside, self.project / "pub" / "sub", self.project / "rw"):
            d.mkdir(parents=True, exist_ok=True)
        self.secret.write_text(f"TOP-SECRET-{self.token}\n")

    def profile(self, imports: str, extra: str = "", ro: str = "[./pub]") -> None:
        (self.project / ".pysb.yaml").write_text(
            f"version: 1\nimports: [{imports}]\nfiles:\n  expose-ro: {ro}\n"
            "  expose-rw: [./rw]\n" + extra
        )

    def run(self, code: str, *args: str, timeout: float = 120, python: str | None = None) -> str:
        if self.provider != "subprocess":
            require_provider(self.provider)
        script = self.project / "pub" / "attack.py"
        script.write_text(program(code, str(self.secret), str(self.outside), str(self.project)))
        r = run_pysb(
            "run",
            "--profile",  # named: a found profile would need the user's trust
            ".pysb.yaml",
            "--provider",
            self.provider,
            *args,
            "pub/attack.py",
            cwd=self.project,
            timeout=timeout,
            python=python,
        )
        out = r.stdout + r.stderr
        assert "held" in r.stdout, out
        assert "ESCAPED" not in out, out
        assert self.token not in out, out
        return r.stdout


@pytest.fixture
def box(tmp_path: Path, request: pytest.FixtureRequest) -> Box:
    provider = getattr(request, "param", "subprocess")
    return Box(tmp_path, provider)


def _os_params() -> list[object]:
    return [
        "subprocess",
        *(pytest.param(p, marks=pytest.mark.provider(p), id=p) for p in OS_PROVIDERS),
    ]


# -- 7: decisions on paths through /proc/self/fd are never cached --------------------------


def test_decisions_through_proc_fd_are_not_cached(box: Box) -> None:
    (box.project / "secret.txt").write_text(f"PROJECT-SECRET-{box.token}\n")
    box.profile("os")
    out = box.run(PROC_FD_REPOINTED)
    assert refusals(out) == 4, out


# -- 3 and 8: extension modules only from the interpreter's and site-packages' files -------


@pytest.mark.parametrize("box", _os_params(), indirect=True)
def test_extension_modules_come_only_from_library_files(box: Box) -> None:
    box.profile("os, sys, _imp, importlib, _bisect, _queue, _json, json")
    out = box.run(NATIVE_FROM_MEMORY)
    assert "control True" in out, out
    assert refusals(out) == 2, out


def test_stdlib_c_modules_are_not_created_under_other_names(box: Box) -> None:
    box.profile("os, sys, _imp, importlib, json")
    out = box.run(RENAMED_C_MODULES)
    assert refusals(out) == 3, out


# -- 9: ctypes' raw memory access is native ------------------------------------------------


def test_ctypes_raw_memory_needs_native(box: Box) -> None:
    box.profile("ctypes")
    out = box.run(CTYPES_FROM_ADDRESS)
    assert out.count("ApiDeniedError") == 3, out


# -- 11: modules that reach files or programs with C code of their own ---------------------


def test_spwd_reads_shadow_only_when_exposed(box: Box) -> None:
    box.profile("spwd")
    box.run(SPWD)


def test_sqlite_attach_is_judged_as_a_file_access(box: Box) -> None:
    db = sqlite3.connect(box.outside / "db.sqlite")
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (?)", (box.token,))
    db.commit()
    db.close()
    box.profile("sqlite3")
    out = box.run(SQLITE)
    assert "control attached" in out, out
    assert not (box.outside / "created.sqlite").exists()
    assert not (box.outside / "vacuumed.sqlite").exists()


def _outside_db(box: Box) -> None:
    db = sqlite3.connect(box.outside / "db.sqlite")
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (?)", (box.token,))
    db.commit()
    db.close()


def test_sqlite_connections_made_otherwise_judge_attach(box: Box, pysb_python: str) -> None:
    """``sqlite3.Connection(path)``, a factory with an ``__init__`` or ``__new__`` of its
    own, a re-initialised connection: made, usable, and their ``ATTACH`` judged from the
    first statement on (SQLite's hook sets the authorizer as the library opens the
    connection). They were refused with PermissionError before, except the factory with
    a plain ``__init__``, which used the connection before the authorizer was set."""
    _outside_db(box)
    box.profile("sqlite3")
    out = box.run(SQLITE_OTHER_CONNECTIONS, python=pysb_python)
    assert refusals(out) == CASES["sqlite-other-connections"].refused, out
    assert out.count("at ATTACH not authorized") == 11, out
    assert out.count("made ") == 5, out
    assert "control factory D" in out, out


def test_sqlite_uris_are_judged_as_sqlite_reads_them(box: Box, pysb_python: str) -> None:
    """Percent escapes in a URI's path and its last ``mode=`` decide what SQLite opens: the
    judge read ``file:%2F...`` as a relative name and ``?mode=memory&mode=rw`` as memory,
    and a connection read the database outside."""
    _outside_db(box)
    box.profile("sqlite3")
    out = box.run(SQLITE_URIS, python=pysb_python)
    assert refusals(out) == 10, out
    assert "control uris [(0,)]" in out, out
    assert not (box.project / "pub" / "created.sqlite").exists()
    assert sorted(p.name for p in box.outside.iterdir()) == ["db.sqlite", "secret.txt"]


def test_sqlite_read_only_exposure_is_opened_read_only(box: Box, pysb_python: str) -> None:
    """A database under a read-only exposure opens read-only: reads work, a write is
    SQLite's own OperationalError (a WriteDeniedError at connect() before), nothing is
    created or changed beside it (a WAL database's -wal and -shm included). Through a
    ``factory`` too, with or without an ``__init__`` of its own (WriteDeniedError until
    issue 28's residual was closed)."""
    pub = box.project / "pub"
    for name, wal in (("plain.sqlite", False), ("wal.sqlite", True)):
        db = sqlite3.connect(pub / name)
        if wal:
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES ('kept')")
        db.commit()
        db.close()
    before = {p.name: p.read_bytes() for p in pub.iterdir() if p.is_file()}
    box.profile("sqlite3, os")
    out = box.run(SQLITE_READ_ONLY, python=pysb_python)
    assert out.count("read [('kept',)]") == 5, out
    assert out.count("attempt to write a readonly database") == 10, out
    assert out.count("unable to open database file") == 2, out
    after = {p.name: p.read_bytes() for p in pub.iterdir() if p.is_file() and p.name != "attack.py"}
    assert after == {k: v for k, v in before.items() if k != "attack.py"}


def test_sqlite_authorizer_cannot_be_removed(box: Box, pysb_python: str) -> None:
    """A program's ``set_authorizer(None)`` replaced the guard's authorizer, and
    ``ATTACH`` then read the database outside. Now the program's authorizer composes with
    the guard's, however it is set (method, keyword, unbound, the type's dictionary,
    ``super``, a subclass's override, a second ``_sqlite3``) and on whatever connection
    (``connect``, ``Connection()``, a factory, a re-initialised one): ``ATTACH`` and
    ``VACUUM INTO`` outside are refused, an ``ATTACH`` in the read-write exposure works,
    and the program's own authorizer still denies what it denies."""
    _outside_db(box)
    box.profile("sqlite3, _sqlite3, importlib, sys")
    out = box.run(SQLITE_AUTHORIZERS, python=pysb_python)
    assert refusals(out) == 6 * 10 * 2, out
    assert out.count(" ATTACH not authorized") == 6 * 10, out
    assert out.count(" VACUUM authorization denied") == 6 * 10, out
    assert out.count("control denied") == 6 * 10, out
    assert sorted(p.name for p in box.outside.iterdir()) == ["db.sqlite", "secret.txt"]
    assert len(list((box.project / "rw").iterdir())) == 6 * 10


def test_a_rewritten_find_spec_still_refuses_as_pysb(box: Box, pysb_python: str) -> None:
    """A program that rewrites the ``__code__`` or the decision cell of the import guard's
    ``_find_spec`` skips its decision; the module is still refused (the ``exec`` event, the
    ``__import__`` / ``import_module`` gates), and the refusal is pysb's
    ``ImportDeniedError`` (SPEC §7). It was ``ModuleNotFoundError: No module named
    'pysb_core'``: building the refusal imported pysb's error class, which the rewritten
    function no longer handed back (issue 28's residual)."""
    box.profile("importlib, sys")
    out = box.run(FIND_SPEC_REWRITTEN, python=pysb_python)
    assert refusals(out) == 6, out
    assert out.count("ImportDeniedError import of 'csv' refused by the sandbox") == 6, out


def test_syslog_and_named_semaphores_are_file_accesses(box: Box) -> None:
    case = CASES["c-files"]
    box.profile(", ".join(case.imports))
    out = box.run(case.code)
    assert refusals(out) == case.refused, out


def test_tcl_interpreters_are_process_exec(box: Box) -> None:
    box.profile("tkinter")
    out = box.run(TCL)
    assert "ApiDeniedError" in out, out


def test_posix_shared_memory_is_a_file_access(box: Box) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    name = f"/pysb-review-{box.token}"
    host = Path("/dev/shm") / name.lstrip("/")
    host.write_text(f"SHM-{box.token}")
    try:
        box.profile("os, _posixshmem")
        out = box.run(f"NAME = {name!r}\n" + SHM)
        assert refusals(out) == 2, out
        assert not Path(str(host) + "-new").exists()
    finally:
        for p in (host, Path(str(host) + "-new")):
            p.unlink(missing_ok=True)


# -- 10: a thread changing the working directory races the file judge ----------------------


def test_threads_do_not_race_the_judge_through_descriptors(box: Box) -> None:
    (box.project / "secret.txt").write_text(f"PROJECT-SECRET-{box.token}\n")
    case = CASES["proc-fd-thread-race"]
    box.profile(", ".join(case.imports), "api:\n  allow: [threads]\n")
    out = box.run(case.code, timeout=60)
    assert refusals(out) == case.refused, out
    assert case.controls[0] in out, out


def test_relative_paths_after_chdir_are_judged_against_the_new_directory(box: Box) -> None:
    (box.project / "secret.txt").write_text(f"PROJECT-SECRET-{box.token}\n")
    case = CASES["chdir-stale"]
    box.profile(", ".join(case.imports))
    out = box.run(case.code)
    assert refusals(out) == case.refused, out
    assert case.controls[0] in out, out


def test_threads_changing_directory_do_not_race_the_judge(box: Box) -> None:
    box.profile("os, threading, time", "api:\n  allow: [threads]\n", ro="[.]")
    out = box.run(CWD_RACE, timeout=60)
    # chdir works with threads (issue 28, item 1); the judged path is the path opened
    assert "chdir refusals []" in out, out
    assert "ESCAPED" not in out and box.token not in out, out
    assert "control chdir True" in out, out


# -- 15: a renamed exposure under providers that rename with a mount -----------------------


@pytest.mark.parametrize(
    "box",
    [
        "subprocess",
        *(
            pytest.param(p, marks=pytest.mark.provider(p), id=p)
            for p in ("bwrap", "unshare", "qemu", "landlock", "firejail")
        ),
    ],
    indirect=True,
)
def test_renamed_exposure_is_judged_where_the_program_sees_it(box: Box) -> None:
    data = box.project / "data"
    data.mkdir()
    (data / "x.txt").write_text("renamed!\n")
    (box.project / ".pysb.yaml").write_text(
        "version: 1\nimports: [os]\nfiles:\n  expose-ro: [./pub]\n  expose-rw: ['./rw', './data:/data']\n"
    )
    out = box.run(RENAMED)
    assert "read renamed!" in out, out
    assert "listed ['new.txt', 'x.txt']" in out or "listed ['x.txt']" in out, out
    assert "stat 7" in out, out
    assert (data / "new.txt").read_text() == "written"


def test_corpus_programs_compile() -> None:
    """The attack programs are valid Python (a typo would make every test pass vacuously)."""
    for code in (
        SQLITE,
        SQLITE_URIS,
        SQLITE_READ_ONLY,
        SHM,
        RENAMED,
        *(case.code for case in CASES.values()),
    ):
        compile(program(code, "/s", "/o", "/p"), "<attack>", "exec")


def test_mount_renamed_policy_names_everything_as_seen_inside() -> None:
    """Under a provider whose mounts rename, the child's policy has no renamed exposure
    left, and a profile file below a renamed exposure is protected under its new name."""
    from pysb_core.launch.pipeline import renamed_by_mounts
    from pysb_core.policy import Exposure, Policy

    policy = Policy(
        exposures=(
            Exposure("/srv/p", "/srv/p", False),
            Exposure("/srv/p/data", "/data", True),
        ),
        profile_files=("/srv/p/data/.pysb.yaml", "/srv/p/.pysb.yaml"),
        state_dirs=("/srv/p/datax",),
    )
    inside = renamed_by_mounts(policy)
    assert [(e.path, e.target, e.writable) for e in inside.exposures] == [
        ("/srv/p", "/srv/p", False),
        ("/data", "/data", True),
    ]
    assert inside.profile_files == ("/data/.pysb.yaml", "/srv/p/.pysb.yaml")
    assert inside.state_dirs == ("/srv/p/datax",)
