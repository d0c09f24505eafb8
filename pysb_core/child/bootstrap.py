"""The sandboxed interpreter's first code: install the guards, then run the program.

Started as ``python [CPython options] -c "<stub>" FD`` where FD is an inherited file
descriptor holding the JSON payload (policy, program, guard modules, provider set-ups).
The policy never travels in argv or the environment, both of which /proc shows.

Order matters:

1. read the payload and close its fd;
2. import the guard modules and call their ``pysb_child_install`` (import, file, network
   guards enforce from here on);
3. run the provider's child set-ups (landlock restricts this process here);
4. apply resource limits;
5. call ``pysb_child_arm`` (the API guard), last, right before user code;
6. run the program as CPython would: ``__main__``, ``sys.argv``, ``sys.path[0]``,
   exit statuses, tracebacks without pysb frames.

Only the standard library modules already loaded by the interpreter (plus json) are used
here, so the sandbox imports little and starts fast.

Why one module: it is the sandboxed interpreter's first code, imported by the ``-c`` stub before
any guard: every extra module would be one more import at each start and one more file that must
be trusted before the guards exist. The numbered steps above are one ordered procedure, and
:func:`main` is easier to check for order when its helpers sit beside it.
"""

from __future__ import annotations

import _signal  # the C module: `signal` would import enum (~3 ms) at every start
import _thread
import gc  # built in, and loaded already (pysb_core.linux.quickexit)
import os
import sys

from pysb_core._lazy import import_module  # importlib's own function, not its package
from pysb_core.child import ending  # bound now, before the guards: the program's exit

_HERE = os.path.dirname(os.path.abspath(__file__))
# The program is compiled and run with the interpreter's own functions, bound before any
# guard patches the builtins: the framework's own exec is not the program's.
_COMPILE = compile


def _interpreter_exec():
    """The interpreter's own ``exec``, kept in a closure: the guards' sweep points module
    globals holding an original at its face, and a face's door frame below the program
    would make every stack walk of the program (``traceback.print_stack()``,
    ``inspect.stack()``, ``warnings``' stack levels) read a door's unreadable code. (The
    program reaching this closure gains nothing: ``exec`` called from its own frames is
    judged by the audit hook's backstop.)"""
    original = exec

    def run(code, namespace) -> None:
        original(code, namespace)

    # Given a source string (``-c``), exec compiles it with the __future__ flags of the code
    # calling it, run's: it must carry none of this module's (``annotations``).
    run.__code__ = run.__code__.replace(co_flags=run.__code__.co_flags & ~_FUTURE_FLAGS)
    return run


#: The code flags of the ``__future__`` imports (CPython's ``PyCF_MASK``).
_FUTURE_FLAGS = 0x1FE0000


_EXEC = _interpreter_exec()

# Bound before any guard: the collector is paused while the guards are set up, then resumed.
_GC_DISABLE, _GC_ENABLE, _GC_ISENABLED = gc.disable, gc.enable, gc.isenabled
_GC_FREEZE, _GC_UNFREEZE, _GC_FROZEN = gc.freeze, gc.unfreeze, gc.get_freeze_count


def _pause_gc() -> bool:
    """Stop the cyclic collector while pysb sets the sandbox up; True when it is to be
    resumed (:func:`_resume_gc`).

    Importing the guards and building their faces and doors makes some 30,000 objects that
    all live as long as the program: the collector's young generations went over them about
    15 times before the program ran (~1.2 ms of every start) and found nothing to free.
    Paused only when the interpreter keeps nothing in the permanent generation (3.12 keeps
    its static tuples there): the resume moves the whole of it."""
    if not _GC_ISENABLED() or _GC_FROZEN():
        return False
    _GC_DISABLE()
    return True


