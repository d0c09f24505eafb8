"""The file guard, in real child interpreters: what exists, what can be written."""

from __future__ import annotations

import ast
import os
import textwrap
from pathlib import Path

import guarded


def _run(project: Path, body: str, **kw):
    kw.setdefault("exposures", [guarded.expose(project), guarded.expose(project / "out", rw=True)])
    kw.setdefault("ignore", (".env", "*.pem"))
    return guarded.probe(body, cwd=project, **kw)


def _plain(project: Path, body: str, python: str) -> dict[str, tuple[str, str]]:
    """What ``body`` (a probe for :func:`guarded.probe`) gives under plain ``python``: what
    the guarded run must give too."""
    import subprocess

    code = guarded.PRELUDE + textwrap.dedent(body) + guarded.EPILOGUE
    plain = subprocess.run(
        [python, "-c", code], cwd=project, capture_output=True, text=True, timeout=60
    )
    return ast.literal_eval(plain.stdout.splitlines()[-1])


def test_not_exposed_paths_do_not_exist_by_every_door(project: Path, python: str) -> None:
    secret = str(project.parent / "outside" / "secret.txt")
    r = _run(
        project,
        f"""
        import os, io, _io, pathlib, shutil, glob
        S = {secret!r}
        t("open", lambda: open(S).read())
        t("io.open", lambda: io.open(S).read())
        t("FileIO", lambda: _io.FileIO(S).read())
        t("type_of_raw", lambda: type(__sys.stdin.buffer.raw)(S).read())
        t("os.open", lambda: os.open(S, os.O_RDONLY))
        t("posix.open", lambda: __import__("posix").open(S, os.O_RDONLY))
        t("stat", lambda: os.stat(S))
        t("lstat", lambda: os.lstat(S))
        t("exists", lambda: os.path.exists(S))
        t("access", lambda: os.access(S, os.R_OK))
        t("pathlib", lambda: pathlib.Path(S).read_text())
        t("listdir", lambda: os.listdir(os.path.dirname(S)))
        t("scandir", lambda: list(os.scandir(os.path.dirname(S))))
        t("glob", lambda: glob.glob(os.path.dirname(S) + "/*"))
        t("shutil", lambda: shutil.copy(S, "out/stolen"))
        t("open_code", lambda: io.open_code(S).read())
        t("sqlite", lambda: __import__("sqlite3").connect(S))
        """,
        python=python,
    )
    for key in (
        "open",
        "io.open",
        "FileIO",
        "type_of_raw",
        "os.open",
        "posix.open",
        "stat",
        "lstat",
        "pathlib",
        "listdir",
        "scandir",
        "shutil",
        "open_code",
        "sqlite",
    ):
        assert r[key][0] == "FileDeniedError", (key, r[key])
    assert "files: expose-ro: [" in r["open"][1] and "outside" in r["open"][1]
    assert r["exists"] == ("ok", "False") and r["access"] == ("ok", "False")
    assert r["glob"] == ("ok", "[]")
    assert not (project / "out" / "stolen").exists()


def test_read_only_and_read_write_exposures(project: Path) -> None:
    r = _run(
        project,
        """
        import os, pathlib
        t("read", lambda: open("data/x.txt").read())
        t("write_ro", lambda: open("data/x.txt", "a"))
        t("create_ro", lambda: pathlib.Path("data/new").write_text("x"))
        t("mkdir_ro", lambda: os.mkdir("data/d"))
        t("unlink_ro", lambda: os.unlink("data/x.txt"))
        t("chmod_ro", lambda: os.chmod("data/x.txt", 0o777))
        t("utime_ro", lambda: os.utime("data/x.txt"))
        t("rename_out", lambda: os.rename("data/x.txt", "out/x.txt"))
        t("write_rw", lambda: pathlib.Path("out/y.txt").write_text("y"))
        t("rename_rw", lambda: os.replace("out/y.txt", "out/z.txt"))
        t("mkfifo_ro", lambda: os.mkfifo("data/fifo"))
        t("os_open_trunc", lambda: os.open("data/x.txt", os.O_WRONLY | os.O_TRUNC))
        """,
    )
    assert r["read"] == ("ok", "'data'")
    for key in (
        "write_ro",
        "create_ro",
        "mkdir_ro",
        "unlink_ro",
        "chmod_ro",
        "utime_ro",
        "rename_out",
        "mkfifo_ro",
        "os_open_trunc",
    ):
        assert r[key][0] == "WriteDeniedError", (key, r[key])
    assert "`files: expose-rw: [./data]`" in r["write_ro"][1]
    assert r["write_rw"][0] == "ok" and r["rename_rw"][0] == "ok"
    assert (project / "out" / "z.txt").read_text() == "y"
    assert (project / "data" / "x.txt").read_text() == "data"


