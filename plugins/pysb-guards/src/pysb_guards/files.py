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
renames, removes or links something, and ``os.chdir`` refreshes the working directory.
"""

from __future__ import annotations

import sys

from pysb_guards import _seal

try:
    from pysb_core.markers import hookimpl
except ImportError:  # pragma: no cover - an older pysb_core
    import pluggy

    hookimpl = pluggy.HookimplMarker("pysb")

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from pysb_core.check import CheckReport
    from pysb_core.events import Event, Recorder
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Policy
    from pysb_core.provider import Provider

GUARD = "files"

#: Device files any program may use (reading nothing secret, writing nowhere).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

_installed: list[bool] = []


# ---------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------


@hookimpl
def pysb_contribute(policy: Policy, plan: LaunchPlan) -> None:
    """Hand the child the implicit exposures the pipeline computed (no recomputation)."""
    payload = getattr(plan, "payload", None)
    if not isinstance(payload, dict) or not isinstance(payload.get("policy"), dict):
        return
    try:
        from pysb_core.records import asdict
    except ImportError:  # pragma: no cover - pysb_core with dataclass records
        from dataclasses import asdict

    known = {(e["path"], e["target"]) for e in payload["policy"].get("exposures", ())}
    extra = [asdict(e) for e in plan.exposures if e.implicit and (e.path, e.target) not in known]
    if extra:
        payload["policy"]["exposures"] = [*extra, *payload["policy"].get("exposures", ())]


@hookimpl
def pysb_child_install(policy: Policy, recorder: Recorder) -> None:
    """Install the file guard in this interpreter."""
    install(policy, recorder)


@hookimpl
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """Each exposure and ignore rule: python, plus os when the provider enforces it."""
    from pysb_core.provider import Capability

    enforced = set(provider.enforced()) if provider is not None else set()
    for e in policy.exposures:
        if e.implicit:
            continue
        key = "expose-rw" if e.writable else "expose-ro"
        shown = e.path if not e.renamed else f"{e.path}:{e.target}"
        layers = ["python"]
        needs = {Capability.FILES} | ({Capability.FILES_WRITE} if e.writable else set())
        if e.renamed:
            needs.add(Capability.RENAME)
        if needs <= enforced:
            layers.append("os")
        report.add(f"files: {key}: {shown}", e.source, layers, family=GUARD)
    for rule in policy.ignore:
        layers = ["python", *(["os"] if Capability.IGNORE in enforced else [])]
        report.add(f"files: ignore: {rule.pattern}", rule.source, layers, family=GUARD)
    # Profile files are protected implicitly, not by a rule the user wrote: a note, so that
    # an explicit opt-out of the Python layer under a provider without write confinement
    # is not refused for a rule nobody asked for.
    for path in policy.profile_files:
        layers = ["python", *(["os"] if Capability.FILES_WRITE in enforced else [])]
        report.note(f"profile file {path} is never writable inside (by: {', '.join(layers)})")


@hookimpl
def pysb_learned(records: Sequence[Event], profile: Any) -> None:
    """Files as their directories: ``expose-rw`` if written, else ``expose-ro``."""
    for key, path in learned_exposures(records):
        form = profile.path_form(path) if hasattr(profile, "path_form") else path
        profile.add("files", key, form)


def learned_exposures(records: Sequence[Event]) -> list[tuple[str, str]]:
    """``(expose-ro|expose-rw, directory)`` covering every learned file access.

    A file becomes its directory; a directory listed or entered stays itself. A ``stat``
    never widens a rule to a parent: a stat of an existing file counts as its directory,
    a stat of a directory or of a missing path counts for nothing (those are made while
    resolving paths). Directories below another kept one with at least the same right
    are merged into it.
    """
    import os.path

    dirs: dict[str, bool] = {}
    for r in records:
        if r.guard != GUARD or r.action != "learn":
            continue
        path = r.target
        if not path.startswith("/") or path.startswith(("/proc/", "/sys/", "/dev/")):
            continue
        write = bool(r.data.get("write"))
        isdir = bool(r.data.get("isdir"))
        kind = r.detail
        if kind == "stat":
            # Only a stat of an existing file says the program needs its directory; stats
            # of directories (made while resolving paths, or by the import system scanning
            # sys.path) and of missing paths never widen a rule.
            if isdir or not r.data.get("exists", True):
                continue
            directory = os.path.dirname(path) or "/"
        elif isdir and not write and kind in ("list", "chdir", "read"):
            directory = path
        else:
            directory = os.path.dirname(path) or "/"
        dirs[directory] = dirs.get(directory, False) or write
    kept: dict[str, bool] = {}
    for d in sorted(dirs, key=len):
        parent = next((k for k in kept if d == k or d.startswith(k.rstrip("/") + "/")), None)
        if parent is not None and (kept[parent] or not dirs[d]):
            continue
        kept[d] = dirs[d]
    return [("expose-rw" if w else "expose-ro", d) for d, w in sorted(kept.items())]


# ---------------------------------------------------------------------------------------
# Install
# ---------------------------------------------------------------------------------------


def _param(pos, kw, dir_fd=None, write=False, follow=True, kind="read", default=None):
    return (pos, kw, dir_fd, write, follow, kind, default)


#: name -> (paths, options). ``write`` True/False or "flags" (os.open); ``follow`` True,
#: False, or the name of a follow_symlinks keyword.
FACES: dict[str, tuple[tuple, dict]] = {
    "stat": ((_param(0, "path", "dir_fd", False, "follow_symlinks", "stat"),), {}),
    "lstat": ((_param(0, "path", "dir_fd", False, False, "stat"),), {}),
    "access": ((_param(0, "path", "dir_fd", False, "follow_symlinks", "stat"),), {"access": True}),
    "readlink": ((_param(0, "path", "dir_fd", False, False, "stat"),), {"post": "readlink"}),
    "listdir": ((_param(0, "path", None, False, True, "list", "."),), {"post": "listdir"}),
    "scandir": ((_param(0, "path", None, False, True, "list", "."),), {"post": "scandir"}),
    "mkdir": ((_param(0, "path", "dir_fd", True, False, "mkdir"),), {}),
    "makedirs": None,  # Python code over mkdir
    "rmdir": ((_param(0, "path", "dir_fd", True, False, "write"),), {"mutates": True}),
    "remove": ((_param(0, "path", "dir_fd", True, False, "write"),), {"mutates": True}),
    "unlink": ((_param(0, "path", "dir_fd", True, False, "write"),), {"mutates": True}),
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
    "chdir": ((_param(0, "path", None, False, True, "chdir"),), {"chdir": True}),
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
)


def install(policy: Policy, recorder: Recorder) -> None:
    if _installed:
        return
    _installed.append(True)
    import errno
    import fnmatch
    import io
    import os
    import posix
    import re
    import stat as stat_module

    from pysb_core.errors import FileDeniedError, WriteDeniedError
    from pysb_guards import imports
    from pysb_guards._patch import defer_sweep, set_attr

    imports.ensure_installed(policy, recorder)
    exposures = list(policy.exposures)
    if not any(e.implicit for e in exposures):
        from pysb_core.pyenv import implicit_exposures

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
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    write_flags |= getattr(os, "O_TMPFILE", 0) & ~os.O_DIRECTORY

    add_handler, _close = _seal.audit_registry()
    ns = _seal.seal_group(
        [fn for name, fn in globals().items() if name.startswith("_f_") and callable(fn)],
        ST={
            "by_path": by_path,
            "renames": renames,
            "ignore": tuple(ignore),
            "profile": profile_files,
            "devices": frozenset(DEVICES),
            "cwd": None,
            "cwd_hint": policy.cwd,
            "cache": {},
            "denied": set(),
            "learning": bool(recorder.learning),
        },
        RECORDER=recorder,
        FDENIED=FileDeniedError,
        WDENIED=WriteDeniedError,
        REFUSAL=_seal.Refusal,
        VALUE=_seal.Value,
        LSTAT=posix.lstat,
        STAT=posix.stat,
        READLINK=posix.readlink,
        GETCWD=posix.getcwd,
        S_ISLNK=stat_module.S_ISLNK,
        S_ISDIR=stat_module.S_ISDIR,
        FSENC=sys.getfilesystemencoding(),
        ENOENT=errno.ENOENT,
        EACCES=errno.EACCES,
        WRITE_FLAGS=write_flags,
        GETFRAME=sys._getframe,
        DOOR_NS=_seal.DOOR_NS,
        MAKE_DOOR=_seal.make_door,
        MAKE_FACE=_seal.make_face,
        SCANDIR_RESULT=ScandirResult,
        _ALLOWED=object(),
    )
    ns["ST"]["cwd"] = ns["_f_cwd"]()

    # Faces on os and posix (the same C functions under two names).
    faces: dict[int, Any] = {}
    for name, spec in FACES.items():
        original = getattr(posix, name, None) or getattr(os, name, None)
        if original is None:
            continue
        params, options = spec
        if options.get("post") == "listdir" and not ignore:
            options = {**options, "post": None}
        face = ns["_f_make_face"](original, params, options, _make_prepare(params))
        faces[id(original)] = face
        for module in (os, posix):
            if getattr(module, name, None) is original:
                set_attr(module, name, face)

    # open() and friends need a face only to translate SRC:DEST renames; the audit hook
    # judges every open.
    if renames:
        opener = ns["_f_make_face"](
            io.open,
            (_param(0, "file", None, "mode", True, "read"),),
            {"io": True},
            _make_prepare(((0, "file"),)),
        )
        faces[id(io.open)] = opener
        import _io
        import builtins

        for module in (builtins, io, _io):
            if getattr(module, "open", None) is io.open:
                set_attr(module, "open", opener)
    defer_sweep(faces)

    def patch_sqlite(module: Any) -> None:
        connect = getattr(module, "connect", None)
        if connect is not None and not _seal.is_face(connect):
            set_attr(
                module,
                "connect",
                _seal.guard(connect, _seal._allow_all, prepare=_make_prepare(((0, "database"),))),
            )

    imports.on_import("sqlite3", patch_sqlite)
    imports.on_import("_sqlite3", patch_sqlite)

    # C functions that open a path themselves (no audit event): judged like open().
    for module_name, attr, params in C_PATH_FUNCTIONS:
        imports.on_import(module_name, ns["_f_make_path_patcher"](attr, params, _make_prepare))

    handlers = ns["_f_make_handlers"](EVENTS)
    for event, handler in handlers.items():
        add_handler(event, handler)


def _make_prepare(params: tuple) -> Callable[[tuple, dict], tuple[tuple, dict]]:
    """Normalise path-like arguments to exact str/bytes, flags to exact ints and bools,
    *before* the judge: judges never run the program's code."""
    import os

    fspath = os.fspath
    slots = [(p[0], p[1]) for p in params]

    def norm(value: Any) -> Any:
        kind = type(value)
        if kind is str or kind is bytes or kind is int or value is None:
            return value
        if isinstance(value, (str, bytes)):
            return str.__str__(value) if isinstance(value, str) else bytes(value)
        if isinstance(value, int):
            return int(value)
        try:
            value = fspath(value)
        except TypeError:
            return value
        return norm(value)

    def prepare(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if not kwargs and len(args) == 1 and type(args[0]) is str:
            return args, kwargs  # the common case, as fast as possible
        if slots:
            pos, kw = slots[0]
            args = list(args)
            for pos, kw in slots:
                if pos < len(args):
                    args[pos] = norm(args[pos])
                elif kw in kwargs:
                    kwargs = {**kwargs, kw: norm(kwargs[kw])}
            args = tuple(args)
        for key in ("dir_fd", "src_dir_fd", "dst_dir_fd"):
            if key in kwargs and kwargs[key] is not None and type(kwargs[key]) is not int:
                kwargs = {**kwargs, key: int(kwargs[key].__index__())}
        if "follow_symlinks" in kwargs and type(kwargs["follow_symlinks"]) is not bool:
            kwargs = {**kwargs, "follow_symlinks": bool(kwargs["follow_symlinks"])}
        if len(args) > 1 and type(args[1]) is not int and isinstance(args[1], int):
            args = (args[0], int(args[1]), *args[2:])
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


# ---------------------------------------------------------------------------------------
# The sealed engine (private globals: ST, RECORDER, LSTAT... see install()).
# ---------------------------------------------------------------------------------------

ST: dict[str, Any] = None  # type: ignore[assignment]  # sealed
RECORDER: Any = None  # type: ignore[assignment]  # sealed
FDENIED: Any = None  # type: ignore[assignment]  # sealed
WDENIED: Any = None  # type: ignore[assignment]  # sealed
REFUSAL: Any = None  # type: ignore[assignment]  # sealed
VALUE: Any = None  # type: ignore[assignment]  # sealed
LSTAT: Any = None  # type: ignore[assignment]  # sealed
STAT: Any = None  # type: ignore[assignment]  # sealed
READLINK: Any = None  # type: ignore[assignment]  # sealed
GETCWD: Any = None  # type: ignore[assignment]  # sealed
S_ISLNK: Any = None  # type: ignore[assignment]  # sealed
S_ISDIR: Any = None  # type: ignore[assignment]  # sealed
FSENC: str = None  # type: ignore[assignment]  # sealed
ENOENT: int = None  # type: ignore[assignment]  # sealed
EACCES: int = None  # type: ignore[assignment]  # sealed
WRITE_FLAGS: int = None  # type: ignore[assignment]  # sealed
GETFRAME: Any = None  # type: ignore[assignment]  # sealed
DOOR_NS: Any = None  # type: ignore[assignment]  # sealed
MAKE_DOOR: Any = None  # type: ignore[assignment]  # sealed
MAKE_FACE: Any = None  # type: ignore[assignment]  # sealed
SCANDIR_RESULT: Any = None  # type: ignore[assignment]  # sealed


def _f_text(p):
    kind = type(p)
    if kind is str:
        return p
    if kind is bytes:
        return p.decode(FSENC, "surrogateescape")
    return None


def _f_cwd():
    cwd = ST["cwd"]
    if cwd is None:
        try:
            cwd = GETCWD()
        except OSError:
            cwd = ST["cwd_hint"] or "/"
        ST["cwd"] = cwd
    return cwd


def _f_abs(text, dir_fd):
    if text.startswith("/"):
        return text
    if dir_fd is None or dir_fd == -1 or dir_fd == -100:
        base = _f_cwd()
    else:
        try:
            base = READLINK(f"/proc/self/fd/{dir_fd}")
        except OSError:
            return None
    if base == "/":
        return "/" + text
    return base + "/" + text


def _f_translate(abspath):
    for target, path in ST["renames"]:
        if abspath == target or abspath.startswith(target + "/") or target == "/":
            return path + abspath[len(target) :] if target != "/" else path + abspath
    return None


def _f_realpath(path):
    """Canonical form of an absolute path (symlinks resolved, missing tail kept)."""
    out = ""
    rest = [p for p in path.split("/") if p and p != "."]
    rest.reverse()
    links = 0
    missing = False
    while rest:
        name = rest.pop()
        if name == "..":
            out = out[: out.rfind("/")] if out else ""
            continue
        candidate = out + "/" + name
        if missing:
            out = candidate
            continue
        try:
            st = LSTAT(candidate)
        except OSError:
            missing = True
            out = candidate
            continue
        if S_ISLNK(st.st_mode):
            links += 1
            if links > 40:
                return candidate
            try:
                target = READLINK(candidate)
            except OSError:
                out = candidate
                continue
            if target.startswith("/"):
                out = ""
            more = [p for p in target.split("/") if p and p != "."]
            more.reverse()
            rest.extend(more)
            continue
        out = candidate
    return out or "/"


def _f_canon(abspath, follow):
    if follow:
        return _f_realpath(abspath)
    stripped = abspath.rstrip("/")
    head, _, tail = stripped.rpartition("/")
    if tail in ("", ".", ".."):
        return _f_realpath(abspath)
    base = _f_realpath(head or "/")
    return (base if base != "/" else "") + "/" + tail


def _f_exposure(canon):
    by = ST["by_path"]
    p = canon
    while True:
        e = by.get(p)
        if e is not None:
            return e
        if p == "/" or not p:
            return None
        i = p.rfind("/")
        p = p[:i] or "/"


def _f_ignored(canon, exp):
    rules = ST["ignore"]
    if not rules or exp[4]:
        return None
    root = exp[0]
    if canon == root:
        return None
    rel = canon[len(root) :].lstrip("/")
    cur = root.rstrip("/")
    for name in rel.split("/"):
        cur = cur + "/" + name
        for kind, match, pattern, source in rules:
            if match(name if kind == "name" else cur):
                return (pattern, source)
    return None


def _f_shown(canon):
    cwd = ST["cwd_hint"] or _f_cwd()
    if cwd and cwd != "/" and (canon == cwd or canon.startswith(cwd + "/")):
        rest = canon[len(cwd) :].lstrip("/")
        return "./" + rest if rest else "."
    return canon


def _f_rule_dir(canon, kind):
    """The directory a suggested rule names: the path itself for a directory."""
    if kind in ("list", "chdir"):
        return canon
    try:
        if S_ISDIR(STAT(canon).st_mode):
            return canon
    except OSError:
        pass
    return canon.rpartition("/")[0] or "/"


def _f_deny(exc_type, message, canon, rule, detail, err):
    exc = exc_type(message, target=canon, suggested_rule=rule)
    exc.errno = err
    exc.strerror = message
    exc.filename = canon
    seen = ST["denied"]
    if (canon, detail) not in seen:  # one event per path and kind, not one per probe
        if len(seen) < 10000:
            seen.add((canon, detail))
        RECORDER.deny("files", canon, detail, rule)
    return REFUSAL(exc)


def _f_decide(canon, write, kind):
    """None when ``canon`` may be accessed so, else a Refusal naming the rule to add."""
    if canon in ST["devices"]:
        return None
    exp = _f_exposure(canon)
    detail = "write" if write else kind
    if exp is None:
        key = "expose-rw" if write else "expose-ro"
        rule = f"files: {key}: [{_f_shown(_f_rule_dir(canon, kind))}]"
        return _f_deny(
            FDENIED,
            f"'{canon}' is not exposed to the sandbox: add `{rule}` to the profile",
            canon,
            rule,
            detail,
            ENOENT,
        )
    hidden = _f_ignored(canon, exp)
    if hidden is not None:
        return _f_deny(
            FDENIED,
            f"'{canon}' is hidden by `files: ignore: [{hidden[0]}]` ({hidden[1]}); "
            "remove that rule to make it visible",
            canon,
            "",
            detail,
            ENOENT,
        )
    if write:
        if canon in ST["profile"]:
            return _f_deny(
                WDENIED,
                f"'{canon}' is a profile file of this sandbox: it is never writable from inside",
                canon,
                "",
                detail,
                EACCES,
            )
        if not exp[2]:
            rule = f"files: expose-rw: [{_f_shown(_f_rule_dir(canon, kind))}]"
            return _f_deny(
                WDENIED,
                f"write to '{canon}' refused: `files: expose-ro: [{_f_shown(exp[0])}]` "
                f"({exp[3]}) exposes it read-only; add `{rule}` to the profile",
                canon,
                rule,
                detail,
                EACCES,
            )
    return None


def _f_learn(canon, write, kind):
    exp = _f_exposure(canon)
    if exp is not None and exp[4]:
        return
    if canon in ST["devices"]:
        return
    try:
        isdir = S_ISDIR(STAT(canon).st_mode)
        exists = True
    except OSError:
        isdir = exists = False
    key = "expose-rw" if write else "expose-ro"
    directory = canon if isdir and kind in ("list", "chdir") else canon.rpartition("/")[0] or "/"
    RECORDER.learn(
        "files",
        canon,
        "write" if write and kind != "mkdir" else kind,
        f"files: {key}: [{directory}]",
        write=bool(write),
        isdir=isdir,
        exists=exists,
    )


_ALLOWED: Any = None  # a unique sentinel in the sealed namespace (see install)


def _f_check(path, write, follow, dir_fd, kind):
    """The one decision: None (go on as asked), a host path str/bytes (a renamed
    exposure: use it instead), or a Refusal."""
    text = path if path.__class__ is str else _f_text(path)
    if text is None:
        if type(path) is int or path is None:
            return None  # a file descriptor (a capability the program holds) or the cwd
        return REFUSAL(TypeError(f"pysb: a path must be str or bytes, not {type(path).__name__}"))
    cache = ST["cache"]
    key = None
    if ST["learning"]:
        pass  # every access is recorded, so nothing is answered from the cache
    elif dir_fd is None or dir_fd == -1 or dir_fd == -100:
        key = (text, write, follow) if text.startswith("/") else (ST["cwd"], text, write, follow)
        hit = cache.get(key)
        if hit is not None:
            if hit is _ALLOWED:
                return None
            if hit.__class__ is tuple:  # a denial: rebuilt (a fresh exception each time)
                return _f_decide(hit[0], write, kind)
            return hit
    absolute = _f_abs(text, dir_fd)
    if absolute is None:
        return REFUSAL(FDENIED(f"pysb: directory descriptor {dir_fd} cannot be resolved"))
    translated = _f_translate(absolute) if ST["renames"] else None
    canon = _f_canon(translated or absolute, follow)
    if ST["learning"]:
        _f_learn(canon, write, kind)
        verdict = None
    else:
        verdict = _f_decide(canon, write, kind)
        if verdict is not None:
            if key is not None:
                cache[key] = (canon,)
            return verdict
    result = _ALLOWED
    if translated is not None:
        result = translated if type(path) is str else translated.encode(FSENC, "surrogateescape")
    if key is not None:
        if len(cache) > 4096:
            cache.clear()
        cache[key] = result
    return None if result is _ALLOWED else result


def _f_check_symlink_target(src, dst, dir_fd):
    """A new symlink must point inside the exposures (resolved from its directory)."""
    text = _f_text(src)
    dtext = _f_text(dst)
    if text is None or dtext is None:
        return None
    if not text.startswith("/"):
        parent = _f_abs(dtext, dir_fd)
        if parent is None:
            return None
        text = parent.rpartition("/")[0] + "/" + text
    canon = _f_realpath(text)
    if ST["learning"]:
        return None
    if _f_exposure(canon) is None or _f_decide(canon, False, "read") is not None:
        rule = f"files: expose-ro: [{_f_shown(_f_rule_dir(canon, 'read'))}]"
        return _f_deny(
            FDENIED,
            f"symlink to '{canon}' refused: it points outside the exposures; add `{rule}`",
            canon,
            rule,
            "symlink",
            ENOENT,
        )
    return None


def _f_make_face(original, params, options, prepare):
    """A face and door for one os function, driven by its FACES entry."""
    is_access = options.get("access", False)
    mutates = options.get("mutates", False)
    is_symlink = options.get("symlink", False)
    is_chdir = options.get("chdir", False)
    is_io = options.get("io", False)
    post_kind = options.get("post")

    def judge(args, kwargs):
        if mutates or is_chdir:
            ST["cache"].clear()
            if is_chdir:
                ST["cwd"] = None
        new_args = None
        for pos, kw, dfd_kw, write, follow, kind, default in params:
            if pos < len(args):
                value = args[pos]
            elif kw in kwargs:
                value = kwargs[kw]
            elif default is not None:
                value = default
            else:
                continue
            dir_fd = kwargs.get(dfd_kw) if dfd_kw else None
            if dir_fd is not None and type(dir_fd) is not int:
                return REFUSAL(TypeError("pysb: dir_fd must be an int"))
            if write == "flags":
                flags = args[1] if len(args) > 1 else kwargs.get("flags", 0)
                write = type(flags) is int and bool(flags & WRITE_FLAGS)
            elif write == "mode":
                mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
                write = type(mode) is not str or any(c in mode for c in "wax+")
            elif write == "dbmflag":
                flag = args[1] if len(args) > 1 else kwargs.get("flag", "r")
                write = not (type(flag) is str and flag.startswith("r"))
            if is_access:
                mode = args[1] if len(args) > 1 else kwargs.get("mode", 0)
                write = type(mode) is int and bool(mode & 2)
            if type(follow) is str:
                flag = kwargs.get(follow, True)
                follow = flag if type(flag) is bool else True
            verdict = _f_check(value, write, follow, dir_fd, kind)
            if verdict is None:
                continue
            if verdict.__class__ is REFUSAL:
                if is_access and isinstance(verdict.exc, OSError):
                    return VALUE(False)
                return verdict
            if new_args is None:
                new_args = [list(args), dict(kwargs)]
            if pos < len(args):
                new_args[0][pos] = verdict
            else:
                new_args[1][kw] = verdict
        if is_symlink:
            src = args[0] if args else kwargs.get("src")
            dst = args[1] if len(args) > 1 else kwargs.get("dst")
            verdict = _f_check_symlink_target(src, dst, kwargs.get("dir_fd"))
            if verdict is not None:
                return verdict
        if new_args is None:
            return None
        return (tuple(new_args[0]), new_args[1])

    simple = (
        len(params) == 1
        and params[0][0] == 0
        and type(params[0][3]) is bool
        and type(params[0][4]) is bool
        and not (is_access or mutates or is_symlink or is_chdir)
    )
    if simple:
        general = judge
        _, _, _, s_write, s_follow, s_kind, _ = params[0]

        def judge(args, kwargs):
            if not kwargs and len(args) == 1:
                verdict = _f_check(args[0], s_write, s_follow, None, s_kind)
                if verdict is None or verdict.__class__ is REFUSAL:
                    return verdict
                return ((verdict,), {})
            return general(args, kwargs)

    post = None
    if post_kind == "listdir":
        post = _f_post_listdir
    elif post_kind == "scandir":
        post = _f_post_scandir
    elif post_kind == "readlink":
        post = _f_post_readlink
    elif post_kind == "getcwd":
        post = _f_post_getcwd
    del is_io
    door = MAKE_DOOR(original, judge, post, name=getattr(original, "__name__", "door"))
    return MAKE_FACE(door, original, prepare)


def _f_make_path_patcher(attr, params, make_prepare):
    """Patch ``module.<attr>`` (``Class.method`` allowed) with a judging face."""

    def patcher(module):
        owner = module
        parts = attr.split(".")
        for part in parts[:-1]:
            owner = getattr(owner, part, None)
            if owner is None:
                return
        name = parts[-1]
        original = getattr(owner, name, None)
        if original is None or getattr(original, "__pysb_face__", False):
            return
        try:
            setattr(owner, name, _f_make_face(original, params, {}, make_prepare(params)))
        except (AttributeError, TypeError):
            pass

    return patcher


def _f_dir_of(args, kwargs, key="path"):
    value = args[0] if args else kwargs.get(key, ".")
    if value is None:
        value = "."
    if type(value) is int:
        try:
            return READLINK(f"/proc/self/fd/{value}")
        except OSError:
            return None
    text = _f_text(value)
    if text is None:
        return None
    translated = _f_translate(_f_abs(text, None)) if ST["renames"] else None
    return _f_realpath(translated or _f_abs(text, None))


def _f_post_listdir(result, args, kwargs):
    if ST["learning"] or not ST["ignore"]:
        return result
    base = _f_dir_of(args, kwargs)
    exp = _f_exposure(base) if base else None
    if exp is None:
        return result
    out = []
    for name in result:
        text = name if type(name) is str else name.decode(FSENC, "surrogateescape")
        if _f_ignored(base.rstrip("/") + "/" + text, exp) is None:
            out.append(name)
    return out


def _f_post_scandir(result, args, kwargs):
    if ST["learning"] or not ST["ignore"]:
        return result
    base = _f_dir_of(args, kwargs)
    exp = _f_exposure(base) if base else None
    entries = []
    try:
        for entry in result:
            name = entry.name
            text = name if type(name) is str else name.decode(FSENC, "surrogateescape")
            if exp is None or _f_ignored(base.rstrip("/") + "/" + text, exp) is None:
                entries.append(entry)
    finally:
        result.close()
    return SCANDIR_RESULT(entries)


def _f_post_readlink(result, args, kwargs):
    """Do not reveal where a link points when that place is not exposed."""
    if ST["learning"]:
        return result
    link = args[0] if args else kwargs.get("path")
    target = _f_text(result)
    ltext = _f_text(link)
    if target is None or ltext is None:
        return result
    if not target.startswith("/"):
        absolute = _f_abs(ltext, kwargs.get("dir_fd"))
        if absolute is None:
            return result
        target = absolute.rpartition("/")[0] + "/" + target
    canon = _f_realpath(target)
    if _f_exposure(canon) is None:
        return _f_deny(
            FDENIED,
            f"'{ltext}' points outside the exposures; its target is not shown",
            ltext,
            "",
            "readlink",
            ENOENT,
        )
    return result


def _f_post_getcwd(result, args, kwargs):
    text = _f_text(result)
    if text is None or ST["learning"]:
        return result
    ST["cwd"] = text
    canon = _f_realpath(text)
    for target, path in ST["renames"]:
        if canon == path or canon.startswith(path + "/"):
            shown = target + canon[len(path) :]
            return shown if type(result) is str else shown.encode(FSENC, "surrogateescape")
    # The working directory's name is not a secret (os.path.abspath needs it); what is
    # below it stays judged path by path.
    return result


def _f_caller_is_door():
    """The Python frame that called the audited C function went through a guard door
    (which already judged it, with its dir_fd)."""
    f = GETFRAME(4)
    return f is not None and f.f_globals is DOOR_NS


def _f_make_handlers(events):
    """Audit-hook handlers: each returns the exception to raise, or None."""

    def on_open(args):
        path = args[0]
        flags = args[2] if len(args) > 2 else 0
        kind = type(path)
        if kind is not str and kind is not bytes:
            if kind is int or path is None:
                return None
            text = _f_pathlib_text(path)
            if text is None:
                return TypeError("pysb: open() of a path object that is not str, bytes or pathlib")
            path = text
        write = type(flags) is int and bool(flags & WRITE_FLAGS)
        verdict = _f_check(path, write, True, None, "read")
        if verdict is None or verdict.__class__ is not REFUSAL:
            return None
        if args[1] is None and _f_caller_is_door():
            return None  # os.open through its face: judged there, with its dir_fd
        return verdict.exc

    def on_sqlite(args):
        database = args[0]
        text = _f_text(database) if type(database) in (str, bytes) else _f_pathlib_text(database)
        if text is None or text in ("", ":memory:"):
            return None
        write = True
        if text.startswith("file:"):
            body, _, query = text[5:].partition("?")
            if "mode=memory" in query:
                return None
            write = "mode=ro" not in query
            text = body or ":memory:"
            if text == ":memory:":
                return None
        verdict = _f_check(text, write, True, None, "write" if write else "read")
        return None if verdict is None or verdict.__class__ is not REFUSAL else verdict.exc

    def make(event, pairs, write, follow, kind):
        def handler(args):
            if event in ("os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link"):
                ST["cache"].clear()
            if event == "os.chdir":
                ST["cwd"] = None
                ST["cache"].clear()
            for index, dfd_index in pairs:
                if index >= len(args):
                    continue
                path = args[index]
                if type(path) is not str and type(path) is not bytes:
                    if type(path) is int or path is None:
                        continue
                    text = _f_pathlib_text(path)
                    if text is None:
                        return TypeError(f"pysb: {event} of a path that is not str or bytes")
                    path = text
                dir_fd = (
                    args[dfd_index] if dfd_index is not None and dfd_index < len(args) else None
                )
                if dir_fd is not None and type(dir_fd) is not int:
                    dir_fd = None
                follows = (True, False) if follow is None else (follow,)
                for f in follows:
                    verdict = _f_check(path, write, f, dir_fd, kind)
                    if verdict is not None and verdict.__class__ is REFUSAL:
                        return verdict.exc
            if event == "os.symlink" and len(args) > 1:
                dir_fd = args[2] if len(args) > 2 and type(args[2]) is int else None
                verdict = _f_check_symlink_target(args[0], args[1], dir_fd)
                if verdict is not None:
                    return verdict.exc
            return None

        return handler

    handlers = {"open": on_open, "sqlite3.connect": on_sqlite}
    for event, (pairs, write, follow, kind) in events.items():
        handlers[event] = make(event, pairs, write, follow, kind)
    return handlers


def _f_pathlib_text(value):
    """Handlers never run the program's code (no __fspath__/__str__): only exact str and
    bytes paths are judged; faces turn path objects into those before the C call."""
    return None