def _resume_gc(paused: bool) -> None:
    """Resume the collector before the program runs. What the set-up made goes to the
    oldest generation without a collection (``freeze`` then ``unfreeze``: two list moves),
    where the objects that survive the young collections end: a program's first young
    collection then looks at its own objects only. ``gc.get_objects()`` lists them as
    before, ``gc.get_freeze_count()`` is 0 again. (Enabled again without that move, the
    collector's first young collection went over all of them at once: the time saved
    was spent there.)"""
    if paused:
        _GC_FREEZE()
        _GC_UNFREEZE()
        _GC_ENABLE()


def _read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _use_the_wait(fd: int) -> bytes:
    """An interpreter started ahead waits on a pipe until pysb has checked the profile; the
    hint pysb may send first names what the payload will ask for (the guard modules and
    the import roots they come from, which the launch checks are the payload's own), so
    they are imported meanwhile instead of after it. Returns what was read that is not a
    hint (the payload's first bytes). A module that fails here is imported again, and
    fails, where the payload asks for it."""
    if os.fstat(fd).st_mode & 0o170000 != 0o010000:  # not a pipe: a memory file, read at once
        return b""
    from pysb_core.launch.bootargv import HINT_MAGIC

    head = _read_exactly(fd, len(HINT_MAGIC))
    if head != HINT_MAGIC:
        return head
    import marshal

    size = int.from_bytes(_read_exactly(fd, 4), "little")
    hint = marshal.loads(_read_exactly(fd, size))
    for entry in hint.get("sys_path", ()):
        if entry not in sys.path:
            sys.path.append(entry)
    if hint.get("guards"):
        for name in ("pysb_core.childhooks", "pysb_core.events", "pysb_core.policy"):
            import_module(name)
        for name in hint["guards"]:
            try:
                import_module(name)
            except Exception:  # imported again (and reported) where the payload asks
                continue
    return b""


def _read_payload(fd: int, head: bytes = b"") -> dict:
    """The payload: ``marshal`` from the pipeline (built in: no import, fast), or JSON
    (hand-written payloads in tests and tools). ``head``: its first bytes, already read."""
    import marshal

    chunks = [head]
    offset = len(head)
    while True:
        try:
            chunk = os.pread(fd, 1 << 16, offset)
        except OSError:  # a pipe: plain reads
            chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    os.close(fd)
    data = b"".join(chunks)
    try:
        return marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        import json

        return json.loads(data)


def _fix_sys_path(program: dict) -> None:
    """Make ``sys.path[0]`` what CPython would have put there for the real program."""
    if not sys.flags.safe_path and "" in sys.path:
        sys.path.remove("")  # the bootstrap's own -c entry (the stub put its paths before it)
    if program.get("importer"):  # a directory or zip: there even with -P, as in CPython
        sys.path.insert(0, program["path0"])
        return
    if sys.flags.safe_path:
        return
    mode = program["mode"]
    if mode == "script":
        sys.path.insert(0, program["path0"])
    elif mode == "module":
        sys.path.insert(0, os.getcwd())
    elif mode in ("code", "stdin", "repl"):
        sys.path.insert(0, "")


def _program_modules(root: str) -> list[str]:
    """Top-level modules of a program run as a directory or a zip file (its sys.path[0]).

    They are the program's own: ``__main__`` imports its siblings as top-level names. Names
    of the standard library and of modules already loaded are left out: CPython would not
    take them from the program's directory either (a loaded module wins), and they must not
    become importable under the program's name. The directory's own name stays allowed.
    """
    import _imp

    suffixes = (".py", ".pyc", *_imp.extension_suffixes())
    if os.path.isdir(root):
        entries = []
        for entry in os.scandir(root):
            if entry.is_dir():
                entries.append(entry.name)
            elif entry.name.endswith(suffixes):
                entries.append(entry.name.partition(".")[0])
        entries.append(os.path.basename(os.path.normpath(root)))
    else:
        import zipfile

        with zipfile.ZipFile(root) as z:
            names = z.namelist()
        entries = [
            n.partition("/")[0] if "/" in n else n.partition(".")[0]
            for n in names
            if "/" in n or n.endswith((".py", ".pyc"))
        ]
    skip = set(getattr(sys, "stdlib_module_names", ())) | set(sys.modules)
    return sorted(
        {
            n
            for n in entries
            if n.isidentifier() and n not in skip and not n.startswith("pysb") and n != "__main__"
        }
    )