def test_ignore_hides_names_everywhere(project: Path) -> None:
    r = _run(
        project,
        """
        import os, glob
        t("open_env", lambda: open(".env").read())
        t("open_pem", lambda: open("data/key.pem").read())
        t("listdir", lambda: sorted(os.listdir(".")))
        t("listdir_data", lambda: sorted(os.listdir("data")))
        t("scandir", lambda: sorted(e.name for e in os.scandir("data")))
        t("glob", lambda: sorted(glob.glob("data/*")))
        t("walk", lambda: sorted(f for _, _, fs in os.walk(".") for f in fs))
        t("access", lambda: os.access(".env", os.R_OK))
        """,
    )
    assert r["open_env"][0] == "FileDeniedError" and "ignore: [.env]" in r["open_env"][1]
    assert r["open_pem"][0] == "FileDeniedError"
    assert ".env" not in r["listdir"][1] and "app.py" in r["listdir"][1]
    assert r["listdir_data"] == ("ok", "['x.txt']")
    assert r["scandir"] == ("ok", "['x.txt']")
    assert "key.pem" not in r["glob"][1]
    assert ".env" not in r["walk"][1] and "key.pem" not in r["walk"][1]
    assert r["access"] == ("ok", "False")


def test_symlinks_cannot_escape(project: Path) -> None:
    outside = project.parent / "outside"
    os.symlink(outside / "secret.txt", project / "data" / "link")
    os.symlink(outside, project / "out" / "dirlink")
    r = _run(
        project,
        """
        import os
        t("via_link", lambda: open("data/link").read())
        t("via_dirlink", lambda: open("out/dirlink/secret.txt").read())
        t("lstat_link", lambda: os.lstat("data/link").st_size > 0)
        t("readlink", lambda: os.readlink("data/link"))
        t("new_link_out", lambda: os.symlink("/etc/passwd", "out/p"))
        t("new_link_in", lambda: os.symlink("../data/x.txt", "out/ok"))
        t("hardlink_ro", lambda: os.link("data/x.txt", "out/hard"))
        t("unlink_link", lambda: os.unlink("out/dirlink"))
        """,
    )
    assert r["via_link"][0] == "FileDeniedError"
    assert r["via_dirlink"][0] == "FileDeniedError"
    assert r["lstat_link"] == ("ok", "True")  # the link itself lives in an exposure
    assert r["readlink"][0] == "FileDeniedError"  # but where it points is not shown
    assert r["new_link_out"][0] == "FileDeniedError"
    assert r["new_link_in"][0] == "ok"
    assert r["hardlink_ro"][0] == "WriteDeniedError"  # a writable name for a read-only file
    assert r["unlink_link"][0] == "ok"  # judged on its directory, not on its target
    assert (outside / "secret.txt").exists()


