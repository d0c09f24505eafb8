"""The file guard's decision engine (sealed: see ``_seal.seal_group``).

These functions never run with this module's globals: :func:`pysb_guards.files.guard.install`
re-creates every ``_f_*`` function in one private namespace that also holds the names
declared below (``ST``, ``RECORDER``, ``LSTAT``...). The module-level values here are
placeholders for linters and readers only.

Why one module: its ``_f_*`` functions are re-created together in one sealed namespace where
they call one another by name and share the decision cache; one module is one namespace's
source, and a split would add globals to copy and keep consistent with the seal.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ST: Any = None  # type: ignore[assignment]  # sealed
RECORDER: Any = None  # type: ignore[assignment]  # sealed
FDENIED: Any = None  # type: ignore[assignment]  # sealed
WDENIED: Any = None  # type: ignore[assignment]  # sealed
FILE_ERROR: Any = None  # type: ignore[assignment]  # sealed
PATH_TYPE_ERROR: Any = None  # type: ignore[assignment]  # sealed
REFUSAL: Any = None  # type: ignore[assignment]  # sealed
DEFER: Any = None  # type: ignore[assignment]  # sealed
REFUSE: Any = None  # type: ignore[assignment]  # sealed
NEW_VALUE: Any = None  # type: ignore[assignment]  # sealed
EXC_OF: Any = None  # type: ignore[assignment]  # sealed
LSTAT: Any = None  # type: ignore[assignment]  # sealed
STAT: Any = None  # type: ignore[assignment]  # sealed
READLINK: Any = None  # type: ignore[assignment]  # sealed
GETCWD: Any = None  # type: ignore[assignment]  # sealed
FSENC: Any = None  # type: ignore[assignment]  # sealed
ENOENT: Any = None  # type: ignore[assignment]  # sealed
EACCES: Any = None  # type: ignore[assignment]  # sealed
EEXIST: Any = None  # type: ignore[assignment]  # sealed
WRITE_FLAGS: Any = None  # type: ignore[assignment]  # sealed
GETFRAME: Any = None  # type: ignore[assignment]  # sealed
MAKE_DOOR: Any = None  # type: ignore[assignment]  # sealed
MAKE_FACE: Any = None  # type: ignore[assignment]  # sealed
IS_FACE: Any = None  # type: ignore[assignment]  # sealed
IS_DOOR_FRAME: Any = None  # type: ignore[assignment]  # sealed
FRAME_CODE: Any = None  # type: ignore[assignment]  # sealed
DOOR_CODE_ID: Any = None  # type: ignore[assignment]  # sealed
RESOLVE: Any = None  # type: ignore[assignment]  # sealed
PLACE: Any = None  # type: ignore[assignment]  # sealed
NEW: Any = None  # type: ignore[assignment]  # sealed
SCANDIR_RESULT: Any = None  # type: ignore[assignment]  # sealed
SET_ENTRIES: Any = None  # type: ignore[assignment]  # sealed
DIRENTRY_NAME: Any = None  # type: ignore[assignment]  # sealed
SCANDIR_NEXT: Any = None  # type: ignore[assignment]  # sealed
SCANDIR_CLOSE: Any = None  # type: ignore[assignment]  # sealed
SCANDIR_ITERATOR: Any = None  # type: ignore[assignment]  # sealed
GUARD: Any = None  # type: ignore[assignment]  # sealed
ALLOW: Any = None  # type: ignore[assignment]  # sealed
TYPE_DICT: Any = None  # type: ignore[assignment]  # sealed
TYPE_MRO: Any = None  # type: ignore[assignment]  # sealed
THREAD_COUNT: Any = None  # type: ignore[assignment]  # sealed
METHOD_DESCRIPTOR: Any = None  # type: ignore[assignment]  # sealed
SHM_WRITE_FLAGS: Any = None  # type: ignore[assignment]  # sealed
GET_IDENT: Any = None  # type: ignore[assignment]  # sealed
CWD_LOCK: Any = None  # type: ignore[assignment]  # sealed
OSERROR: Any = None  # type: ignore[assignment]  # sealed
FILENAME: Any = None  # type: ignore[assignment]  # sealed
FILENAME2: Any = None  # type: ignore[assignment]  # sealed
OPEN_TYPES: Any = None  # type: ignore[assignment]  # sealed
OBJECT_SETATTR: Any = None  # type: ignore[assignment]  # sealed


def _f_text(p):
    kind = type(p)
    if kind is str:
        return p
    if kind is bytes:
        return p.decode(FSENC, "surrogateescape")
    return None


def _f_cwd():
    cwd = _f_real_cwd()
    return cwd if cwd is not None else ST["cwd_hint"] or "/"


def _f_real_cwd():
    """The working directory (None when it cannot be read). Kept only when no ``chdir``
    ended while it was read: ``getcwd`` lets other threads run, and an old answer stored
    after a ``chdir`` would resolve the next relative path against the old directory."""
    cwd = ST["cwd"]
    if cwd is None:
        gen = ST["cwd_gen"]
        try:
            cwd = GETCWD()
        except OSError:
            return None
        if ST["cwd_gen"] == gen:
            ST["cwd"] = cwd
    return cwd


def _f_rebase(value):
    """``value`` made absolute against the working directory when it is a relative str or
    bytes path and other threads run, else None. The face judges and calls with it: another
    thread's ``os.chdir`` between the judgment and the kernel's look-up would otherwise
    make the path opened another than the path judged (issue 28, item 1)."""
    kind = type(value)
    if kind is str:
        if value.startswith("/"):
            return None
        text = value
    elif kind is bytes:
        if value.startswith(b"/"):
            return None
        text = value.decode(FSENC, "surrogateescape")
    else:
        return None
    if not THREAD_COUNT():
        return None
    cwd = _f_real_cwd()
    if cwd is None or not cwd.startswith("/"):
        return None  # a removed working directory: the kernel answers for it
    absolute = cwd + "/" + text if cwd != "/" else "/" + text
    return absolute if kind is str else absolute.encode(FSENC, "surrogateescape")


def _f_record_rebase(pairs):
    ST["rebased"][GET_IDENT()] = pairs


def _f_fix_error(exc):
    """A door's ``fix``: an error of the original names the path as the program gave it,
    not its absolute form (``FileNotFoundError.filename``), nor the exact bytes a
    bytes-like path was copied to (``ST["buffers"]``, filled by the face's prepare).
    C member access only; objects compared by identity."""
    ident = GET_IDENT()
    pairs = ST["rebased"].pop(ident, None)
    copies = ST["buffers"].pop(ident, None) if ST["buffers"] else None
    if not pairs and not copies:
        return
    for cls in TYPE_MRO(type(exc)):
        if cls is OSERROR:
            break
    else:
        return
    for getset in (FILENAME, FILENAME2):
        name = getset.__get__(exc)
        for new, old in pairs or ():
            if name is new:
                getset.__set__(exc, old)
                name = old  # a rebased copy of a bytes-like path: on to the original
                break
        for copy, given in copies or ():
            if name is copy:
                getset.__set__(exc, given)
                break


def _f_fix_error_unlock(exc):
    _f_fix_error(exc)
    _f_unlock()


def _f_lock():
    """Held around a relative ``scandir`` (its entries carry the path as given, so it is
    not rebased) and around ``chdir``, while other threads run: no ``chdir`` happens between
    the listing's judgment and its look-up. Re-entrant (a signal handler in between)."""
    held = ST["held"].setdefault(GET_IDENT(), [])
    if THREAD_COUNT():
        CWD_LOCK.acquire()
        held.append(True)
    else:
        held.append(False)


def _f_unlock():
    held = ST["held"].get(GET_IDENT())
    if held and held.pop():
        CWD_LOCK.release()


def _f_mode(st):
    """``st_mode`` of a stat result, by index (``os.stat_result`` is a class the program
    can write a property into)."""
    return tuple.__getitem__(st, 0)


def _f_abs(text, dir_fd):
    if text.startswith("/"):
        return text
    if dir_fd is not None and type(dir_fd) is not int:
        return None
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


def _f_realpath(path, through_proc=None):
    """Canonical form of an absolute path (symlinks resolved, missing tail kept), the
    answer of ``os.path.realpath``: a link met again while it is being resolved (a loop)
    ends the resolution there, with the rest of the path joined as written.

    ``through_proc`` (a list) gets an item when a link below ``/proc`` was followed
    (``/proc/self``, ``/proc/*/fd/N``, ``/dev/fd`` -> ``/proc/self/fd``...): the answer then
    depends on the program's file descriptors and working directory, which change without
    any call the guard sees (``dup2``), so it must not be cached. The item is True when the
    link of a descriptor was used as a directory (``/proc/self/fd/N/../x``)."""
    out = ""
    rest = [p for p in path.split("/") if p and p != "."]
    rest.reverse()
    links = 0
    missing = False
    active = {}  # links being resolved: their target's names are still in `rest`
    resolved = {}  # link -> what it resolved to (os.path.realpath keeps the same)
    while rest:
        name = rest.pop()
        if type(name) is tuple:  # the end of a link's target: that link is resolved
            active.pop(name[0], None)
            resolved[name[0]] = out
            continue
        if name == "..":
            out = out[: out.rfind("/")] if out else ""
            missing = False  # back in a directory that may exist: resolve again
            continue
        candidate = out + "/" + name
        if missing:
            out = candidate
            continue
        known = resolved.get(candidate)
        if known is not None:
            out = known
            continue
        try:
            st = LSTAT(candidate)
        except OSError:
            missing = True
            out = candidate
            continue
        if _f_mode(st) & 0o170000 == 0o120000:  # a symbolic link
            if candidate in active:  # a loop (the kernel says ELOOP if it gets there)
                return _f_lexical(candidate, [p for p in rest[::-1] if type(p) is str])
            links += 1
            if through_proc is not None and candidate.startswith("/proc/"):
                # True: a descriptor's link used as a directory (/proc/self/fd/N/..)
                through_proc.append(bool(rest) and candidate.rpartition("/")[0].endswith("/fd"))
            if links > 40:  # too long a chain: the kernel says ELOOP; keep going lexically
                missing = True
                out = candidate
                continue
            try:
                target = READLINK(candidate)
            except OSError:
                out = candidate
                continue
            if candidate.startswith("/proc/") and not target.startswith("/") and ":[" in target:
                # /proc/self/fd/N of a pipe or socket the program holds: not a path at all
                return target
            if target.startswith("/"):
                out = ""
            more = [p for p in target.split("/") if p and p != "."]
            more.reverse()
            active[candidate] = True
            rest.append((candidate,))  # popped once the target's names are done
            rest.extend(more)
            continue
        out = candidate
    return out or "/"


def _f_lexical(base, names):
    """``base`` joined with ``names`` and ``..`` taken lexically (``os.path.normpath``)."""
    out = base
    for name in names:
        out = out[: out.rfind("/")] if name == ".." else out + "/" + name
    return out or "/"


def _f_canon(abspath, follow, through_proc=None):
    if follow:
        return _f_realpath(abspath, through_proc)
    stripped = abspath.rstrip("/")
    head, _, tail = stripped.rpartition("/")
    if tail in ("", ".", ".."):
        return _f_realpath(abspath, through_proc)
    base = _f_realpath(head or "/", through_proc)
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
        if _f_mode(STAT(canon)) & 0o170000 == 0o040000:  # a directory
            return canon
    except OSError:
        pass
    return canon.rpartition("/")[0] or "/"


def _f_deny(exc_type, message, canon, rule, detail, err):
    """Record the denial; the Refusal of a FileDeniedError / WriteDeniedError, built by the
    face (see ``_seal.defer``): sealed code constructs no exception of pysb's classes."""
    seen = ST["denied"]
    # One event per path and kind, not one per probe. The import system's scan of
    # sys.path (a stat and a listing of each entry, and zipimport's stat of its parents,
    # for pysb's own imports as for the program's) is refused, and the finder moves on: no
    # access of the program's, so --events does not record it (a learning run does not
    # learn it either: _f_learn), nor count it as seen, which would hide the program's own
    # access to that path. The walk's sys._getframe events cannot let a queued signal
    # handler run below this judge (_seal.signals._run_pending: never while the audit
    # hook dispatches).
    if (canon, detail) not in seen and not (
        (detail == "stat" or detail == "list") and _f_by_import_system()
    ):
        if len(seen) < 10000:
            seen.add((canon, detail))
        RECORDER.deny("files", canon, detail, rule)
    return REFUSE(DEFER(FILE_ERROR, exc_type, message, canon, rule, err))


def _f_decide(canon, write, kind):
    """None when ``canon`` may be accessed so, else a Refusal naming the rule to add."""
    if canon in ST["devices"] or not canon.startswith("/"):
        return None  # a harmless device, or a pipe/socket reopened through /proc/self/fd
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
        refused = (
            not exp[2]
            or canon in ST["profile"]
            or canon in ST["state"]
            or canon.startswith(ST["state_below"])
        )
        if not refused:
            return None  # the kernel answers (EEXIST, ENOENT) naming the path as given
        if kind == "mkdir" and _f_lexists(canon):
            # The kernel checks that the name is free before any permission (EEXIST, under
            # landlock, a read-only bind or a read-only exposure alike): so does the guard,
            # or `pathlib.Path(D).mkdir(exist_ok=True)` of an exposed D would fail here only.
            return REFUSE(OSError(EEXIST, "File exists", canon))
        if kind == "delete" and _f_missing(canon):
            # Likewise, removing a name looks it up first: a missing one is ENOENT (what
            # `test.support.unlink`, `contextlib.suppress(FileNotFoundError)`... expect).
            return REFUSE(OSError(ENOENT, "No such file or directory", canon))
        if canon in ST["profile"]:
            return _f_deny(
                WDENIED,
                f"'{canon}' is a profile file of this sandbox: it is never writable from inside",
                canon,
                "",
                detail,
                EACCES,
            )
        if canon in ST["state"] or canon.startswith(ST["state_below"]):
            return _f_deny(
                WDENIED,
                f"'{canon}' is (or holds) pysb's own cache directory, which the next run "
                "trusts: it is never writable from inside",
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


def _f_missing(canon):
    """True only when the look-up says the name does not exist (ENOENT). A directory the
    program may not search (EACCES) hides nothing: the real call then fails as the kernel
    says, which is what `tempfile`'s cleanup waits for to restore permissions."""
    try:
        LSTAT(canon)
    except OSError as exc:
        return exc.errno == ENOENT
    return False


def _f_lexists(canon):
    try:
        LSTAT(canon)
    except OSError:
        return False
    return True


def _f_by_import_system():
    """Whether the import system is asking (its path finders, and ``importlib.metadata``
    looking for distributions, list and stat every ``sys.path`` entry): a learning run
    records the files it then reads, never the directories it scanned. (A program that
    named its own file so would only learn less, and be refused what it needed.)"""
    f = GETFRAME(2)
    while f is not None:
        name = FRAME_CODE(f).co_filename
        if type(name) is str and (
            name.startswith("<frozen importlib._bootstrap") or "/importlib/metadata/" in name
        ):
            return True
        f = f.f_back
    return False


def _f_learn(canon, write, kind):
    exp = _f_exposure(canon)
    if exp is not None and exp[4]:
        return
    if canon in ST["devices"]:
        return
    if not write and (kind == "list" or kind == "stat") and _f_by_import_system():
        return
    try:
        isdir = _f_mode(STAT(canon)) & 0o170000 == 0o040000
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


def _f_make_exec_learner(event):
    """A learning run's handler of an exec audit event: the program to run, recorded so that
    the parent learns what starting it needs (``pysb_core.linux.execdeps``). Only exact
    str/bytes are read: nothing of the program's runs here."""

    def handler(args):
        if type(args) is not tuple or not args:
            return None
        name = args[0]
        if name is None and event == "subprocess.Popen" and len(args) > 1:
            argv = args[1]
            name = argv[0] if (type(argv) is list or type(argv) is tuple) and argv else argv
        text = _f_text(name) if type(name) is str or type(name) is bytes else None
        if not text:
            return None
        if "/" in text:
            absolute = _f_abs(text, None)
            if absolute is None:
                return None
            text = absolute
        RECORDER.learn("files", text, "exec", "", cwd=_f_cwd(), write=False)
        return None

    return handler


_ALLOWED: Any = None  # a unique sentinel in the sealed namespace (see install)


def _f_check(path, write, follow, dir_fd, kind):
    """The one decision: None (go on as asked), a host path str/bytes (a renamed
    exposure: use it instead), or a Refusal."""
    text = path if type(path) is str else _f_text(path)
    if text is None:
        if type(path) is int or path is None:
            return None  # a file descriptor (a capability the program holds) or the cwd
        return REFUSE(DEFER(PATH_TYPE_ERROR, path))  # its type's name is the program's
    cache = ST["cache"]
    key = None
    if ST["learning"]:
        pass  # every access is recorded, so nothing is answered from the cache
    elif dir_fd is None or dir_fd == -1 or dir_fd == -100:
        # A key of its own (a new str), never the caller's object: a cached decision must
        # not keep the program's path alive (CPython's test_os counts its references).
        tag = ("wf" if follow else "wn") if write else ("rf" if follow else "rn")
        key = tag + text if text.startswith("/") else (ST["cwd"], tag + text)
        hit = cache.get(key)
        if hit is not None:
            if hit is _ALLOWED:
                return None
            if type(hit) is tuple:  # a denial: rebuilt (a fresh exception each time)
                return _f_decide(hit[0], write, kind)
            return hit
    absolute = _f_abs(text, dir_fd)
    if absolute is None:
        message = "pysb: a directory descriptor that cannot be resolved"
        if type(dir_fd) is int:
            message = f"pysb: directory descriptor {dir_fd} cannot be resolved"
        return REFUSE(DEFER(FDENIED, message))
    translated = _f_translate(absolute) if ST["renames"] else None
    through_proc = []
    canon = _f_canon(translated or absolute, follow, through_proc)
    if through_proc:
        key = None  # a decision through /proc/*/fd holds only until the next dup2
        if True in through_proc and not ST["learning"] and THREAD_COUNT():
            return _f_descriptor_race()
    elif (
        dir_fd is not None
        and dir_fd != -100
        and dir_fd != -1
        and ".." in text.split("/")
        and not ST["learning"]
        and THREAD_COUNT()
    ):
        return _f_descriptor_race()
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


def _f_descriptor_race():
    """The refusal, while other threads run, of a path that goes on below the link of a
    descriptor (``/proc/self/fd/N/x``, ``/proc/self/fd/N/../x``) or climbs out of a
    ``dir_fd`` (``../x``): another thread's ``dup2`` between the judgment and the open
    would re-point the descriptor, and ``..`` would then lead out of the exposures."""
    return REFUSE(
        DEFER(
            FDENIED,
            "pysb: a path below a descriptor's link (/proc/self/fd/N/...) or climbing out of "
            "a dir_fd ('..') is refused while other threads run: another thread could "
            "re-point the descriptor between the judgment and the open",
        )
    )


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


def _f_make_face(original, params, options, prepare, name="door"):
    """A face and door for one os function, driven by its FACES entry."""
    is_access = options.get("access", False)
    mutates = options.get("mutates", False)
    is_symlink = options.get("symlink", False)
    is_chdir = options.get("chdir", False)
    is_io = options.get("io", False)
    post_kind = options.get("post")

    def judge(args, kwargs):
        if locks:
            _f_lock()
            verdict = judge_all(args, kwargs)
            if verdict is not None and type(verdict) is not tuple:
                _f_unlock()  # refused: neither the original nor the post runs
            return verdict
        return judge_all(args, kwargs)

    def judge_all(args, kwargs):
        if mutates or is_chdir:
            ST["cache"].clear()
            if is_chdir:
                ST["cwd"] = None
        new_args = None
        rebased = None
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
                return REFUSE(TypeError("pysb: dir_fd must be an int"))
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
            absolute = None if dir_fd is not None or not rebases else _f_rebase(value)
            if absolute is not None:
                verdict = _f_check(absolute, write, follow, None, kind)
                if verdict is None:
                    verdict = absolute
                if type(verdict) is not REFUSAL:
                    rebased = [] if rebased is None else rebased
                    rebased.append((verdict, value))
            else:
                verdict = _f_check(value, write, follow, dir_fd, kind)
            if verdict is None:
                continue
            if type(verdict) is REFUSAL:
                if is_access and type(EXC_OF(verdict)) is not TypeError:
                    return NEW_VALUE(False)  # a denial (not a bad argument): access says no
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
            dir_fd = kwargs.get("dir_fd")
            if dir_fd is not None and type(dir_fd) is not int:
                return REFUSE(TypeError("pysb: dir_fd must be an int"))
            verdict = _f_check_symlink_target(src, dst, dir_fd)
            if verdict is not None:
                return verdict
        if is_io and rebased is not None and _f_has_opener(args, kwargs):
            return None  # the opener gets the path as given (and opens through a face)
        if rebased is not None:
            _f_record_rebase(rebased)
        if new_args is None:
            return None
        return (tuple(new_args[0]), new_args[1])

    locks = is_chdir or post_kind == "scandir"
    rebases = post_kind != "scandir"
    simple = (
        not locks
        and len(params) == 1
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
                absolute = _f_rebase(args[0])
                if absolute is not None:
                    return general(args, kwargs)
                verdict = _f_check(args[0], s_write, s_follow, None, s_kind)
                if verdict is None or type(verdict) is REFUSAL:
                    return verdict
                return ((verdict,), {})
            return general(args, kwargs)

    if is_io and not ST["renames"]:
        # open() without renames: the audit hook judges every open; the face only rebases
        # a relative path while other threads run (judged there in its absolute form).

        def judge(args, kwargs):
            value = args[0] if args else kwargs.get("file")
            absolute = _f_rebase(value)
            if absolute is None or _f_has_opener(args, kwargs):
                return None
            _f_record_rebase([(absolute, value)])
            if args:
                return ((absolute, *args[1:]), kwargs)
            return (args, {**kwargs, "file": absolute})

    post = None
    if post_kind == "listdir":
        post = _f_post_listdir
    elif post_kind == "scandir":
        post = _f_post_scandir
    elif post_kind == "readlink":
        post = _f_post_readlink
    elif post_kind == "getcwd":
        post = _f_post_getcwd
    elif post_kind == "chdir":
        post = _f_post_chdir
    elif is_io:
        post = _f_post_open
    fix = _f_fix_error_unlock if locks else _f_fix_error
    door = MAKE_DOOR(original, judge, post, name=name, fix=fix)
    if is_chdir:
        ST["chdir_doors"].add(DOOR_CODE_ID(door))
    if name == "open" and not is_io:  # os.open: the audit event it raises was judged here
        ST["open_doors"].add(DOOR_CODE_ID(door))
    return MAKE_FACE(door, original, prepare)


def _f_make_path_patcher(attr, params, prepare):
    """Patch ``module.<attr>`` (``Class.method`` allowed) with a judging face. The module is
    read and written by C code only (``RESOLVE`` / ``PLACE``): it may be the program's."""

    def patcher(module):
        found = RESOLVE(module, attr, True)
        if found is None:
            return
        owner, name, original = found
        if IS_FACE(original):
            return
        PLACE(owner, name, _f_make_face(original, params, {}, prepare, name))

    return patcher


def _f_make_fixed_patcher(attr, path, write):
    """Patch ``module.<attr>``, a C function that reads or writes one fixed file of its own
    (``spwd.getspall`` reads ``/etc/shadow``), with a face judging that file."""

    def judge(args, kwargs):
        verdict = _f_check(path, write, True, None, "write" if write else "read")
        return verdict if type(verdict) is REFUSAL else None

    def patcher(module):
        found = RESOLVE(module, attr, True)
        if found is None or IS_FACE(found[2]):
            return
        owner, name, original = found
        PLACE(owner, name, MAKE_FACE(MAKE_DOOR(original, judge, name=name), original))

    return patcher


def _f_make_shm_patcher(attr, prepare, prefix="/dev/shm/"):
    """Patch ``_posixshmem.shm_open(path, flags, mode)`` / ``shm_unlink(path)``: POSIX shared
    memory objects are the files ``/dev/shm/NAME`` (glibc), judged as such; named
    semaphores (``_multiprocessing.sem_unlink``) are ``/dev/shm/sem.NAME``."""
    unlink = attr in ("shm_unlink", "sem_unlink")

    def judge(args, kwargs):
        name = args[0] if args else kwargs.get("path")
        if type(name) is not str:
            return None  # the original refuses it
        if unlink:
            write = True
        else:
            flags = args[1] if len(args) > 1 else kwargs.get("flags", 0)
            write = type(flags) is not int or bool(flags & SHM_WRITE_FLAGS)
        verdict = _f_check(prefix + name.lstrip("/"), write, True, None, "read")
        return verdict if type(verdict) is REFUSAL else None

    def patcher(module):
        found = RESOLVE(module, attr, True)
        if found is None or IS_FACE(found[2]):
            return
        owner, name, original = found
        PLACE(owner, name, MAKE_FACE(MAKE_DOOR(original, judge, name=name), original, prepare))

    return patcher


def _f_sqlite_uri(text):
    """What SQLite opens for the URI ``text`` (``file:...``), read as its
    ``sqlite3ParseUri`` does: ``(path, write)``, or None for an in-memory database.

    Percent escapes are decoded in the path, the names and the values (``file:%2Fetc``
    is ``/etc``; a decoded character separates nothing; ``%00`` drops the rest of that
    part), ``#`` ends the URI, an option with an empty name is skipped, and the *last*
    ``mode`` wins (``?mode=ro&mode=rw`` opens for writing, ``?mode=memory&mode=rw`` a
    file). An authority other than empty or ``localhost``, or an unknown mode, makes
    SQLite refuse the URI; both are judged anyway (as a write), which refuses nothing
    SQLite would open."""
    hexdigits = b"0123456789abcdefABCDEF"  # of a %HH escape (SQLite's sqlite3Isxdigit)
    raw = str.encode(text, FSENC, "surrogateescape")
    n = len(raw)
    i = 5
    if raw[5:7] == b"//":  # file://AUTHORITY/path
        j = raw.find(b"/", 7)
        i = n if j < 0 else j
    parts = []  # the path, then name, value, name, value...
    cur = bytearray()
    state = 0  # 0: the path, 1: a name, 2: a value
    while i < n:
        c = raw[i]
        if c == 0x23:  # '#': the fragment, ignored
            break
        i += 1
        if c == 0x25 and i + 1 < n and raw[i] in hexdigits and raw[i + 1] in hexdigits:
            octet = int(raw[i : i + 2], 16)
            i += 2
            if octet == 0:
                while i < n:
                    c = raw[i]
                    if c == 0x23 or (state == 0 and c == 0x3F):
                        break
                    if (state == 1 and c in (0x3D, 0x26)) or (state == 2 and c == 0x26):
                        break
                    i += 1
                continue
            cur.append(octet)
            continue
        if state == 1 and (c == 0x26 or c == 0x3D):
            if not cur:  # an empty name: the whole option is skipped
                while i < n and raw[i] != 0x23 and raw[i - 1] != 0x26:
                    i += 1
                continue
            parts.append(bytes(cur))
            cur = bytearray()
            if c == 0x26:
                parts.append(b"")  # a name without a value
            else:
                state = 2
            continue
        if (state == 0 and c == 0x3F) or (state == 2 and c == 0x26):
            parts.append(bytes(cur))
            cur = bytearray()
            state = 1
            continue
        cur.append(c)
    if state != 1 or cur:
        parts.append(bytes(cur))
    if state == 1 and cur:
        parts.append(b"")
    mode = None
    for k in range(1, len(parts) - 1, 2):
        if parts[k] == b"mode":
            mode = parts[k + 1]
    if mode == b"memory":
        return None
    path = parts[0]
    if path == b":memory:":
        return None
    return bytes.decode(path, FSENC, "surrogateescape"), mode != b"ro"


def _f_sqlite_refusal(text, literal):
    """None when SQLite may open the database name ``text``, else a Refusal. A ``file:``
    name is judged as the URI SQLite reads (:func:`_f_sqlite_uri`) and, when ``literal``,
    also as a file name (the library reads it so when URIs are off)."""
    if text in ("", ":memory:"):
        return None  # a private temporary database
    uri = text.startswith("file:")
    if literal or not uri:
        verdict = _f_check(text, True, True, None, "write")
        if type(verdict) is REFUSAL:
            return verdict
    if not uri:
        return None
    target = _f_sqlite_uri(text)
    if target is None:
        return None
    path, write = target
    if path in ("", ":memory:"):
        return None
    verdict = _f_check(path, write, True, None, "write" if write else "read")
    return verdict if type(verdict) is REFUSAL else None


def _f_sqlite_literal(text):
    """Whether a ``file:`` name read as a file name could be opened at all: a name with a
    ``/`` needs its first component (``file:...``, in the working directory) to exist."""
    head, slash, _ = text.partition("/")
    if not slash:
        return True
    try:
        LSTAT(head)
    except OSError:
        return False
    return True


def _f_sqlite_judge_attached(text):
    """None when SQLite may open ``text`` for ``ATTACH`` / ``VACUUM INTO``, else a Refusal.
    Both readings of a ``file:`` name are judged (a URI when the connection takes URIs, a
    file name otherwise): the authorizer cannot tell which the library will use."""
    return _f_sqlite_refusal(text, True)


def _f_sqlite_read_only(args, kwargs):
    """The judge of ``sqlite3.connect``'s door: a database file under a read-only exposure
    is opened read-only -- as the URI ``file:ABSOLUTE?mode=ro&immutable=1`` -- so that
    SQLite itself answers a write (``OperationalError: attempt to write a readonly
    database``) or a missing file (``unable to open database file``), as CPython does
    under a read-only file system. ``immutable``: ``mode=ro`` alone still creates a WAL
    database's ``-wal`` and ``-shm`` files (SQLite opens them read-write, falling back to
    read-only only when the kernel refuses, which under ``subprocess`` it does not); an
    immutable database is read with no side file at all (a ``-wal`` not yet checkpointed
    is not read). A ``factory`` of the program's gets the URI too (and ``uri=True``),
    when the database it is given is an exact str/bytes (a path object reaches it as
    given, and is judged as a write when it reaches ``Connection.__init__``); a name
    that is a URI is the program's own, judged as SQLite reads it (the audit hook)."""
    database = args[0] if args else kwargs.get("database")
    if type(database) is not str and type(database) is not bytes:
        return None
    text = _f_text(database)
    if text in ("", ":memory:") or text.startswith("file:") or "\0" in text:
        return None
    if type(_f_check(text, True, True, None, "write")) is not REFUSAL:
        return None  # writable (or refused in the event for another reason)
    if type(_f_check(text, False, True, None, "read")) is REFUSAL:
        return None  # not exposed at all: the audit hook refuses it
    absolute = _f_abs(text, None)
    if absolute is None:
        return None
    quoted = absolute.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    if quoted.startswith("//"):
        quoted = "/%2f" + quoted[2:]  # not an authority
    uri = "file:" + quoted + "?mode=ro&immutable=1"
    if args:
        args = (uri, *args[1:])
    else:
        kwargs = {**kwargs, "database": uri}
    if len(args) > 7:
        args = (*args[:7], True, *args[8:])
    else:
        kwargs = {**kwargs, "uri": True}
    return args, kwargs


def _f_sqlite_denies(args):
    """The guard's verdict on one call of SQLite's authorizer (CPython passes ``action,
    arg1, arg2, database, source``): ``ATTACH`` (which ``VACUUM INTO`` also uses) opens a
    file with C code of its own, judged here as a file access; anything else is SQLite's
    business. Only exact ints and strs are compared (the program may call an authorizer
    face itself, with objects of its own): anything else denies."""
    if len(args) != 5 or type(args[0]) is not int:
        return True
    if args[0] != 24:
        return False
    arg1 = args[1]
    if type(arg1) is not str:
        return True
    return _f_sqlite_judge_attached(arg1) is not None


def _f_sqlite_authorizer(action, arg1, arg2, database, source):
    """SQLite's authorizer of a connection the guard arms through CPython's
    ``set_authorizer`` (when SQLite's own hook could not be set): 0 = SQLITE_OK,
    1 = SQLITE_DENY."""
    return 1 if _f_sqlite_denies((action, arg1, arg2, database, source)) else 0


def _f_sqlite_first(args, kwargs):
    """The judge of the door in front of an authorizer the program sets: the guard's
    check runs first, and a denial (SQLITE_DENY) is the answer without the program's
    callback; otherwise the callback decides, called by the door as CPython would call
    it (its return value and its exceptions reach CPython's own handling)."""
    if kwargs or _f_sqlite_denies(args):
        return NEW_VALUE(1)
    return None


def _f_sqlite_ok(action, arg1, arg2, database, source):
    """What the guard's own authorizer answers once its check let a call through."""
    return 0


def _f_sqlite_composed(callback):
    """The callable CPython stores as a connection's authorizer: a face whose door runs
    the guard's check (:func:`_f_sqlite_first`), then ``callback`` (the program's, or
    :func:`_f_sqlite_ok` when the program has none). The face takes the name of a
    program's function, so CPython's report of an exception it raised
    (``sys.unraisablehook``'s ``object``) reads as its own."""
    if callback is None:
        face = ST["sqlite_guard_only"]
        if face is None:
            door = MAKE_DOOR(_f_sqlite_ok, _f_sqlite_first, name="authorizer")
            face = ST["sqlite_guard_only"] = MAKE_FACE(door)
        return face
    door = MAKE_DOOR(callback, _f_sqlite_first, name="authorizer")
    try:
        return MAKE_FACE(door, callback)
    except ImportError:  # a function whose __kwdefaults__ holds a name that is no str
        return MAKE_FACE(door)


def _f_sqlite_set_authorizer(args, kwargs):
    """The judge of ``Connection.set_authorizer``'s door: the callable the program gives
    (None included) is replaced by one that runs the guard's check first
    (:func:`_f_sqlite_composed`): the program's authorizer composes with the guard's,
    ``set_authorizer(None)`` removes the program's alone. A call CPython itself refuses
    (another number of arguments, another keyword) goes on as given."""
    if len(args) == 2 and not kwargs:
        return (args[0], _f_sqlite_composed(args[1])), kwargs
    if len(args) == 1 and len(kwargs) == 1 and "authorizer_callback" in kwargs:
        return args, {"authorizer_callback": _f_sqlite_composed(kwargs["authorizer_callback"])}
    return None


def _f_sqlite_guard_type(cls):
    """Put the door of ``set_authorizer`` (:func:`_f_sqlite_set_authorizer`) in the
    namespace of ``cls``, a ``Connection`` type of a ``_sqlite3`` just executed (every
    copy has types of its own). The type is immutable: its dictionary is written
    directly and the type told (``PyType_Modified``, :func:`.sqlite_c.type_tools`),
    before any program code saw the module. Subclasses, factories
    and ``Connection.__dict__`` then all give the door; its original is held here only.
    False when that cannot be done (the import is then refused)."""
    if type(cls) is not type:
        return False
    proxy = TYPE_DICT(cls)
    original = proxy.get("set_authorizer")
    if IS_FACE(original):
        return True
    if type(original) is not METHOD_DESCRIPTOR:
        return False
    tools = ST["type_tools"]
    if tools is None:
        return False
    ns = tools["namespace"](cls)
    if type(ns) is not dict or dict.get(ns, "set_authorizer") is not original:
        return False
    door = MAKE_DOOR(original, _f_sqlite_set_authorizer, name="set_authorizer")
    ST["sqlite_kept"].append(original)
    face = MAKE_FACE(door, original, ST["prepare_set_authorizer"])
    dict.__setitem__(ns, "set_authorizer", face)
    tools["modified"](cls)
    return True


def _f_patch_sqlite(module):
    """``sqlite3.connect`` (and ``_sqlite3``'s): the audit hook judges the path in the event
    it raises; the face turns path objects into exact str/bytes first, and its door hands
    the new connection SQLite's authorizer (``_f_sqlite_authorizer``), set with the C
    type's own ``set_authorizer`` taken as ``_sqlite3`` loads. ``Connection.set_authorizer``
    gets a door (:func:`_f_sqlite_guard_type`): a program's authorizer composes with the
    guard's, never replaces it."""
    found = RESOLVE(module, "Connection")
    if found is not None and type(found[2]) is type:
        method = TYPE_DICT(found[2]).get("set_authorizer")
        if ST["set_authorizer"] is None and type(method) is METHOD_DESCRIPTOR:
            ST["set_authorizer"] = method
            ST["sqlite_base"] = found[2]
        if not _f_sqlite_guard_type(found[2]):
            raise ImportError("pysb: sqlite3.Connection.set_authorizer could not be guarded")
    found = RESOLVE(module, "connect")
    if found is not None and not IS_FACE(found[2]):
        door = MAKE_DOOR(found[2], _f_sqlite_read_only, _f_sqlite_connected, name="connect")
        ST["sqlite_doors"].add(DOOR_CODE_ID(door))
        PLACE(module, "connect", MAKE_FACE(door, found[2], ST["prepare_database"]))


def _f_sqlite_connected(connection, args, kwargs):
    """The door's post: the connection ``sqlite3.connect`` made judges ``ATTACH`` (set
    here only when SQLite's own hook is not: then it was set as the library opened it)."""
    if ST["sqlite_c"] is not None:
        return connection
    set_authorizer = ST["set_authorizer"]
    if set_authorizer is None:
        return REFUSE(ImportError("pysb: sqlite3.Connection.set_authorizer was not found"))
    try:
        set_authorizer(connection, _f_sqlite_authorizer)
    except Exception as e:  # not a connection (a factory of the program's): refused
        return REFUSE(e)
    return connection


def _f_sqlite_c_authorizer(data, action, arg1, arg2, database, trigger):
    """The authorizer SQLite's hook sets (a C callback, ``sqlite_c.py``): ``ATTACH`` judged
    as :func:`_f_sqlite_authorizer` does. It never raises: an exception in a C callback is
    printed and answered 0 (allowed) by ctypes, so anything unexpected denies."""
    try:
        if action != 24:
            return 0
        if type(arg1) is not bytes:
            return 1
        text = bytes.decode(arg1, FSENC, "surrogateescape")
        return 0 if _f_sqlite_judge_attached(text) is None else 1
    except BaseException:
        return 1


def _f_sqlite_c_entry(db, message, api):
    """SQLite's auto-extension entry point, run inside every ``sqlite3_open_v2``: the new
    connection gets the authorizer before the handle reaches anyone. Only an open this
    thread's ``sqlite3.connect`` event announced is armed (anything else -- a call of
    this function with a made-up pointer -- is refused: a nonzero answer fails the
    open); the ``sqlite3.connect/handle`` event then checks it was."""
    try:
        pending = ST["sqlite_pending"]
        me = GET_IDENT()
        c = ST["sqlite_c"]
        if c is None or pending.get(me) is not False:
            return 1
        if c["set_authorizer"](db, c["authorizer"], None) != 0:
            return 1
        pending[me] = True
        return 0
    except BaseException:
        return 1


def _f_sqlite_plain_class(connection):
    """True when no class of ``connection`` but ``sqlite3.Connection`` defines ``__new__``:
    a ``__new__`` of the program's could hand the object to code that uses it between its
    initialisation and the authorizer. Class namespaces are read with C calls, keys checked
    to be exact ``str`` before any comparison."""
    base = ST["sqlite_base"]
    for cls in TYPE_MRO(type(connection)):
        if cls is base or cls is object:
            continue
        for key in list(TYPE_DICT(cls)):
            if type(key) is not str or key == "__new__":
                return False
    return True


def _f_caller_is_sqlite_door():
    """The frame that called ``Connection.__init__`` (raising ``sqlite3.connect/handle``)
    is the door of a ``connect`` face, which gives the connection its authorizer."""
    f = GETFRAME(4)  # this function, the handler, the dispatcher, the audit hook's door
    return f is not None and IS_DOOR_FRAME(f) and id(FRAME_CODE(f)) in ST["sqlite_doors"]


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
    _f_unlock()
    if ST["learning"] or not ST["ignore"]:
        return result
    base = _f_dir_of(args, kwargs)
    exp = _f_exposure(base) if base else None
    if type(result) is not SCANDIR_ITERATOR:
        return result
    # C calls only (the iterator's and DirEntry's own methods, taken at install): both are
    # classes the program can write methods and properties into. (Their deallocation calls
    # no finalizer: dropping an entry runs nothing of the program's.)
    entries = []
    try:
        while True:
            try:
                entry = SCANDIR_NEXT(result)
            except StopIteration:
                break
            name = DIRENTRY_NAME(entry)
            text = name if type(name) is str else bytes.decode(name, FSENC, "surrogateescape")
            if exp is None or _f_ignored(base.rstrip("/") + "/" + text, exp) is None:
                entries.append(entry)
    finally:
        SCANDIR_CLOSE(result)
    out = NEW(SCANDIR_RESULT)
    SET_ENTRIES(out, iter(entries))
    return out


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
        dir_fd = kwargs.get("dir_fd")
        absolute = _f_abs(ltext, dir_fd if type(dir_fd) is int else None)
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


def _f_post_chdir(result, args, kwargs):
    """After the working directory changed: judging ``chdir``'s own (relative) path read the
    old one into ``ST["cwd"]``, which the next relative path must not be judged against."""
    ST["cwd"] = None
    ST["cwd_gen"] += 1
    ST["cache"].clear()
    _f_unlock()
    return result


def _f_has_opener(args, kwargs):
    return len(args) > 7 or kwargs.get("opener") is not None


def _f_post_open(result, args, kwargs):
    """``open()`` of a rebased path: the file object keeps the name the program gave (its
    ``name``, its ``repr``). Set on the raw ``FileIO`` by C calls only."""
    pairs = ST["rebased"].pop(GET_IDENT(), None)
    if not pairs:
        return result
    new, old = pairs[0]
    raw = result
    text, buffered, fileio, buffer_of, raw_of = OPEN_TYPES
    if type(raw) is text:
        raw = buffer_of(raw)
    for kind in buffered:
        if type(raw) is kind:
            raw = raw_of[kind](raw)
            break
    if type(raw) is fileio and args and args[0] is new:
        OBJECT_SETATTR(raw, "name", old)
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
    """The Python frame that called the audited C function is the door of ``os.open``'s
    face (which already judged it, with its dir_fd)."""
    f = GETFRAME(4)  # this function, the handler, the dispatcher, the audit hook's door
    return f is not None and IS_DOOR_FRAME(f) and id(FRAME_CODE(f)) in ST["open_doors"]


def _f_caller_is_chdir_door():
    f = GETFRAME(4)  # this function, the handler, the dispatcher, the audit hook's door
    return f is not None and IS_DOOR_FRAME(f) and id(FRAME_CODE(f)) in ST["chdir_doors"]


def _f_chdir_with_threads():
    """The refusal, while other threads run, of a ``chdir`` that did not come through the
    faces of ``os.chdir`` / ``os.fchdir`` (the C function reached some other way): only
    those hold the lock a relative ``scandir`` takes and keep the working directory the
    guard knows in step."""
    RECORDER.deny("files", "os.chdir", "chdir", "")
    return PermissionError(
        "pysb: a change of directory while other threads run goes through os.chdir or "
        "os.fchdir in the sandbox; this one reached the C function another way"
    )


def _f_make_handlers(events):
    """Audit-hook handlers: each returns the exception to raise, or None."""

    def on_open(args):
        path = args[0]
        flags = args[2] if len(args) > 2 else 0
        kind = type(path)
        if kind is not str and kind is not bytes:
            if kind is int or kind is bool or path is None:
                return None  # a descriptor (FileIO(True) on 3.13: C warns itself)
            return TypeError("pysb: open() of a path that is not str or bytes")
        write = type(flags) is int and bool(flags & WRITE_FLAGS)
        verdict = _f_check(path, write, True, None, "read")
        if verdict is None or type(verdict) is not REFUSAL:
            return None
        if args[1] is None and _f_caller_is_door():
            return None  # os.open through its face: judged there, with its dir_fd
        return EXC_OF(verdict)

    def on_sqlite(args):
        database = args[0]
        kind = type(database)
        if kind is not str and kind is not bytes:
            # sqlite3.connect's face passes an exact str/bytes on; anything else would be
            # converted by C code after this judgment (a __fspath__ of the program's)
            return TypeError("pysb: sqlite3.connect of a database that is not str or bytes")
        text = _f_text(database)
        verdict = _f_sqlite_refusal(text, text.startswith("file:") and _f_sqlite_literal(text))
        if verdict is not None:
            return EXC_OF(verdict)
        if ST["sqlite_c"] is not None:
            ST["sqlite_pending"][GET_IDENT()] = False  # the open that follows is armed
        return None

    def make(event, pairs, write, follow, kind):
        def handler(args):
            if event in ("os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link"):
                ST["cache"].clear()
            if event == "os.chdir":
                if THREAD_COUNT() and not ST["learning"] and not _f_caller_is_chdir_door():
                    return _f_chdir_with_threads()
                ST["cwd"] = None
                ST["cache"].clear()
            for index, dfd_index in pairs:
                if index >= len(args):
                    continue
                path = args[index]
                if type(path) is not str and type(path) is not bytes:
                    if type(path) is int or type(path) is bool or path is None:
                        continue  # a descriptor
                    return TypeError(f"pysb: {event} of a path that is not str or bytes")
                dir_fd = (
                    args[dfd_index] if dfd_index is not None and dfd_index < len(args) else None
                )
                # (the events carry dir_fd as C converted it: an int, never a bool)
                if dir_fd is not None and type(dir_fd) is not int:
                    dir_fd = None
                follows = (True, False) if follow is None else (follow,)
                for f in follows:
                    verdict = _f_check(path, write, f, dir_fd, kind)
                    if verdict is not None and type(verdict) is REFUSAL:
                        return EXC_OF(verdict)
            if event == "os.symlink" and len(args) > 1:
                dir_fd = args[2] if len(args) > 2 and type(args[2]) is int else None
                verdict = _f_check_symlink_target(args[0], args[1], dir_fd)
                if verdict is not None:
                    return EXC_OF(verdict)
            return None

        return handler

    def on_sqlite_handle(args):
        """A connection SQLite's hook did not arm (or, without the hook, one made other
        than by ``sqlite3.connect`` itself -- ``sqlite3.Connection(path)``, a factory with
        an ``__init__`` of its own --) would get no authorizer: refused."""
        if ST["sqlite_c"] is not None:
            if ST["sqlite_pending"].pop(GET_IDENT(), None) is True:
                return None
            return PermissionError(
                "pysb: this SQLite connection was opened without the file guard's authorizer"
            )
        if _f_caller_is_sqlite_door() and _f_sqlite_plain_class(args[0] if args else None):
            return None
        return PermissionError(
            "pysb: SQLite connections are made with sqlite3.connect() in the sandbox (its "
            "authorizer judges ATTACH); a Connection built or re-initialised otherwise, or "
            "a factory with its own __init__ or __new__, is refused"
        )

    def on_syslog(args):
        """``syslog.openlog`` / ``syslog.syslog`` write to the host's log socket with C code
        of their own: judged as a write of ``/dev/log``."""
        verdict = _f_check("/dev/log", True, True, None, "write")
        return EXC_OF(verdict) if type(verdict) is REFUSAL else None

    handlers = {
        "syslog.openlog": on_syslog,
        "syslog.syslog": on_syslog,
        "open": on_open,
        "sqlite3.connect": on_sqlite,
        "sqlite3.connect/handle": on_sqlite_handle,
    }
    for event, (pairs, write, follow, kind) in events.items():
        handlers[event] = make(event, pairs, write, follow, kind)
    return handlers