def _apply_limits(limits: dict) -> None:
    import resource

    def cap(which: int, value: int | None, slack: int = 0) -> None:
        if value is None:
            return
        _soft, hard = resource.getrlimit(which)
        new_hard = value + slack
        if hard != resource.RLIM_INFINITY:
            new_hard = min(new_hard, hard)
        resource.setrlimit(which, (min(value, new_hard), new_hard))

    cap(resource.RLIMIT_AS, limits.get("memory"))
    cap(resource.RLIMIT_NPROC, limits.get("processes"))
    cap(resource.RLIMIT_NOFILE, limits.get("open_files"))
    # soft < hard so the kernel sends SIGXCPU (exit 152) rather than SIGKILL at the limit.
    cap(resource.RLIMIT_CPU, limits.get("cpu_time"), slack=1)


#: Frames of pysb's own making that a program's traceback must not show: the code file
#: names of the guards' faces and doors (pysb_guards._seal.templates: FACE_FILE, DOOR_FILE).
_OWN_NAMES = ("<pysb guard (importlib._bootstrap)>", "<pysb-door (importlib._bootstrap)>")
_OWN_DIRS: list[str] = [_HERE]


def _is_own(tb) -> bool:
    try:
        name = tb.tb_frame.f_code.co_filename
    except Exception:  # the guards refuse to hand out their own frames
        return True
    return name in _OWN_NAMES or any(name.startswith(d) for d in _OWN_DIRS)


def _traceback_type() -> type:
    try:
        raise TypeError
    except TypeError as e:
        return type(e.__traceback__)


#: ``types.TracebackType`` (``types`` is not imported at start-up).
_TRACEBACK = _traceback_type()


def _user_traceback(tb):
    """The traceback without pysb's frames: the bootstrap at its head, and the guards'
    own steps wherever a guarded call stands in it (as CPython would show it unguarded).
    Anything but a traceback is returned as it is: the hooks it is handed to judge it
    (``sys.excepthook(1, '1', 1)`` prints CPython's TypeError)."""
    if type(tb) is not _TRACEBACK:
        return tb
    kept = []
    while tb is not None:
        if not _is_own(tb):
            kept.append(tb)
        tb = tb.tb_next
    try:
        for here, after in zip(kept, [*kept[1:], None], strict=True):
            here.tb_next = after
    except (TypeError, ValueError, AttributeError):
        pass
    return kept[0] if kept else None


def _clean_chain(exc: BaseException) -> None:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen or len(seen) > 100:
            continue
        seen.add(id(e))
        e.__traceback__ = _user_traceback(e.__traceback__)
        todo += [e.__cause__, e.__context__]