def test_dir_fd_forms_are_resolved(project: Path) -> None:
    r = _run(
        project,
        """
        import os
        d = os.open("data", os.O_RDONLY)
        o = os.open("out", os.O_RDONLY)
        t("read_in", lambda: os.read(os.open("x.txt", os.O_RDONLY, dir_fd=d), 9))
        t("escape", lambda: os.open("../../outside/secret.txt", os.O_RDONLY, dir_fd=d))
        t("stat_escape", lambda: os.stat("../../outside/secret.txt", dir_fd=d))
        t("write_ro", lambda: os.open("new", os.O_WRONLY | os.O_CREAT, dir_fd=d))
        t("write_rw", lambda: os.close(os.open("new", os.O_WRONLY | os.O_CREAT, dir_fd=o)))
        t("unlink_ro", lambda: os.unlink("x.txt", dir_fd=d))
        t("rename_escape", lambda: os.rename("new", "../data/stolen", src_dir_fd=o, dst_dir_fd=o))
        """,
    )
    assert r["read_in"] == ("ok", "b'data'")
    assert r["escape"][0] == "FileDeniedError" and r["stat_escape"][0] == "FileDeniedError"
    assert r["write_ro"][0] == "WriteDeniedError" and r["unlink_ro"][0] == "WriteDeniedError"
    assert r["write_rw"][0] == "ok"
    assert r["rename_escape"][0] == "WriteDeniedError"


def test_profile_files_are_never_writable(project: Path) -> None:
    profile = project / "out" / ".pysb.yaml"
    profile.write_text("version: 1\n")
    r = _run(
        project,
        """
        t("write", lambda: open("out/.pysb.yaml", "w"))
        t("read", lambda: open("out/.pysb.yaml").read())
        t("replace", lambda: __import__("os").replace("out/.pysb.yaml", "out/moved"))
        """,
        profile_files=(str(profile),),
    )
    assert r["write"][0] == "WriteDeniedError" and "profile file" in r["write"][1]
    assert r["read"] == ("ok", "'version: 1\\n'")
    assert r["replace"][0] == "WriteDeniedError"
    assert profile.read_text() == "version: 1\n"


def test_renamed_exposure_is_a_path_translation(project: Path) -> None:
    r = _run(
        project,
        """
        import os, pathlib
        t("read", lambda: open("/sandbox-data/x.txt").read())
        t("listdir", lambda: os.listdir("/sandbox-data"))
        t("pathlib", lambda: pathlib.Path("/sandbox-data/x.txt").read_text())
        t("write", lambda: open("/sandbox-data/y", "w"))
        """,
        exposures=[guarded.expose(project / "data", target="/sandbox-data")],
    )
    assert r["read"] == ("ok", "'data'")
    assert "x.txt" in r["listdir"][1] and r["pathlib"] == ("ok", "'data'")
    assert r["write"][0] == "WriteDeniedError"


def test_tempfile_without_exposure_fails_cleanly(project: Path) -> None:
    r = _run(project, 't("tmp", lambda: __import__("tempfile").mkstemp())')
    assert r["tmp"][0] == "FileNotFoundError" and "temporary directory" in r["tmp"][1]


def test_denial_sets_errno_and_is_reported(project: Path) -> None:
    res = guarded.run(
        "import errno\ntry:\n open('/etc/shadow')\nexcept FileNotFoundError as e:\n"
        " print(e.errno == errno.ENOENT, e.filename)",
        cwd=project,
    )
    assert res.stdout.strip() == "True /etc/shadow"
    [event] = [e for e in res.denials("files") if e.target == "/etc/shadow"]
    assert event.target == "/etc/shadow" and event.suggested_rule == "files: expose-ro: [/etc]"


def test_c_functions_that_open_paths_are_judged(project: Path) -> None:
    secret = str(project.parent / "outside" / "secret.txt")
    r = _run(
        project,
        f"""
        import ssl, readline, sqlite3
        S = {secret!r}
        t("ssl", lambda: ssl.create_default_context().load_verify_locations(S))
        t("ssl_chain", lambda: ssl.create_default_context().load_cert_chain(S))
        t("readline", lambda: readline.read_history_file(S))
        t("history_out", lambda: readline.write_history_file("data/hist"))
        t("sqlite_ro_uri", lambda: sqlite3.connect("file:" + S + "?mode=ro", uri=True))
        """,
    )
    for key in ("ssl", "ssl_chain", "readline", "sqlite_ro_uri"):
        assert r[key][0] == "FileDeniedError", (key, r[key])
    assert r["history_out"][0] == "WriteDeniedError"


