"""The file guard: only exposed paths exist, only read-write exposures take writes.

Two enforcement points share one decision (:func:`_f_check`):

- the **audit hook** judges every event CPython raises for a path: ``open`` (``open()``,
  ``io.open``, ``_io.FileIO``, ``io.open_code``, ``os.open``), ``os.listdir``,
  ``os.scandir``, ``os.mkdir``, ``os.remove``, ``os.rename``, ``os.rmdir``, ``os.symlink``,
  ``os.link``, ``os.chmod``, ``os.chown``, ``os.utime``, ``os.truncate``, ``os.chdir``,
  the ``os.*xattr`` family and ``sqlite3.connect``. It cannot be removed from Python, so a
  C type reached some other way (``type(f.raw)('/etc/shadow')``) meets the policy too.
- **faces** on the path functions of ``os`` and ``posix`` (both spellings) cover what raises
  no event (``stat``, ``lstat``, ``access`` answering False, ``readlink``, ``mkfifo``,
  ``mknod``, ``statvfs``, ``pathconf``, ``chroot``, ``getcwd``), resolve ``dir_fd`` forms
  through ``/proc/self/fd``, translate ``SRC:DEST`` renames, and filter ``listdir`` /
  ``scandir`` so that ignored names do not show. ``pathlib``, ``shutil``, ``glob``,
  ``tempfile`` and ``os.path`` all end in these functions.

Decisions use the canonical path: every symlink is resolved (with the original ``lstat`` and
``readlink``), except the last component for operations on a link itself (``lstat``,
``unlink``, ``rename``, ``symlink``), which are judged on the link's directory. A symlink
cannot be created pointing outside the exposures, a hard link needs a writable source.
Profile files are never writable. Integer file descriptors pass (a held fd is a capability).

Resolved decisions are cached per absolute path; the cache is dropped whenever the program
renames, removes or links something, and ``os.chdir`` refreshes the working directory. A
path whose resolution followed a link below ``/proc`` (``/proc/self/fd/N/..``, ``/dev/fd/N``,
a symlink to either) is never cached: ``dup2`` re-points it without a call the guard sees.

Why one module: it is the file guard's install: the audit hook, the faces on ``os``/``posix``
and the patches all take their decision from one sealed engine made here
(:func:`_sealed_engine`), so their wiring must be written together; the decisions themselves are
in :mod:`.engine`, the family's ``hooks/guard/engine`` shape.
"""

from __future__ import annotations

# What the install uses is imported with this module, before any guard: once the import
# guard is installed (by the first family's install), an import run by an install goes
# through its faces and judge (docs/performance.md, "Start-up"). The import guard's own
# module is the exception: the program reaches this namespace (ScandirResult's methods),
# and must not reach that one.
import _io
import _thread
import _warnings
import builtins
import errno
import io
import os
import posix
import sys

from pysb_core.guardkit import FileDeniedError, WriteDeniedError, hookimpl
from pysb_guards import _seal
from pysb_guards._patch import defer_sweep, set_attr
from pysb_guards.files import engine

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from pysb_core.guardkit import Policy, Recorder

GUARD = "files"

#: Device files any program may use (reading nothing secret, writing nowhere).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

_installed: list[bool] = []


# ---------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------


@hookimpl
def pysb_child_install(policy: Policy, recorder: Recorder) -> str:
    """Install the file guard in this interpreter; returns the family put in force."""
    install(policy, recorder)
    return GUARD


def _param(pos, kw, dir_fd=None, write=False, follow=True, kind="read", default=None):
    return (pos, kw, dir_fd, write, follow, kind, default)