def _install_cleaning_hooks() -> None:
    """Before 3.13 the interpreter's own ``sys.excepthook`` and ``sys.unraisablehook`` print
    a traceback with C code, which reads no audited attribute: the guards' entries would
    stay in it (see ``_seal``'s splice). Here both are the C hooks behind a first step
    that drops pysb's entries; ``sys.__excepthook__`` is the same function, so a program
    asking whether someone replaced the hook gets CPython's answer."""
    if sys.version_info >= (3, 13) or sys.excepthook is not sys.__excepthook__:
        return
    show = sys.excepthook
    show_unraisable = sys.unraisablehook

    # Each takes its arguments as given and hands them to the C hook, which judges them
    # (a wrong count or type is CPython's own TypeError, message included).

    def excepthook(*args):
        if len(args) == 3:
            exc = args[1]
            if isinstance(exc, BaseException):
                _clean_chain(exc)
            args = (args[0], exc, _user_traceback(args[2]))
        return show(*args)

    def clean_record(args):
        """An unraisable's or a thread's record: its traceback and exception cleaned."""
        if len(args) == 1:
            _user_traceback(getattr(args[0], "exc_traceback", None))
            exc = getattr(args[0], "exc_value", None)
            if isinstance(exc, BaseException):
                _clean_chain(exc)

    def unraisablehook(*args):
        clean_record(args)
        return show_unraisable(*args)

    show_thread = _thread._excepthook

    def thread_excepthook(*args):
        clean_record(args)
        return show_thread(*args)

    hooks = ((excepthook, show), (unraisablehook, show_unraisable))
    for hook, original in (*hooks, (thread_excepthook, show_thread)):
        hook.__doc__ = original.__doc__
        hook.__name__ = hook.__qualname__ = original.__name__
        hook.__module__ = "sys"
    thread_excepthook.__module__ = "_thread"
    sys.excepthook = sys.__excepthook__ = excepthook
    sys.unraisablehook = sys.__unraisablehook__ = unraisablehook
    # threading takes its hook from _thread when it is imported (or already did)
    _thread._excepthook = thread_excepthook
    threading = sys.modules.get("threading")
    if threading is not None and threading.excepthook is show_thread:
        threading.excepthook = threading.__excepthook__ = thread_excepthook


def _die_like_cpython(exc: BaseException, memory_limit: str | None) -> None:
    """Report an uncaught exception exactly as the interpreter would, then exit."""
    _clean_chain(exc)
    tb = exc.__traceback__
    sys.excepthook(type(exc), exc, tb)
    if isinstance(exc, MemoryError) and memory_limit:
        sys.stderr.write(
            f"pysb: the program hit the memory limit: limits: memory: {memory_limit}\n"
        )
    sys.stderr.flush()
    if isinstance(exc, KeyboardInterrupt):
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGINT)
    ending.end(1)
    raise SystemExit(1)


def _note_armed(armed: dict[str, list[str]], guard, families) -> None:
    """Record what a guard says it armed: ``pysb_child_install`` / ``pysb_child_arm``
    return the family name(s) they put in force (None: nothing)."""
    if families is None:
        return
    if isinstance(families, str):
        families = (families,)
    name = getattr(guard, "__name__", "?")
    for family in families:
        modules = armed.setdefault(str(family), [])
        if name not in modules:
            modules.append(name)


def _require_armed(payload: dict, armed: dict[str, list[str]]) -> None:
    """Refuse to run the program (exit 125) unless every family the profile relies on
    the Python layer for was armed, each by one guard. Guards are trusted by what they
    did here, not by the name their entry point was registered under."""
    owners = payload.get("guard_owners", {})
    needed = payload.get("needed_families", {})
    problems = []
    for family, modules in sorted(armed.items()):
        if len(modules) > 1:
            who = " and ".join(f"{m} ({owners.get(m, '?')})" for m in modules)
            problems.append(f"guard family '{family}' was armed twice, by {who}")
    for family, dist in sorted(needed.items()):
        if family not in armed:
            problems.append(
                f"the Python guard for '{family}' ({dist}) was not armed in the sandbox: "
                "the profile's rules for it would be enforced by no one"
            )
    if payload.get("report_armed"):
        done = ", ".join(
            f"{f} ({owners.get(m[0], '?').partition('(')[2].rstrip(')')})"
            for f, m in sorted(armed.items())
        )
        sys.stderr.write(f"pysb: armed: {done or 'no Python guard'}\n")
    if problems:
        for line in problems:
            sys.stderr.write(f"pysb: error: {line}\n")
        sys.stderr.write("pysb: error: the program was not started\n")
        sys.stderr.flush()
        os._exit(125)


def _send_tmp_dirs(watch: dict) -> None:
    """Hand pysb's parent descriptors of the sandbox's private /tmp and /dev/shm (its tmp
    watch, ``pysb_core.launch.tmpwatch``; firejail sizes neither), then close the channel:
    this runs before the program, which never holds it."""
    import _socket  # the C module: socket.py would add enum and selectors to the child

    fds = []
    try:
        for path in watch["dirs"]:
            try:
                fds.append(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            except OSError:
                pass
        sock = _socket.socket(fileno=int(watch["fd"]))
        packed = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
        try:
            sock.sendmsg([b"tmp"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, packed)])
        finally:
            sock.close()
    finally:
        for fd in fds:
            os.close(fd)