def test_held_pipes_reopen_through_proc_but_files_keep_their_rules(project: Path) -> None:
    r = _run(
        project,
        """
        import os
        rd, wr = os.pipe()
        def via_proc():
            with open(f"/proc/self/fd/{wr}", "w") as f:
                f.write("x")
            return os.read(rd, 1)
        t("pipe", via_proc)
        ro = os.open("data/x.txt", os.O_RDONLY)
        t("upgrade", lambda: open(f"/proc/self/fd/{ro}", "w"))
        t("devnull", lambda: open("/dev/null", "w").write("x"))
        """,
    )
    assert r["pipe"] == ("ok", "b'x'")
    assert r["upgrade"][0] == "WriteDeniedError"  # the fd's file is still read-only
    assert r["devnull"] == ("ok", "1")


def test_everyday_library_code_works_inside_the_exposures(project: Path, python: str) -> None:
    tmp = project / "out" / "tmp"
    tmp.mkdir()
    r = _run(
        project,
        """
        import os, shutil, tempfile, pathlib, zipfile
        def temp():
            with tempfile.NamedTemporaryFile("w", delete=False) as f:
                f.write("t")
            return os.path.dirname(f.name) == os.environ["TMPDIR"]
        t("tempfile", temp)
        def tree():
            base = pathlib.Path("out/tree")
            (base / "a" / "b").mkdir(parents=True)
            (base / "a" / "b" / "f.txt").write_text("x")
            shutil.copytree(base, "out/tree2")
            shutil.rmtree(base)
            return sorted(str(p.relative_to("out")) for p in pathlib.Path("out/tree2").rglob("*"))
        t("tree", tree)
        def zipped():
            with zipfile.ZipFile("out/z.zip", "w") as z:
                z.write("data/x.txt")
            return zipfile.ZipFile("out/z.zip").read("data/x.txt")
        t("zip", zipped)
        t("rmtree_ro", lambda: shutil.rmtree("data"))
        """,
        env={"TMPDIR": str(tmp)},
        python=python,
    )
    assert r["tempfile"] == ("ok", "True")
    assert r["tree"] == ("ok", "['tree2/a', 'tree2/a/b', 'tree2/a/b/f.txt']")
    assert r["zip"] == ("ok", "b'data'")
    assert r["rmtree_ro"][0] == "WriteDeniedError"
    assert (project / "data" / "x.txt").exists()


def test_bad_path_types_get_cpythons_errors(project: Path, python: str) -> None:
    """A path of a type CPython refuses gets CPython's own TypeError (the C function's
    words: ``stat: path should be string, bytes, os.PathLike or integer, not float``), a bad
    ``dir_fd`` CPython's TypeError or OverflowError, and before 3.12 a bytes-like path is
    taken with CPython's DeprecationWarning, attributed to the program's line (CPython's
    ``test_posix``: 1 failure and 3 errors under the guards; they said ``pysb: a path must be
    str or bytes``, or raised AttributeError for ``dir_fd='x'``)."""

    (project / "out" / "f").write_text("x")
    body = """
        import os, warnings
        warnings.simplefilter("error")
        t("float", lambda: os.stat(1.5))
        t("none", lambda: os.stat(None))
        t("list", lambda: os.stat(list("out")))
        t("rename", lambda: os.rename("out/f", 1.5))
        t("open", lambda: open(1.5))
        class NoPath:  # PEP 519: __fspath__ set to None means "not a path" (test_os)
            __fspath__ = None
        class Uncallable:
            __fspath__ = 1
        t("fspath_none_rename", lambda: os.rename(NoPath(), "out/g"))
        t("fspath_none_stat", lambda: os.stat(NoPath()))
        t("fspath_none_open", lambda: open(NoPath()))
        t("fspath_uncallable", lambda: os.stat(Uncallable()))
        t("fd_str", lambda: os.stat("out", dir_fd="x"))
        t("fd_float", lambda: os.stat("out", dir_fd=1.0))
        t("fd_big", lambda: os.stat("out", dir_fd=10**20))
        t("bytearray", lambda: os.listdir(bytearray(b"out")))
        t("memoryview", lambda: os.stat(memoryview(b"out")).st_size > 0)
        warnings.simplefilter("always")
        def warned():
            with warnings.catch_warnings(record=True) as seen:
                line = __sys._getframe().f_lineno + 1
                names = os.listdir(bytearray(b"out"))
            return names, [(str(w.message), w.lineno == line) for w in seen]
        t("warned", warned)
    """
    boxed = _run(project, body, python=python)
    expected = _plain(project, body, python)
    assert boxed == expected
    assert expected["float"][0] == "TypeError"