#: name -> (paths, options). ``write`` True/False or "flags" (os.open); ``follow`` True,
#: False, or the name of a follow_symlinks keyword.
FACES: dict[str, Any] = {
    "stat": ((_param(0, "path", "dir_fd", False, "follow_symlinks", "stat"),), {}),
    "lstat": ((_param(0, "path", "dir_fd", False, False, "stat"),), {}),
    "access": ((_param(0, "path", "dir_fd", False, "follow_symlinks", "stat"),), {"access": True}),
    "readlink": ((_param(0, "path", "dir_fd", False, False, "stat"),), {"post": "readlink"}),
    "listdir": ((_param(0, "path", None, False, True, "list", "."),), {"post": "listdir"}),
    "scandir": ((_param(0, "path", None, False, True, "list", "."),), {"post": "scandir"}),
    "mkdir": ((_param(0, "path", "dir_fd", True, False, "mkdir"),), {}),
    "makedirs": None,  # Python code over mkdir
    "rmdir": ((_param(0, "path", "dir_fd", True, False, "delete"),), {"mutates": True}),
    "remove": ((_param(0, "path", "dir_fd", True, False, "delete"),), {"mutates": True}),
    "unlink": ((_param(0, "path", "dir_fd", True, False, "delete"),), {"mutates": True}),
    "rename": (
        (
            _param(0, "src", "src_dir_fd", True, False, "write"),
            _param(1, "dst", "dst_dir_fd", True, False, "write"),
        ),
        {"mutates": True},
    ),
    "replace": (
        (
            _param(0, "src", "src_dir_fd", True, False, "write"),
            _param(1, "dst", "dst_dir_fd", True, False, "write"),
        ),
        {"mutates": True},
    ),
    "link": (
        (
            _param(0, "src", "src_dir_fd", True, "follow_symlinks", "write"),
            _param(1, "dst", "dst_dir_fd", True, False, "write"),
        ),
        {"mutates": True},
    ),
    "symlink": (
        (_param(1, "dst", "dir_fd", True, False, "write"),),
        {"mutates": True, "symlink": True},
    ),
    "chmod": ((_param(0, "path", "dir_fd", True, "follow_symlinks", "write"),), {}),
    "lchmod": ((_param(0, "path", None, True, False, "write"),), {}),
    "chown": ((_param(0, "path", "dir_fd", True, "follow_symlinks", "write"),), {}),
    "lchown": ((_param(0, "path", None, True, False, "write"),), {}),
    "utime": ((_param(0, "path", "dir_fd", True, "follow_symlinks", "write"),), {}),
    "truncate": ((_param(0, "path", None, True, True, "write"),), {}),
    "mkfifo": ((_param(0, "path", "dir_fd", True, False, "write"),), {}),
    "mknod": ((_param(0, "path", "dir_fd", True, False, "write"),), {}),
    "open": ((_param(0, "path", "dir_fd", "flags", True, "read"),), {}),
    "chdir": ((_param(0, "path", None, False, True, "chdir"),), {"chdir": True, "post": "chdir"}),
    "fchdir": ((), {"chdir": True, "post": "chdir"}),
    "chroot": ((_param(0, "path", None, True, True, "write"),), {}),
    "statvfs": ((_param(0, "path", None, False, True, "stat"),), {}),
    "pathconf": ((_param(0, "path", None, False, True, "stat"),), {}),
    "getxattr": ((_param(0, "path", None, False, "follow_symlinks", "read"),), {}),
    "listxattr": ((_param(0, "path", None, False, "follow_symlinks", "read", "."),), {}),
    "setxattr": ((_param(0, "path", None, True, "follow_symlinks", "write"),), {}),
    "removexattr": ((_param(0, "path", None, True, "follow_symlinks", "write"),), {}),
    "getcwd": ((), {"post": "getcwd"}),
    "getcwdb": ((), {"post": "getcwd"}),
}
del FACES["makedirs"]

#: audit event -> (positions of (path, dir_fd) pairs, write, follow, kind)
EVENTS: dict[str, tuple[tuple[tuple[int, int | None], ...], bool, bool | None, str]] = {
    "os.listdir": (((0, None),), False, True, "list"),
    "os.scandir": (((0, None),), False, True, "list"),
    "os.mkdir": (((0, 2),), True, False, "mkdir"),
    "os.rmdir": (((0, 1),), True, False, "write"),
    "os.remove": (((0, 1),), True, False, "write"),
    "os.rename": (((0, 2), (1, 3)), True, False, "write"),
    "os.link": (((0, 2), (1, 3)), True, None, "write"),
    "os.symlink": (((1, 2),), True, False, "write"),
    "os.chmod": (((0, 2),), True, None, "write"),
    "os.chown": (((0, 3),), True, None, "write"),
    "os.utime": (((0, 3),), True, None, "write"),
    "os.truncate": (((0, None),), True, True, "write"),
    "os.chdir": (((0, None),), False, True, "chdir"),
    "os.getxattr": (((0, None),), False, None, "read"),
    "os.listxattr": (((0, None),), False, None, "read"),
    "os.setxattr": (((0, None),), True, None, "write"),
    "os.removexattr": (((0, None),), True, None, "write"),
}


#: Audit events of an exec (their first argument names the program): a learning run
#: records them, so that the profile exposes what starting that program needs.
EXEC_EVENTS = ("os.exec", "os.posix_spawn", "subprocess.Popen")