def _run_program(program: dict, runpy) -> None:
    mode = program["mode"]
    sys.argv[:] = program["argv"]
    main_globals = sys.modules["__main__"].__dict__
    if mode == "module":
        _run_module_as_main(runpy, program["module"], alter_argv=True)
        return
    if mode == "script":
        if runpy is not None:  # a directory or a zip file with __main__.py: as CPython does
            _run_module_as_main(runpy, "__main__", alter_argv=False)
            return
        source = program["source"]
        main_globals["__file__"] = program["file"]
        main_globals["__cached__"] = None
        code = _COMPILE(source, program["file"], "exec", dont_inherit=True)
    elif mode == "code":
        # Compiled by exec, as ``python -c`` compiles it (``PyRun_String``, ``<string>``):
        # the builtin compile() builds the AST module's types on its first call, ~1 ms of
        # CPU that python -c never spends.
        code = program["code"]
    elif mode == "stdin":
        code = _COMPILE(sys.stdin.read(), "<stdin>", "exec", dont_inherit=True)
    else:  # pragma: no cover - guarded by the parent
        raise SystemExit(f"pysb: unknown program mode {mode!r}")
    _EXEC(code, main_globals)


def _run_module_as_main(runpy, mod_name: str, alter_argv: bool) -> None:
    """``runpy._run_module_as_main``, with the interpreter's own ``exec`` (bound before the
    guards): runpy's would be the guarded builtin, whose door frame would then sit below
    every frame of the program, where stack walks (``traceback.extract_stack``,
    ``warnings``' stack levels) cannot read it."""
    try:
        if alter_argv or mod_name != "__main__":  # -m
            mod_name, spec, code = runpy._get_module_details(mod_name, runpy._Error)
        else:  # a directory or a zip file
            mod_name, spec, code = runpy._get_main_module_details(runpy._Error)
    except runpy._Error as exc:
        sys.exit(f"{sys.executable}: {exc}")
    main_globals = sys.modules["__main__"].__dict__
    if alter_argv:
        sys.argv[0] = spec.origin
    main_globals.update(
        __name__="__main__",
        __file__=spec.origin,
        __cached__=spec.cached,
        __doc__=None,
        __loader__=spec.loader,
        __package__=spec.parent,
        __spec__=spec,
    )
    _EXEC(code, main_globals)


def _run_ipython(banner: str) -> bool:
    """IPython's prompt, as ``python -m IPython`` starts it, with the sandbox's line under
    its banner; False when it cannot start here (then Python's own prompt runs)."""
    try:
        import IPython  # judged by the import guard: IPython must be allowed
        from traitlets.config import Config
    except ImportError as exc:
        sys.stderr.write(f"pysb: IPython is not importable in the sandbox ({exc})\n")
        return False
    config = Config()
    config.TerminalInteractiveShell.banner2 = banner + "\n"
    try:
        IPython.start_ipython(argv=[], config=config)
    except Exception as exc:  # any failure: fall back to the plain prompt
        sys.stderr.write(
            f"pysb: IPython could not start in the sandbox ({type(exc).__name__}: {exc}); "
            "Python's own prompt follows\n"
        )
        return False
    return True


def _run_repl(program: dict, code) -> None:
    sys.argv[:] = [""]
    banner = program.get("banner", "")
    if program.get("ipython") and _run_ipython(banner):
        return
    sys.stderr.write(banner + "\n")

    class Console(code.InteractiveConsole):
        """CPython's console; a traceback it shows loses the guards' entries first (the
        console skips its own ``exec`` entry by position: the next is the guarded
        ``exec``'s face, which no audited read would otherwise have spliced out)."""

        def showtraceback(self) -> None:
            _user_traceback(sys.exc_info()[2])
            super().showtraceback()

        def runcode(self, code) -> None:
            # The interpreter's own exec, as for a script: no door frame under the typed
            # code (stack walks from it read every frame's code).
            try:
                _EXEC(code, self.locals)
            except SystemExit:
                raise
            except BaseException:
                self.showtraceback()

    console = Console(locals=sys.modules["__main__"].__dict__, filename="<stdin>")
    console.interact(banner="", exitmsg="")