def test_error_names_the_path_object_given_and_no_reference_is_kept(
    project: Path, python: str
) -> None:
    """An OSError names the very path object the program gave: a ``bytearray`` or a
    ``memoryview`` (3.11 takes them; the face judges and calls with an immutable copy, then
    puts the original back in the error), a ``str`` or ``bytes`` subclass (an
    ``os.PathLike`` as CPython does: by what its ``__fspath__`` returned); and a judged path
    is not kept alive by the decision cache. CPython's ``test_os``: ``test_oserror_filename``
    and ``test_rename`` (which counts the references to its path around a call) failed
    under the guards."""

    body = """
        import os, pathlib, sys, warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        class Str(str):
            pass
        class Bytes(bytes):
            pass
        class P:
            def __fspath__(self):
                return Str("out/no")
        def same(name, fn):
            try:
                fn(name)
            except OSError as e:
                return e.filename is name, type(e).__name__
            return "no error"
        for label, name in (("bytes", b"out/no"), ("bytearray", bytearray(b"out/no")),
                            ("memoryview", memoryview(b"out/no")), ("str", "out/no"),
                            ("str_subclass", Str("out/no")), ("pathlike", pathlib.Path("out/no")),
                            ("fspath_subclass", P()),
                            ("bytes_subclass", Bytes(b"out/no"))):
            t("stat_" + label, lambda: same(name, os.stat))
            t("rmdir_" + label, lambda: same(name, os.rmdir))
            t("rename_" + label, lambda: same(name, lambda n: os.rename(n, "out/dst")))
            t("listdir_" + label, lambda: same(name, os.listdir))
        ro = bytearray(b"data/no")
        t("stat_read_only", lambda: same(ro, os.stat))
        def refs(path):
            before = sys.getrefcount(path)
            for _ in range(3):
                try:
                    os.rename(path, 0)
                except TypeError:
                    pass
                os.path.exists(path)
            return sys.getrefcount(path) - before
        t("refs_relative", lambda: refs("out/" + "f" * 3))
        t("refs_absolute", lambda: refs(os.path.abspath("out") + "/" + "g" * 3))
    """
    boxed = _run(project, body, python=python)
    expected = _plain(project, body, python)
    assert boxed == expected
    assert expected["refs_relative"] == ("ok", "0")
    assert expected["stat_str"] == ("ok", "(True, 'FileNotFoundError')")