#: (module, attribute path, params): C code that opens a path without an audit event.
#: Methods are patched on their Python class, so ``self`` is argument 0.
C_PATH_FUNCTIONS: tuple[tuple[str, str, tuple], ...] = (
    ("_gdbm", "open", (_param(0, "filename", None, "dbmflag", True, "write"),)),
    ("_dbm", "open", (_param(0, "filename", None, "dbmflag", True, "write"),)),
    ("readline", "read_history_file", (_param(0, "filename", None, False, True, "read"),)),
    ("readline", "read_init_file", (_param(0, "filename", None, False, True, "read"),)),
    ("readline", "write_history_file", (_param(0, "filename", None, True, True, "write"),)),
    ("readline", "append_history_file", (_param(1, "filename", None, True, True, "write"),)),
    (
        "ssl",
        "SSLContext.load_verify_locations",
        (
            _param(1, "cafile", None, False, True, "read"),
            _param(2, "capath", None, False, True, "list"),
        ),
    ),
    (
        "ssl",
        "SSLContext.load_cert_chain",
        (
            _param(1, "certfile", None, False, True, "read"),
            _param(2, "keyfile", None, False, True, "read"),
        ),
    ),
    ("ssl", "SSLContext.load_dh_params", (_param(1, "path", None, False, True, "read"),)),
    # A PEM certificate decoded from a file C opens itself (ssl._ssl._test_decode_cert).
    ("_ssl", "_test_decode_cert", (_param(0, "path", None, False, True, "read"),)),
)

#: (module, function, file, write): C functions that open one file of their own choosing.
C_FIXED_FILE_FUNCTIONS: tuple[tuple[str, str, str, bool], ...] = (
    ("spwd", "getspall", "/etc/shadow", False),
    ("spwd", "getspnam", "/etc/shadow", False),
)

#: POSIX shared memory (``multiprocessing.shared_memory``): objects are ``/dev/shm/NAME``.
SHM_FUNCTIONS = ("shm_open", "shm_unlink")


# ---------------------------------------------------------------------------------------
# Install
# ---------------------------------------------------------------------------------------


def install(policy: Policy, recorder: Recorder) -> None:
    """Install the file guard, once per interpreter: the sealed engine, faces on the path
    functions of ``os`` / ``posix`` (and ``open`` for renames), patches of modules as they
    load, the audit hook's handlers."""
    if _installed:
        return
    _installed.append(True)
    from pysb_guards.imports import guard as imports

    imports.ensure_installed(policy, recorder)
    tables = _policy_tables(policy)
    add_handler, _close = _seal.audit_registry()
    ns = _sealed_engine(policy, recorder, tables)
    ns["ST"]["cwd"] = ns["_f_cwd"]()
    _install_sqlite_hook(ns, policy, recorder)
    _install_faces(ns, tables)
    _install_patches(ns, imports)
    handlers = ns["_f_make_handlers"](EVENTS)
    for event, handler in handlers.items():
        add_handler(event, handler)
    if recorder.learning:
        for event in EXEC_EVENTS:
            add_handler(event, ns["_f_make_exec_learner"](event))


def _install_sqlite_hook(ns: dict[str, Any], policy: Policy, recorder: Recorder) -> None:
    """SQLite's auto-extension hook sets the guard's authorizer on every connection, made
    however it is (:mod:`.sqlite_c`); without it only ``sqlite3.connect`` arms one, and
    connections made otherwise are refused. Made when the program may import ``sqlite3``:
    the policy lets it, or a learning run, whose import guard records and refuses nothing
    (without the type tools ``_sqlite3`` would be refused there).

    :mod:`.sqlite_c` is imported only then (most profiles do not allow ``sqlite3``), and
    before the faces are installed, so that its bytecode can be cached as the guards'."""
    if not (recorder.learning or _sqlite_wanted(policy.imports)):
        return
    from pysb_guards.files import sqlite_c

    ns["ST"]["type_tools"] = sqlite_c.type_tools()
    c = sqlite_c.prepare()
    if c is not None:
        ns["ST"]["sqlite_c"] = c["make"](ns["_f_sqlite_c_entry"], ns["_f_sqlite_c_authorizer"])


def _sqlite_wanted(imports: tuple[str, ...] | None) -> bool:
    """Whether the policy lets the program import ``sqlite3``."""
    names = set(imports or ())
    return "*" in names or bool(names & {"sqlite3", "_sqlite3"})


#: ``sqlite3.connect``'s parameters after ``database``, in order (3.11 to 3.13).
_CONNECT_PARAMS = (
    "timeout",
    "detect_types",
    "isolation_level",
    "check_same_thread",
    "factory",
    "cached_statements",
    "uri",
)