def _restore_sys_path(original: list[str] | None) -> None:
    """Put back the interpreter's own ``sys.path`` order once pysb's modules are loaded:
    the stub put pysb's root first for them (``original`` is what it found). pysb's root,
    when the interpreter did not have it, stays first, the payload's roots after the rest."""
    if original is None:
        return
    core_root = os.path.dirname(os.path.dirname(_HERE))
    head = [] if core_root in original else [core_root]
    tail = [p for p in sys.path if p not in original and p not in head]
    sys.path[:] = [*head, *original, *tail]


def _dash_c_lines(source: str | None) -> None:
    """Show the program's ``-c`` code in tracebacks as ``python -c`` does, and pysb's never.

    From 3.13 the interpreter keeps the ``-c`` command's lines in ``linecache`` under
    ``<string>`` (so tracebacks of ``python -c`` show its source). The sandbox's interpreter
    is started with pysb's own ``-c`` stub, so those lines were the stub's: a traceback
    through any ``<string>`` frame (``exec("1/0")``) showed pysb's bootstrap line, and one of
    ``pysb run -c CODE`` none of CODE's. The entry is replaced by the program's code (``-c``)
    or dropped; before 3.13 there is no such entry and nothing changes."""
    linecache = sys.modules.get("linecache")
    cache = getattr(linecache, "cache", None)
    if not isinstance(cache, dict) or "<string>" not in cache:
        return
    if source is None:
        del cache["<string>"]
    else:
        text = source + "\n"  # as the interpreter keeps it
        lines = [line + "\n" for line in text.splitlines()]
        cache["<string>"] = (len(text), None, lines, "<string>")