def test_sqlite_deprecation_warnings_name_the_programs_line(project: Path, python: str) -> None:
    """CPython 3.13 warns of ``connect``'s positional arguments and of
    ``set_authorizer(authorizer_callback=...)`` from C code, whose caller under the guards
    is a door: the warnings named ``<pysb-door (importlib._bootstrap)>`` (CPython's
    test_sqlite3: test_connect_positional_arguments, test_authorizer_keyword_args). They
    name the program's line, as plain Python's do (none before 3.13); a factory's own
    ``Connection.__init__`` warns for the factory's line."""
    import subprocess

    code = textwrap.dedent(
        """
        import sqlite3, warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            sqlite3.connect(':memory:', 1.0).close()
            class Factory(sqlite3.Connection):
                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
            sqlite3.connect(':memory:', 1.0, factory=Factory).close()
            sqlite3.connect(':memory:', 1.0, 0, None, True, Factory).close()
            con = sqlite3.connect(':memory:')
            con.set_authorizer(authorizer_callback=None)
            con.set_authorizer(None)
            con.close()
        print('WARNINGS', [(x.filename, x.lineno, x.category.__name__, str(x.message)) for x in w])
        """
    )
    plain = subprocess.run(
        [python, "-c", code], cwd=project, capture_output=True, text=True, timeout=60
    )
    boxed = guarded.run(code, cwd=project, python=python, exposures=[guarded.expose(project)])
    expected = [line for line in plain.stdout.splitlines() if line.startswith("WARNINGS")]
    got = [line for line in boxed.stdout.splitlines() if line.startswith("WARNINGS")]
    assert len(expected) == len(got) == 1, boxed.stdout + boxed.stderr
    door = "<pysb-door (importlib._bootstrap)>"
    # through a factory, connect's C code warns a second time for the door (docstring of
    # guard._make_sqlite_prepare); every warning for the program's lines is plain's
    program_lines = [w for w in ast.literal_eval(got[0][len("WARNINGS ") :]) if w[0] != door]
    assert program_lines == ast.literal_eval(expected[0][len("WARNINGS ") :]), got


def test_a_bool_file_descriptor_is_cpythons_and_is_judged_as_its_int(
    project: Path, python: str
) -> None:
    """A bool stands for the descriptor 0 or 1 (``os.stat(False)``, ``dir_fd=True``,
    ``FileIO(True)``): the guards give what plain Python gives, 3.13's RuntimeWarning
    ('bool is used as a file descriptor') on the program's line included, and an OSError
    naming the bool (CPython 3.13's test_os, test_posix, test_posixpath, test_fileio: the
    guards dropped the warning, and FileIO(True) was refused). And a ``dir_fd=False`` is
    judged as the descriptor 0: with a directory outside the exposures put on fd 0, a name
    in it stays refused."""

    body = """
        import io, os, warnings
        warnings.simplefilter("always")
        def seen(fn):
            with warnings.catch_warnings(record=True) as w:
                line = __sys._getframe().f_lineno + 1
                try: r = type(fn()).__name__
                except OSError as e: r = (type(e).__name__, e.filename)
            return r, [(w_.category.__name__, str(w_.message), w_.lineno == line) for w_ in w]
        t("stat", lambda: seen(lambda: os.stat(False)))
        t("exists", lambda: seen(lambda: os.path.exists(False)))
        t("fileio", lambda: seen(lambda: io.FileIO(False, closefd=False)))
        t("dir_fd", lambda: seen(lambda: os.stat(".", dir_fd=False)))
        t("listdir", lambda: seen(lambda: os.listdir(True)))
    """
    boxed = _run(project, body, python=python)
    expected = _plain(project, body, python)
    assert boxed == expected
    # fd 0: the read-only project; the working directory: its read-write out/
    escape = """
        import os
        os.dup2(os.open(".", os.O_RDONLY | os.O_DIRECTORY), 0)
        os.chdir("out")
        t("bool", lambda: os.mkdir("made-by-bool", dir_fd=False))
        t("int", lambda: os.mkdir("made-by-int", dir_fd=0))
        t("cwd", lambda: os.mkdir("made-here"))
    """
    out = _run(project, escape, python=python)
    assert out["bool"][0] == out["int"][0] != "ok", out
    assert out["cwd"][0] == "ok", out
    assert not (project / "made-by-bool").exists()
    assert not (project / "out" / "made-by-bool").exists()