#: CPython 3.13's warnings for more than one positional argument, of ``sqlite3.connect``
#: and of the ``Connection()`` it calls.
_CONNECT_POSITIONAL = (
    "Passing more than 1 positional argument to {}() is deprecated. Parameters 'timeout', "
    "'detect_types', 'isolation_level', 'check_same_thread', 'factory', 'cached_statements' "
    "and 'uri' will become keyword-only parameters in Python 3.15."
)


def _make_sqlite_prepare() -> Callable[[tuple, dict], tuple[tuple, dict]]:
    """``sqlite3.connect``'s prepare: the database made an exact str/bytes, except for a
    ``factory`` of the program's, which gets it as given (what reaches
    ``Connection.__init__`` is judged by the audit hook, exact str/bytes only).

    From 3.13 CPython warns of positional arguments after the database, from the C
    function, whose caller is then the door: the prepare warns instead, for the
    program's line (``stacklevel`` 2 passes over the face's frame), as ``connect`` and
    the default ``Connection()`` would, and passes them on by name. A ``factory`` (given
    by position or by name) gets them all as given (its ``Connection.__init__`` warns for its own
    line, as in CPython); ``connect``'s C code then warns a second time, for the door's
    frame (seen only by filters that show every warning)."""
    inner = _make_prepare(((0, "database"),))
    warn = _warnings.warn  # warnings.warn itself, without importing warnings.py
    deprecated = sys.version_info >= (3, 13)
    len_, type_, list_, dict_, str_, zip_ = len, type, list, dict, str, zip

    def by_name(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        keys = list_(kwargs)
        for k in keys:
            if type_(k) is not str_ or (k in _CONNECT_PARAMS and k != "factory"):
                return args, kwargs  # CPython's TypeError (given twice), as it raises it
        warn(_CONNECT_POSITIONAL.format("sqlite3.connect"), DeprecationWarning, stacklevel=3)
        if len_(args) > 5 or "factory" in keys:
            return args, kwargs  # the factory gets them as given (see above)
        warn(_CONNECT_POSITIONAL.format("_sqlite3.Connection"), DeprecationWarning, 3)
        named = dict_(zip_(_CONNECT_PARAMS, args[1:]))
        named.update(kwargs)
        return (args[0],), named

    def prepare(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if deprecated and 1 < len_(args) <= 8:
            args, kwargs = by_name(args, kwargs)
        if len_(args) > 5 or "factory" in kwargs:
            return args, kwargs
        return inner(args, kwargs)

    prepare.skips_lone_str = True  # type: ignore[attr-defined]  # a lone str: no factory
    return prepare


#: CPython 3.13's warning for ``set_authorizer(authorizer_callback=...)``.
_AUTHORIZER_KEYWORD = (
    "Passing keyword argument 'authorizer_callback' to _sqlite3.Connection.set_authorizer() "
    "is deprecated. Parameter 'authorizer_callback' will become positional-only in Python 3.15."
)


def _make_set_authorizer_prepare() -> Callable[[tuple, dict], tuple[tuple, dict]]:
    """``Connection.set_authorizer``'s prepare: from 3.13 CPython warns of the keyword
    ``authorizer_callback``, from the C method, whose caller is then the door and the
    warning's line a door's. The face's prepare warns instead, for the program's line
    (``stacklevel`` 2: the face's frame is one ``warnings`` passes over), and passes the
    callable on positionally. Plain code: the program's warning filters run here."""
    warn = _warnings.warn  # warnings.warn itself, without importing warnings.py
    deprecated = sys.version_info >= (3, 13)
    len_, type_, list_, items, str_ = len, type, list, dict.items, str

    def prepare(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if not deprecated or len_(args) != 1 or len_(kwargs) != 1:
            return args, kwargs
        ((key, value),) = list_(items(kwargs))
        if type_(key) is not str_ or key != "authorizer_callback":
            return args, kwargs
        warn(_AUTHORIZER_KEYWORD, DeprecationWarning, stacklevel=2)
        return (args[0], value), {}

    return prepare


def _policy_tables(policy: Policy) -> dict[str, Any]:
    """The policy as the engine reads it: exposures by path, renames (longest target
    first), compiled ignore rules, profile files and the state directories (with the
    directories above them)."""
    exposures = list(policy.exposures)
    if not any(e.implicit for e in exposures):
        from pysb_core.guardkit import implicit_exposures

        exposures = [*implicit_exposures(sys.executable), *exposures]

    by_path: dict[str, tuple] = {}
    for e in exposures:
        entry = (e.path.rstrip("/") or "/", e.target, e.writable, e.source, e.implicit)
        old = by_path.get(entry[0])
        if old is None or (entry[2] and not old[2]) or (old[4] and not entry[4]):
            by_path[entry[0]] = entry
    renames = tuple(
        sorted(
            (
                (e.target.rstrip("/") or "/", e.path.rstrip("/") or "/")
                for e in exposures
                if e.renamed
            ),
            key=lambda tp: -len(tp[0]),
        )
    )
    ignore = []
    if policy.ignore:  # re costs the sandbox ~2 ms: only for ignore rules
        import fnmatch
        import re
    for rule in policy.ignore:
        pat = rule.pattern.rstrip("/")
        if pat.startswith("/"):
            kind, rx = "abs", re.compile(fnmatch.translate(pat))
        elif "/" in pat:
            kind, rx = "slash", re.compile(fnmatch.translate("*/" + pat.lstrip("./")))
        else:
            kind, rx = "name", re.compile(fnmatch.translate(pat))
        ignore.append((kind, rx.match, rule.pattern, rule.source))

    profile_files = frozenset(os.path.realpath(p) for p in policy.profile_files)
    state_dirs = tuple(os.path.realpath(d) for d in policy.state_dirs)
    # The directories above them too: renaming ~/.cache away and making a new one would
    # replace the caches as surely as writing them.
    state_above = {os.path.dirname(d) for d in state_dirs}
    for d in list(state_above):
        while d not in ("/", ""):
            d = os.path.dirname(d)
            state_above.add(d)
    state_above.discard("/")
    return {
        "by_path": by_path,
        "renames": renames,
        "ignore": ignore,
        "profile_files": profile_files,
        "state_dirs": state_dirs,
        "state_above": state_above,
    }


def _sealed_engine(policy: Policy, recorder: Recorder, tables: dict[str, Any]) -> dict[str, Any]:
    """The ``_f_*`` functions of :mod:`pysb_guards.files.engine` re-created in one private
    namespace, with the guard's state (``ST``) and every C function and type they use,
    bound now (``_seal.seal_group``)."""
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    write_flags |= getattr(os, "O_TMPFILE", 0) & ~os.O_DIRECTORY

    b = _seal.builders()
    scandir_iterator = type(posix.scandir(os.path.dirname(os.__file__)))
    ns = _seal.seal_group(
        [fn for name, fn in vars(engine).items() if name.startswith("_f_") and callable(fn)],
        ST={
            "by_path": tables["by_path"],
            "renames": tables["renames"],
            "ignore": tuple(tables["ignore"]),
            "profile": tables["profile_files"],
            "state": frozenset(tables["state_dirs"]) | tables["state_above"],
            "state_below": tuple(d.rstrip("/") + "/" for d in tables["state_dirs"]),
            "devices": frozenset(DEVICES),
            "cwd": None,
            "cwd_hint": policy.cwd,
            "cache": {},
            "denied": set(),
            "learning": bool(recorder.learning),
            "open_doors": set(),
            "chdir_doors": set(),  # code ids of the doors of os.chdir / os.fchdir
            "cwd_gen": 0,  # chdirs ended (see _f_real_cwd)
            "rebased": {},  # thread -> [(absolute, as given)] of its last rebased call
            # thread -> [(exact bytes, bytes-like path given)] of its last call with one
            # (3.11): the copy is judged and passed on, the error names what was given
            "buffers": {},
            "held": {},  # thread -> whether each open _f_lock took the lock
            "prepare_database": _make_sqlite_prepare(),
            "prepare_set_authorizer": _make_set_authorizer_prepare(),
            "set_authorizer": None,  # sqlite3.Connection's, taken when _sqlite3 loads
            "sqlite_doors": set(),  # code ids of the doors of sqlite3.connect's faces
            "sqlite_base": None,  # sqlite3.Connection itself
            "sqlite_c": None,  # SQLite's own hook (sqlite_c.py), when it could be set
            "sqlite_pending": {},  # thread -> False after its connect event, True once armed
            "sqlite_kept": [],  # the set_authorizer methods of the types given a door
            "sqlite_guard_only": None,  # the authorizer face of set_authorizer(None)
            "type_tools": None,  # a type's own dictionary, PyType_Modified (sqlite_c)
        },
        RECORDER=_seal.private_recorder(recorder),
        FDENIED=FileDeniedError,
        WDENIED=WriteDeniedError,
        FILE_ERROR=_file_error,
        PATH_TYPE_ERROR=_path_type_error,
        REFUSAL=_seal.Refusal,
        LSTAT=posix.lstat,
        STAT=posix.stat,
        READLINK=posix.readlink,
        GETCWD=posix.getcwd,
        FSENC=sys.getfilesystemencoding(),
        ENOENT=errno.ENOENT,
        EACCES=errno.EACCES,
        EEXIST=errno.EEXIST,
        WRITE_FLAGS=write_flags,
        GETFRAME=sys._getframe,
        **{k: b[k] for k in ("MAKE_DOOR", "MAKE_FACE", "GUARD", "IS_FACE", "ALLOW", "DEFER")},
        **{k: b[k] for k in ("REFUSE", "NEW_VALUE", "EXC_OF", "IS_DOOR_FRAME", "FRAME_CODE")},
        DOOR_CODE_ID=b["DOOR_CODE_ID"],
        **{k: b[k] for k in ("RESOLVE", "PLACE")},
        # ScandirResult made and the scandir iterator read by C calls only.
        NEW=object.__new__,
        SCANDIR_RESULT=ScandirResult,
        SET_ENTRIES=ScandirResult.__dict__["_entries"].__set__,
        SCANDIR_ITERATOR=scandir_iterator,
        SCANDIR_NEXT=scandir_iterator.__dict__["__next__"],
        SCANDIR_CLOSE=scandir_iterator.__dict__["close"],
        DIRENTRY_NAME=posix.DirEntry.__dict__["name"].__get__,
        _ALLOWED=object(),
        TYPE_DICT=type.__dict__["__dict__"].__get__,
        TYPE_MRO=type.__dict__["__mro__"].__get__,
        THREAD_COUNT=_thread._count,  # threads started through _thread (threading's too)
        METHOD_DESCRIPTOR=type(str.__dict__["join"]),
        SHM_WRITE_FLAGS=os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC,
        GET_IDENT=_thread.get_ident,
        CWD_LOCK=_thread.RLock(),
        OSERROR=OSError,
        FILENAME=OSError.__dict__["filename"],
        FILENAME2=OSError.__dict__["filename2"],
        OPEN_TYPES=_open_types(),
        OBJECT_SETATTR=object.__setattr__,
    )
    return ns


def _open_types() -> tuple[Any, ...]:
    """What ``open()`` returns, and the C readers from a text file to its buffer and from a
    buffer to its raw ``FileIO`` (see ``_f_post_open``)."""
    buffered = (_io.BufferedReader, _io.BufferedWriter, _io.BufferedRandom)
    raw_of = {kind: kind.__dict__["raw"].__get__ for kind in buffered}
    buffer_of = _io.TextIOWrapper.__dict__["buffer"].__get__
    return (_io.TextIOWrapper, buffered, _io.FileIO, buffer_of, raw_of)


def _install_faces(ns: dict[str, Any], tables: dict[str, Any]) -> None:
    """Faces on the path functions of ``os`` and ``posix``, and on ``open`` when a rename
    needs translating; references captured before are swept."""
    ignore = tables["ignore"]
    # Faces on os and posix (the same C functions under two names).
    faces: dict[Any, Any] = {}  # original -> face (for the sweep of captured references)
    for name, spec in FACES.items():
        original = getattr(posix, name, None) or getattr(os, name, None)
        if original is None:
            continue
        params, options = spec
        if options.get("post") == "listdir" and not ignore:
            options = {**options, "post": None}
        prepare = _make_prepare(params, original, ns["ST"]["buffers"])
        face = ns["_f_make_face"](original, params, options, prepare, name)
        faces[original] = face
        for module in (os, posix):
            if getattr(module, name, None) is original:
                set_attr(module, name, face)

    # open() and friends: a face translates SRC:DEST renames and rebases a relative path
    # while other threads run (_f_rebase); the audit hook judges every open.
    opener = ns["_f_make_face"](
        io.open,
        (_param(0, "file", None, "mode", True, "read"),),
        {"io": True},
        _make_prepare(((0, "file"),), io.open),
        "open",
    )
    faces[io.open] = opener
    for module in (builtins, io, _io):
        if getattr(module, "open", None) is io.open:
            set_attr(module, "open", opener)
    defer_sweep(faces)


def _install_patches(ns: dict[str, Any], imports: Any) -> None:
    """Patches run as modules load (maybe after the program started: sealed, C calls only)."""
    # sqlite3
    imports.on_import("sqlite3", ns["_f_patch_sqlite"])
    imports.on_import("_sqlite3", ns["_f_patch_sqlite"])

    # C functions that open a path themselves (no audit event): judged like open(). Their
    # prepare functions are made now: a patch runs no code of this module later.
    for module_name, attr, params in C_PATH_FUNCTIONS:
        patcher = ns["_f_make_path_patcher"](attr, params, _make_prepare(params))
        imports.on_import(module_name, patcher)

    for module_name, attr, path, write in C_FIXED_FILE_FUNCTIONS:
        imports.on_import(module_name, ns["_f_make_fixed_patcher"](attr, path, write))
    for attr in SHM_FUNCTIONS:
        patcher = ns["_f_make_shm_patcher"](attr, _make_prepare(((0, "path"),)))
        imports.on_import("_posixshmem", patcher)
    semaphore = ns["_f_make_shm_patcher"](
        "sem_unlink", _make_prepare(((0, "name"),)), "/dev/shm/sem."
    )
    imports.on_import("_multiprocessing", semaphore)


def _file_error(cls: type, message: str, canon: str, rule: str, err: int) -> BaseException:
    """A FileDeniedError / WriteDeniedError (built by faces, outside sealed code)."""
    exc = cls(message, target=canon, suggested_rule=rule)
    exc.errno = err
    exc.strerror = message
    exc.filename = canon
    return exc


def _path_type_error(path: Any) -> TypeError:
    """The TypeError refusing a path that is neither str nor bytes (its type's name is
    read here, outside sealed code: a metaclass may compute it)."""
    return TypeError(f"pysb: a path must be str or bytes, not {type(path).__name__}")


def _make_prepare(
    params: tuple,
    original: Callable[..., Any] | None = None,
    copies: dict[int, list[tuple[bytes, Any]]] | None = None,
) -> Callable[[tuple, dict], tuple[tuple, dict]]:
    """Normalise path-like arguments to exact str/bytes, flags to exact ints and bools,
    *before* the judge: judges never run the program's code.

    A path of a type CPython refuses gets CPython's own TypeError, worded by the C
    ``original`` itself: it is called with a stand-in of the same type name that no
    converter accepts (no ``__fspath__``, buffer or ``__index__``), so it fails in its
    argument parsing, before any system call. Before 3.12 CPython takes a bytes-like path
    (``bytearray``, ``memoryview``) with a DeprecationWarning: so does the face, warning
    with that same text and passing the path on as exact bytes: an immutable copy, judged and
    handed to the C function (a ``bytearray`` could change between the two). With
    ``copies`` (the file guard's ``ST["buffers"]``), the pairs (exact str/bytes, object
    given) of a call that converted a path (a bytes-like path, a ``str`` or ``bytes``
    subclass) are kept there under the thread's id, so that the door's ``fix``
    (``engine._f_fix_error``) makes an OSError name the object the program gave, as
    CPython's does (``test_os``'s ``test_oserror_filename``).

    No global name is looked up when it runs (everything is bound here, at install): a face
    may be called from sealed code (another guard's judge), and a global -- this module's,
    or a builtin -- could be the program's by then.
    """
    fspath = os.fspath
    slots = [(p[0], p[1]) for p in params]
    str_, bytes_, int_, bool_, tuple_, list_ = str, bytes, int, bool, tuple, list
    type_, len_, isinstance_ = type, len, isinstance
    type_error = TypeError
    memoryview_, hasattr_, warn = memoryview, hasattr, _warnings.warn
    dict_, float_, deprecation, overflow = dict, float, DeprecationWarning, OverflowError
    name_of = type.__dict__["__name__"].__get__
    mro_of = type.__dict__["__mro__"].__get__
    dict_of = type.__dict__["__dict__"].__get__
    c_original = original if type(original) is type(len) else None
    buffers = sys.version_info < (3, 12)  # bytes-like paths: deprecated, still taken
    # 3.13 warns when a bool stands for a file descriptor (os.stat(False), dir_fd=True);
    # the face warns as CPython would, on the program's line, and judges and passes the int
    bool_fd_warns = sys.version_info >= (3, 13)
    runtime_warning = RuntimeWarning

    def bool_fd(value: bool, level: int) -> int:
        if bool_fd_warns:
            warn("bool is used as a file descriptor", runtime_warning, level)
        return 1 if value else 0

    get_ident = _thread.get_ident

    # 3.13's path converter and os.fspath take an ``__fspath__`` set to None for none at
    # all (PEP 519: "not a path"); before, they call it (TypeError: 'NoneType' object...)
    none_is_no_fspath = sys.version_info >= (3, 13)

    def has_fspath(kind: type) -> bool:
        """Whether CPython's path converter would call ``kind``'s ``__fspath__`` (looked up
        on the class, along its MRO, as the interpreter looks up a special method)."""
        for base in mro_of(kind):
            namespace = dict_of(base)
            if "__fspath__" in namespace:
                return not (none_is_no_fspath and namespace["__fspath__"] is None)
        return False

    def cpython_error(value: Any, pos: int, kw: str, args: list, kwargs: dict) -> Any:
        """CPython's own TypeError for ``value`` at ``pos``/``kw`` (None: no C original)."""
        if c_original is None:
            return None
        stand_in = type_(name_of(type_(value)), (), {"__slots__": ()})()
        probe, probe_kwargs = list_(args), dict_(kwargs)
        if pos < len_(probe):
            probe[pos] = stand_in
        else:
            probe_kwargs[kw] = stand_in
        try:
            c_original(*probe, **probe_kwargs)
        except type_error as exc:
            return exc
        return None  # never reached: no converter takes the stand-in

    def norm(value: Any, pos: int, kw: str, args: list, kwargs: dict, found: list) -> Any:
        """``value`` as exact str/bytes/int (or as it is, for the judge to refuse); ``found``
        gets (exact, value) for a ``str``/``bytes`` subclass or a bytes-like object, which
        CPython's OSError names itself (not the str an ``__fspath__`` returned a subclass
        of: that one, as CPython does)."""
        kind = type_(value)
        if kind is str_ or kind is bytes_ or kind is int_ or value is None:
            return value
        if kind is bool_:  # a descriptor (bool has no subclasses); an OSError names the bool
            fd = bool_fd(value, 4)  # bool_fd, norm, prepare, the face: the program's line
            found.append((fd, value))
            return fd
        if isinstance_(value, (str_, bytes_)):
            new = str_.__str__(value) if isinstance_(value, str_) else bytes_(value)
            found.append((new, value))
            return new
        if isinstance_(value, int_):
            return int_(value)
        if buffers and c_original is not None:
            try:
                data = bytes_(memoryview_(value))
            except type_error:
                data = None
            if data is not None:
                error = cpython_error(value, pos, kw, args, kwargs)
                if error is not None:
                    # the program's line: norm, prepare, then the face (which warnings skips)
                    warn(str_(error), deprecation, 3)
                    found.append((data, value))
                    return data
        if not has_fspath(kind):
            error = cpython_error(value, pos, kw, args, kwargs)
            if error is not None:
                raise error
            return value  # refused by the judge (pysb's TypeError)
        return norm(fspath(value), pos, kw, args, kwargs, found)  # its errors are CPython's

    def prepare(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if not kwargs and len_(args) == 1 and type_(args[0]) is str_:
            return args, kwargs  # the common case, as fast as possible
        if slots:
            values = list_(args)
            found: list = []
            for pos, kw in slots:
                if pos < len_(values):
                    values[pos] = norm(values[pos], pos, kw, values, kwargs, found)
                elif kw in kwargs:
                    kwargs = {**kwargs, kw: norm(kwargs[kw], pos, kw, values, kwargs, found)}
            args = tuple_(values)
            if found and copies is not None:
                copies[get_ident()] = found
        for key in ("dir_fd", "src_dir_fd", "dst_dir_fd"):
            if key in kwargs and type_(kwargs[key]) is int_:
                fd = kwargs[key]
                if fd > 2147483647 or fd < -2147483648:  # a C int (CPython's words)
                    raise overflow(
                        "fd is greater than maximum" if fd > 0 else "fd is less than minimum"
                    )
            elif key in kwargs and type_(kwargs[key]) is bool_:
                kwargs = {**kwargs, key: bool_fd(kwargs[key], 3)}
            elif key in kwargs and kwargs[key] is not None:
                fd = kwargs[key]
                if isinstance_(fd, float_) or not hasattr_(type_(fd), "__index__"):
                    # CPython's words (3.11 to 3.13)
                    raise type_error(
                        f"argument should be integer or None, not {name_of(type_(fd))}"
                    )
                kwargs = {**kwargs, key: int_(fd.__index__())}
        if "follow_symlinks" in kwargs and type_(kwargs["follow_symlinks"]) is not bool_:
            kwargs = {**kwargs, "follow_symlinks": bool_(kwargs["follow_symlinks"])}
        if len_(args) > 1 and type_(args[1]) is not int_ and isinstance_(args[1], int_):
            args = (args[0], int_(args[1]), *args[2:])
        return args, kwargs

    prepare.skips_lone_str = True  # type: ignore[attr-defined]  # a lone str is normalised
    return prepare


class ScandirResult:
    """What the guarded ``os.scandir`` returns: the visible entries, usable like the
    original iterator (iteration, ``with``, ``close()``)."""

    __slots__ = ("_entries",)

    def __init__(self, entries: list[Any]) -> None:
        self._entries = iter(entries)

    def __iter__(self) -> ScandirResult:
        return self

    def __next__(self) -> Any:
        return next(self._entries)

    def __enter__(self) -> ScandirResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._entries = iter(())