def main(fd: str, original_path: list[str] | None = None) -> None:
    from pysb_core.remote.state import mark_in_sandbox

    paused = _pause_gc()
    mark_in_sandbox()  # @sandbox functions called here run directly (complete mode)
    payload = _read_payload(int(fd), _use_the_wait(int(fd)))
    program = payload["program"]
    _dash_c_lines(program["code"] if program["mode"] == "code" else None)
    if payload.get("tmp_watch"):
        _send_tmp_dirs(payload["tmp_watch"])
    for entry in payload.get("sys_path", ()):
        if entry not in sys.path:
            sys.path.append(entry)

    # As CPython does, the script is opened before anything runs (and before the guards,
    # so the program itself never needs a file rule to start).
    if program["mode"] == "script" and not os.path.isdir(program["path"]):
        try:
            with open(program["path"], "rb") as f:
                program["source"] = f.read()
        except OSError as e:
            sys.stderr.write(
                f"{sys.executable}: can't open file {os.path.abspath(program['path'])!r}: "
                f"[Errno {e.errno}] {e.strerror}\n"
            )
            raise SystemExit(2) from None
    if program["mode"] == "script":
        # Resolved now: once the file guard is installed, resolving the script's directory
        # would itself be an access the profile may not grant. A directory or a zip file
        # with __main__.py is itself sys.path[0], as CPython puts it (see _program_modules).
        path = program["path"]
        # The script's __file__ and code file name, as CPython (3.9+) makes them: the
        # working directory joined to a relative path, not normalised; argv[0] stays as given.
        program["file"] = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
        if "source" not in program or program["source"][:2] == b"PK":
            program["path0"] = program["file"]
            program["importer"] = True
        else:
            program["path0"] = os.path.dirname(os.path.realpath(path))

    # Framework modules the program's mode needs are imported now, before the guards
    # (the import guard evicts framework modules; references held here stay usable).
    entry_fn = runpy = code = None  # modules once imported; typed loosely on purpose
    mode = program["mode"]
    if mode == "entry":
        modname, _, fname = program["entry"].partition(":")
        entry_fn = getattr(import_module(modname), fname)
    elif mode == "repl":
        import code  # type: ignore[assignment]

        try:
            import readline  # noqa: F401 - line editing, as in CPython's own REPL
        except ImportError:
            pass
    elif (
        mode == "module"
        or (mode == "script" and "source" not in program)
        or (mode == "script" and program["source"][:2] == b"PK")
    ):
        import runpy  # type: ignore[assignment]

        program.pop("source", None)

    limits = payload["policy"].get("limits", {})
    if any(limits.get(k) is not None for k in ("memory", "processes", "open_files", "cpu_time")):
        _apply_limits(limits)
    memory_limit = payload.get("memory_text")

    guards: list = []
    armed: dict[str, list[str]] = {}  # family -> guard modules that armed it
    recorder = policy = None
    try:
        if payload.get("guards") or payload.get("child_setups"):
            from pysb_core.childhooks import call as call_child_hook
            from pysb_core.events import Recorder
            from pysb_core.policy import Policy

            policy = Policy.from_dict(payload["policy"])
            recorder = Recorder(payload.get("report_fd"), learning=policy.learn)
            # Import everything first: once installed, the import guard judges imports.
            guards = [import_module(m) for m in payload.get("guards", ())]
            _OWN_DIRS.extend(
                {os.path.dirname(g.__file__) for g in guards if getattr(g, "__file__", None)}
            )
            setups = [
                (getattr(import_module(s["module"]), s["function"]), s.get("args", {}))
                for s in payload.get("child_setups", ())
            ]
            if mode == "entry":  # partial mode: the modules defining sandboxed functions
                allowed_names = list(program.get("args", {}).get("program_modules", ()))
            elif program.get("importer"):
                allowed_names = _program_modules(program["path0"])
            else:
                allowed_names = [
                    program.get("module")
                    or (
                        os.path.splitext(os.path.basename(program["path"]))[0]
                        if mode == "script"
                        else None
                    )
                ]
            for g in guards:
                if hasattr(g, "allow_program_module"):
                    for allowed in allowed_names:
                        if allowed:
                            g.allow_program_module(allowed.partition(".")[0])
            for g in guards:
                install = getattr(g, "pysb_child_install", None)
                if install is not None:
                    _note_armed(armed, g, call_child_hook(install, policy, recorder))
            for fn, kwargs in setups:
                fn(**kwargs)
    except Exception as exc:  # fail closed: the program never runs half-guarded
        sys.stderr.write(
            f"pysb: error: sandbox set-up failed inside the sandbox: {type(exc).__name__}: {exc}\n"
        )
        sys.stderr.flush()
        os._exit(125)

    _restore_sys_path(original_path)
    _resume_gc(paused)  # before any code of the program's (partial mode's too)

    def arm() -> None:
        for g in guards:
            hook = getattr(g, "pysb_child_arm", None)
            if hook is not None:
                _note_armed(armed, g, call_child_hook(hook, policy, recorder))
        _require_armed(payload, armed)

    if entry_fn is not None:
        entry_fn(program.get("args", {}), arm)
        return

    _fix_sys_path(program)
    if guards:
        _install_cleaning_hooks()
    arm()
    try:
        if mode == "repl":
            _run_repl(program, code)
        else:
            _run_program(program, runpy)
    except SystemExit as exc:
        status = ending.status_of(exc)
        if status is None:
            raise  # a message to print, or a status the interpreter converts
    except BaseException as exc:
        _die_like_cpython(exc, memory_limit)
    else:
        status = 0
    # The exit as CPython's own, without the interpreter's finalization when nothing is
    # left for it (pysb_core.child.ending); else the normal exit, with the same status.
    ending.end(status)
    raise SystemExit(status)
