"""The import guard: the program imports only the top-level names its profile lists.

Three doors, one decision:

- a meta-path finder kept at the head of ``sys.meta_path`` (the audit hook puts it back
  before every import the interpreter starts, and rebuilds it if its class was tampered
  with);
- ``builtins.__import__`` / ``importlib.__import__``, which also see imports of modules
  already in ``sys.modules``;
- ``importlib.import_module``.

At install every module the framework loaded is taken out of ``sys.modules`` (kept aside,
not re-executed), except what the interpreter itself needs; importing one of them later goes
through the finder, which puts the very same module back when the import is allowed.

The decision is on the top-level name (a submodule follows its package): allowed when the
profile lists it (or says ``"*"``), when it is the program's own script or ``-m`` module,
when the interpreter imports it on demand (``encodings``, ``_strptime``...), or when the
import is made by library code (``json`` importing ``re``) rather than by the program --
the profile governs what the *program* imports; the calls a module makes are the job of the
files, network and api guards. Refusals raise :class:`~pysb_core.errors.ImportDeniedError`
(a ``ModuleNotFoundError``) naming the line to add, ``imports: [requests]``.

Modules patched by other guards when they load (``subprocess``, ``ctypes``, ``pickle``...)
are patched here, as the loader finishes executing them (see :func:`on_import`).
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
    from pysb_core.policy import Policy
    from pysb_core.provider import Provider

GUARD = "imports"

#: Imported by the interpreter itself, on demand, on behalf of any code: always allowed.
ALWAYS = frozenset(
    {
        "sys",
        "builtins",
        "__main__",
        "encodings",
        "codecs",
        "_codecs",
        "io",
        "_io",
        "abc",
        "_abc",
        "warnings",
        "_warnings",
        "_strptime",
        "copyreg",
        "linecache",
        "tokenize",
        "traceback",
        "_collections_abc",
        "_sitebuiltins",
    }
)

#: Never taken out of ``sys.modules`` (the import system itself needs them there).
KEEP = frozenset(
    {
        "_frozen_importlib",
        "_frozen_importlib_external",
        "_imp",
        "_thread",
        "_weakref",
        "marshal",
        "posix",
        "zipimport",
        "_signal",
        "time",
    }
)

#: Shown under "dangerous" in learned profiles: they reach around the other guards.
DANGEROUS = frozenset(
    {
        "ctypes",
        "_ctypes",
        "cffi",
        "subprocess",
        "_posixsubprocess",
        "multiprocessing",
        "pty",
        "pickle",
        "_pickle",
        "marshal",
        "shelve",
        "importlib",
        "imp",
        "pkgutil",
        "runpy",
        "code",
        "codeop",
        "pdb",
        "bdb",
        "inspect",
        "gc",
        "faulthandler",
        "mmap",
        "webbrowser",
        "os",
        "posix",
        "_interpreters",
        "_xxsubinterpreters",
        "sys",
    }
)

# Program modules named before install (the bootstrap calls allow_program_module first).
_pending_program: list[str] = []
_runtime: list[Any] = []  # [(allow_face, arm_face, on_import_face)] once installed


def allow_program_module(name: str) -> None:
    """Always allow the program's own script or ``-m`` module (its top-level name).

    Accepted until the guards are armed, right before the program starts; after that the
    call is refused, so the program cannot widen its own imports.
    """
    top = str(name).partition(".")[0]
    if _runtime:
        _runtime[0][0](top)
    else:
        _pending_program.append(top)


def on_import(module: str, patcher: Callable[[Any], None]) -> None:
    """Run ``patcher(module_object)`` when ``module`` is loaded (now if already loaded).

    Other guards register the patches of modules the program may import later. Accepted
    until the guards are armed.
    """
    if not _runtime:
        raise RuntimeError("pysb: the import guard is not installed")
    _runtime[0][2](module, patcher)


def visit_modules(visitor: Callable[[Any], None]) -> None:
    """Call ``visitor(module)`` for every loaded module, including those set aside.

    Guards use it to replace references to originals that modules captured before the
    patches (``from os import stat``). Accepted until the guards are armed.
    """
    if not _runtime:
        for module in list(sys.modules.values()):
            visitor(module)
        return
    _runtime[0][3](visitor)


def ensure_installed(policy: Policy, recorder: Recorder) -> None:
    """Install the import guard now if it is not yet (other families need it first)."""
    install(policy, recorder)


# ---------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------


@hookimpl
def pysb_child_install(policy: Policy, recorder: Recorder) -> None:
    """Install the finder and the ``__import__`` checks; take framework modules aside."""
    install(policy, recorder)


@hookimpl
def pysb_child_arm(policy: Policy, recorder: Recorder) -> None:
    """Point captured originals at the faces (one pass for every guard), then close the list
    of program modules and the audit hook's handler table."""
    if _runtime:
        from pysb_guards._patch import sweep_pending

        sweep_pending(visit_modules)
        _runtime[0][1]()
        _seal.audit_registry()[1]()


@hookimpl
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """Imports are a Python-layer rule only."""
    if policy.imports is None:
        report.add(
            "imports: (none: only the interpreter's own modules)",
            "<default>",
            ["python"],
            family=GUARD,
        )
        return
    text = "imports: " + ("*" if "*" in policy.imports else ", ".join(policy.imports))
    report.add(text, policy.imports_source or "<profile>", ["python"], family=GUARD)


@hookimpl
def pysb_learned(records: Sequence[Event], profile: Any) -> None:
    """Render learned imports, grouped: standard library, third party, dangerous."""
    for group, name in learned_imports(records):
        profile.add("imports", None, name, group=group)


def learned_imports(records: Sequence[Event]) -> list[tuple[str, str]]:
    """``(group, top-level name)`` for every import the program made, sorted by group."""
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    names = sorted(
        {
            r.target.partition(".")[0]
            for r in records
            if r.guard == GUARD and r.action == "learn" and r.target.isidentifier() is not False
        }
    )
    out = []
    for name in names:
        if not name.replace("_", "a").isalnum() or name in ALWAYS:
            continue
        if name in DANGEROUS:
            group = "dangerous"
        elif name in stdlib:
            group = "standard library"
        else:
            group = "third party"
        out.append((group, name))
    order = {"standard library": 0, "third party": 1, "dangerous": 2}
    return sorted(out, key=lambda gn: (order[gn[0]], gn[1]))


# ---------------------------------------------------------------------------------------
# Install
# ---------------------------------------------------------------------------------------


def install(policy: Policy, recorder: Recorder) -> None:
    if _runtime:
        return
    import _frozen_importlib
    import _frozen_importlib_external
    import _imp
    import builtins
    import types

    from pysb_core.errors import ImportDeniedError
    from pysb_guards._where import is_library_file, library_prefixes

    imports = policy.imports
    star = imports is not None and "*" in imports
    allowed = set(ALWAYS) | {n.partition(".")[0] for n in (imports or ()) if n != "*"}
    program = set(_pending_program)
    del _pending_program[:]

    add_handler, _close = _seal.audit_registry()
    face_codes = tuple(
        _seal.make_face(_seal.make_door(len, _seal._allow_all), None, p).__code__
        for p in (None, _seal._allow_all)
    )
    mark = _seal.sealed_mark()
    ns = _seal.seal_group(
        [fn for name, fn in globals().items() if name.startswith("_e_") and callable(fn)],
        STATE={
            "allowed": allowed,
            "program": program,
            "star": star,
            "learning": bool(recorder.learning),
            "armed": False,
            "stash": {},
            "patchers": {},
            "created": {},
            "finder": None,
            "finder_cls": None,
            "find_face": None,
            "learned": set(),
            "roots": (),
        },
        RECORDER=recorder,
        DENIED=ImportDeniedError,
        PREFIXES=library_prefixes(),
        IS_LIBRARY=is_library_file,
        GETFRAME=sys._getframe,
        DOOR_NS=_seal.DOOR_NS,
        REFUSAL=_seal.Refusal,
        SYS=sys,
        MAKE_FACE=_seal.make_face,
        MAKE_DOOR=_seal.make_door,
        ALLOW=_seal._allow_all,
        CLEAN_TB=_seal.clean_traceback,
        IS_FACE=_seal.is_face,
        FACE_CODES=face_codes,
        BOOT_NS=(_frozen_importlib.__dict__, _frozen_importlib_external.__dict__),
        MARK=mark,
        NEVER=frozenset({"pysb_guards"}),
        NAMESPACE=types.SimpleNamespace,
        MODULESPEC=_frozen_importlib.ModuleSpec,
        REAL_IMPORT=builtins.__import__,
        ALWAYS=ALWAYS,
        KEEP=KEEP,
        IMP={
            k: getattr(_imp, k)
            for k in ("create_builtin", "create_dynamic", "exec_builtin", "exec_dynamic")
        },
    )
    state = ns["STATE"]

    state["find_face"] = ns["_e_face"](ns["_e_find_spec"])
    ns["_e_restore_finder"]()

    # __import__, importlib.__import__ and importlib.import_module see imports of modules
    # already in sys.modules. With `imports: "*"` there is nothing for them to refuse (the
    # guards' own modules are kept out of sys.modules, so the finder still refuses those):
    # no patch, no cost.
    if not star:
        import_face = _seal.guard(builtins.__import__, ns["_e_judge_import"])
        builtins.__import__ = import_face
        state["import_face"] = import_face
        ns["_e_on_import"]("importlib", ns["_e_patch_importlib"])

    # Fresh instances of C modules come only from these four functions of _imp.
    for name in ("create_builtin", "create_dynamic"):
        setattr(
            _imp,
            name,
            _seal.make_face(
                _seal.make_door(ns["_e_create"], _seal._allow_all, name=name),
                getattr(_imp, name),
                _prepare_create if name == "create_builtin" else _prepare_create_dynamic,
            ),
        )
    for name in ("exec_builtin", "exec_dynamic"):
        setattr(
            _imp,
            name,
            _seal.make_face(
                _seal.make_door(
                    ns["_e_exec_ext_" + name.split("_")[1]], _seal._allow_all, name=name
                ),
                getattr(_imp, name),
            ),
        )

    # Take framework modules aside (they come back, unchanged, when an import allows it).
    ns["_e_evict"]()
    for name in KEEP | ALWAYS:
        if name in sys.modules:
            state["created"][id(sys.modules[name])] = name

    add_handler("import", ns["_e_audit_import"])
    add_handler("exec", ns["_e_audit_exec"])
    _runtime.append(
        (
            _seal.guard(ns["_e_allow_program"], _seal._allow_all),
            _seal.guard(ns["_e_arm"], _seal._allow_all),
            _seal.guard(ns["_e_on_import"], _seal._allow_all),
            _seal.guard(ns["_e_visit"], _seal._allow_all),
        )
    )


def _text(value: Any) -> str | None:
    return str.__str__(value) if issubclass(type(value), str) else None


def _prepare_create(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Read the spec once, here: the judge and the C function see the same exact strings."""
    spec = args[0] if args else kwargs.get("spec")
    return ("builtin", _text(getattr(spec, "name", None)), None, *args[1:]), {}


def _prepare_create_dynamic(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    spec = args[0] if args else kwargs.get("spec")
    origin = _text(getattr(spec, "origin", None))
    return ("dynamic", _text(getattr(spec, "name", None)), origin, *args[1:]), {}


# ---------------------------------------------------------------------------------------
# The sealed engine. These functions run with private globals (see _seal.seal_group):
# STATE, RECORDER, DENIED... are names of that namespace, not of this module. None of
# them raises on purpose: a refusal is returned (a Refusal) and raised by a face.
# ---------------------------------------------------------------------------------------

STATE: dict[str, Any] = None  # type: ignore[assignment]  # sealed
RECORDER: Any = None  # type: ignore[assignment]  # sealed
DENIED: Any = None  # type: ignore[assignment]  # sealed
PREFIXES: tuple[str, ...] = None  # type: ignore[assignment]  # sealed
IS_LIBRARY: Any = None  # type: ignore[assignment]  # sealed
GETFRAME: Any = None  # type: ignore[assignment]  # sealed
DOOR_NS: Any = None  # type: ignore[assignment]  # sealed
REFUSAL: Any = None  # type: ignore[assignment]  # sealed
SYS: Any = None  # type: ignore[assignment]  # sealed
MAKE_FACE: Any = None  # type: ignore[assignment]  # sealed
MAKE_DOOR: Any = None  # type: ignore[assignment]  # sealed
CLEAN_TB: Any = None  # type: ignore[assignment]  # sealed
ALLOW: Any = None  # type: ignore[assignment]  # sealed
IS_FACE: Any = None  # type: ignore[assignment]  # sealed
FACE_CODES: Any = None  # type: ignore[assignment]  # sealed
BOOT_NS: Any = None  # type: ignore[assignment]  # sealed
MARK: Any = None  # type: ignore[assignment]  # sealed
NEVER: Any = None  # type: ignore[assignment]  # sealed
NAMESPACE: Any = None  # type: ignore[assignment]  # sealed
MODULESPEC: Any = None  # type: ignore[assignment]  # sealed
REAL_IMPORT: Any = None  # type: ignore[assignment]  # sealed
IMP: Any = None  # type: ignore[assignment]  # sealed


def _e_face(fn):
    """A face for an engine function: its exceptions come out without engine frames."""

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BaseException as e:
            return REFUSAL(e, CLEAN_TB(e.__traceback__, _e_private))

    return MAKE_FACE(MAKE_DOOR(run, ALLOW, name=fn.__name__))


def _e_private(frame):
    g = frame.f_globals
    return g is DOOR_NS or dict.get(g, "__pysb_sealed__") is MARK


def _e_top(name):
    return name.partition(".")[0]


def _e_allowed(top):
    if top in STATE["program"]:
        return True
    if top in NEVER:
        return False
    return STATE["star"] or top in STATE["allowed"]


def _e_from_library():
    """True when the nearest frame that is neither the import system nor pysb's own is
    library code (a module importing on its own behalf), False for the program."""
    f = GETFRAME(1)
    while f is not None:
        g = f.f_globals
        if g is DOOR_NS or dict.get(g, "__pysb_sealed__") is MARK or g in BOOT_NS:
            f = f.f_back
            continue
        code = f.f_code
        if code in FACE_CODES:
            f = f.f_back
            continue
        return IS_LIBRARY(code.co_filename, PREFIXES)
    return True


def _e_refusal(name):
    top = _e_top(name)
    rule = f"imports: [{top}]"
    exc = DENIED(
        f"import of '{name}' refused by the sandbox: add `{rule}` to the profile",
        target=name,
        suggested_rule=rule,
    )
    exc.name = name
    exc.msg = str(exc)
    RECORDER.deny("imports", name, "import", rule)
    return REFUSAL(exc)


def _e_decide(name):
    """None when the import may go on, else a Refusal."""
    top = _e_top(name)
    if _e_allowed(top):
        return None
    if _e_from_library():
        return None
    if STATE["learning"]:
        if top not in STATE["learned"] and top.isidentifier():
            STATE["learned"].add(top)
            RECORDER.learn("imports", top, "import", f"imports: [{top}]")
        return None
    return _e_refusal(name)


def _e_resolve(name, globals_, level):
    """Absolute name of a relative import, as importlib computes it (None if unknown)."""
    if type(globals_) is not dict:
        return None
    package = dict.get(globals_, "__package__")
    if type(package) is not str or not package:
        modname = dict.get(globals_, "__name__")
        if type(modname) is not str:
            return None
        is_pkg = dict.get(globals_, "__path__") is not None
        package = modname if is_pkg else modname.rpartition(".")[0]
    bits = package.rsplit(".", level - 1)
    if len(bits) < level:
        return None
    return f"{bits[0]}.{name}" if name else bits[0]


def _e_judge_import(args, kwargs):
    """Judge of ``__import__(name, globals, locals, fromlist, level)``.

    Only C ``str`` methods are called on the name (a subclass cannot run code here).
    """
    name = args[0] if args else kwargs.get("name")
    kind = type(name)
    if kind is not str and not issubclass(kind, str):
        return None  # the original raises its own TypeError
    level = args[4] if len(args) > 4 else kwargs.get("level", 0)
    if not level:
        top = str.partition(name, ".")[0]
        state = STATE
        if (state["star"] and top not in NEVER) or top in state["allowed"]:
            return None
        return _e_decide(str.__str__(name))
    if type(level) is not int:
        return None
    name = _e_resolve(str.__str__(name), args[1] if len(args) > 1 else kwargs.get("globals"), level)
    if name is None:
        return None
    return _e_decide(name)


def _e_judge_import_module(args, kwargs):
    name = args[0] if args else kwargs.get("name")
    kind = type(name)
    if kind is not str and not issubclass(kind, str):
        return None
    name = str.__str__(name)
    if name.startswith("."):
        package = args[1] if len(args) > 1 else kwargs.get("package")
        if type(package) is not str and not issubclass(type(package), str):
            return None
        package = str.__str__(package)
        level = len(name) - len(name.lstrip("."))
        bits = package.rsplit(".", level - 1)
        name = bits[0] + ("." + name[level:] if name[level:] else "")
    else:
        top = name.partition(".")[0]
        state = STATE
        if (state["star"] and top not in NEVER) or top in state["allowed"]:
            return None
    return _e_decide(name)


def _e_find_spec(name, path=None, target=None):
    """The guard finder: refuse, put a set-aside module back, or wrap a loader."""
    if type(name) is not str:
        return None
    verdict = _e_decide(name)
    if verdict is not None:
        return verdict
    stash = STATE["stash"]
    if name in stash:
        return MODULESPEC(name, _e_reinsert_loader(name, stash[name]))
    if name in STATE["patchers"]:
        for finder in list(SYS.meta_path):
            if finder is STATE["finder"]:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                loader = spec.loader
                if loader is not None and hasattr(loader, "exec_module"):
                    spec.loader = _e_patching_loader(loader, name)
                return spec
    return None


def _e_reinsert_loader(name, module):
    """A loader without exec_module: importlib then takes ``sys.modules[name]`` as is and
    keeps the module's own ``__spec__`` and ``__loader__``."""

    def load_module(fullname):
        SYS.modules[name] = module
        return module

    cls = type(
        "ReinsertLoader", (), {"__slots__": (), "load_module": staticmethod(_e_face(load_module))}
    )
    return cls()


def _e_patching_loader(loader, name):
    """Wrap a loader so that the patches registered for ``name`` run after its code."""

    def create_module(self, spec):
        create = getattr(loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module):
        loader.exec_module(module)
        _e_run_patchers(name, module)

    def get_attribute(self, attr):
        return getattr(loader, attr)

    cls = type(
        "PatchingLoader",
        (),
        {
            "__slots__": (),
            "create_module": _e_face(create_module),
            "exec_module": _e_face(exec_module),
            "__getattr__": _e_face(get_attribute),
        },
    )
    return cls()


def _e_run_patchers(name, module):
    for patcher in STATE["patchers"].get(name, ()):
        patcher(module)


def _e_on_import(name, patcher):
    if STATE["armed"]:
        return REFUSAL(PermissionError("pysb: patches are registered before user code only"))
    STATE["patchers"].setdefault(name, []).append(patcher)
    module = SYS.modules.get(name) or STATE["stash"].get(name)
    if module is not None:
        patcher(module)
    return None


def _e_patch_importlib(module):
    face = STATE["import_face"]
    if getattr(module, "__import__", None) is not None and module.__import__ is not face:
        module.__import__ = face
    im = getattr(module, "import_module", None)
    if im is not None and not IS_FACE(im):
        door = MAKE_DOOR(im, _e_judge_import_module, name="import_module")
        module.import_module = MAKE_FACE(door, im)


def _e_create(kind, name, origin, *rest):
    """``_imp.create_builtin`` / ``create_dynamic``: no second instance of a loaded C
    module (it would come with unpatched functions), and the import decision."""
    if type(name) is not str:
        return REFUSAL(TypeError("pysb: a module spec needs a str name"))
    for module in (SYS.modules.get(name), STATE["stash"].get(name)):
        if module is not None and id(module) in STATE["created"]:
            return REFUSAL(
                DENIED(
                    f"a second instance of the C module '{name}' refused by the sandbox "
                    "(it would come without the guards' patches)",
                    target=name,
                )
            )
    verdict = _e_decide(name)
    if verdict is not None:
        return verdict
    spec = NAMESPACE(name=name, origin=origin)
    if kind == "builtin":
        module = IMP["create_builtin"](spec)
    else:
        module = IMP["create_dynamic"](spec, *rest)
    STATE["created"][id(module)] = name
    STATE.setdefault("pending", {})[id(module)] = (name, module)
    return module


def _e_exec_ext(kind, module):
    key = id(module)
    pending = STATE.setdefault("pending", {})
    entry = pending.pop(key, None)
    result = IMP["exec_" + kind](module)
    if entry is not None:
        _e_run_patchers(entry[0], module)
    elif key not in STATE["created"]:
        return REFUSAL(DENIED("pysb: executing a C module the sandbox did not create"))
    return result


def _e_exec_ext_builtin(module):
    return _e_exec_ext("builtin", module)


def _e_exec_ext_dynamic(module):
    return _e_exec_ext("dynamic", module)


def _e_visit(visitor):
    if STATE["armed"]:
        return REFUSAL(PermissionError("pysb: modules are visited before user code only"))
    seen = set()
    for module in [*SYS.modules.values(), *STATE["stash"].values()]:
        if id(module) not in seen:
            seen.add(id(module))
            visitor(module)
    return None


def _e_allow_program(top):
    if STATE["armed"]:
        return REFUSAL(PermissionError("pysb: the program modules are fixed before it starts"))
    STATE["program"].add(top)
    return None


def _e_evict():
    """Set aside every module but the interpreter's own (see KEEP and ALWAYS)."""
    stash = STATE["stash"]
    modules = SYS.modules
    for name in list(modules):
        if _e_top(name) in ALWAYS or name in KEEP:
            continue
        parent = modules.get(name.rpartition(".")[0]) if "." in name else None
        if parent is not None and not hasattr(parent, "__path__"):
            continue  # os.path: importlib finds it only in sys.modules ("os is not a package")
        stash[name] = modules.pop(name)


def _e_arm():
    STATE["armed"] = True
    # Modules the other families imported while installing are set aside once more: the
    # program finds in sys.modules only what the interpreter keeps there.
    _e_evict()


def _e_restore_finder():
    """Put the guard finder first in sys.meta_path (rebuilt if it was tampered with)."""
    mp = SYS.meta_path
    if type(mp) is not list:
        mp = []
        SYS.meta_path = mp
    finder, cls = STATE["finder"], STATE["finder_cls"]
    face = STATE["find_face"]
    intact = False
    if finder is not None and type(finder) is cls:
        entry = type.__getattribute__(cls, "__dict__").get("find_spec")
        intact = (
            type(entry) is staticmethod and entry.__func__ is face and cls.__mro__[1:] == (object,)
        )
    if not intact:
        cls = type(
            "GuardFinder",
            (),
            {"__slots__": (), "find_spec": staticmethod(face), "__module__": "pysb_guards"},
        )
        finder = cls()
        STATE["finder"], STATE["finder_cls"] = finder, cls
    if mp and mp[0] is finder:
        return
    mp[:] = [f for f in mp if f is not finder]
    mp.insert(0, finder)


def _e_audit_import(args):
    """``import`` audit event: raised before the interpreter imports a module."""
    _e_restore_finder()
    return None


def _e_module_of_file(filename):
    """Top-level module name of a source file below a sys.path entry (None if none)."""
    best = ""
    for entry in SYS.path:
        if type(entry) is not str or not entry:
            continue
        root = entry.rstrip("/") + "/"
        if filename.startswith(root) and len(root) > len(best):
            best = root
    if not best:
        return None
    first = filename[len(best) :].split("/", 1)[0]
    top = first.split(".", 1)[0]
    return top if top.isidentifier() else None


def _e_audit_exec(args):
    """``exec`` audit event: a module's code about to run in a module namespace.

    Loaders call ``exec(code, module.__dict__)``; whoever obtained the loader (the finder,
    importlib._bootstrap, a hand-made spec), the module's file names its package.
    """
    code = args[0]
    if getattr(code, "co_name", None) != "<module>":
        return
    filename = code.co_filename
    if type(filename) is not str or filename.startswith("<"):
        return
    top = _e_module_of_file(filename)
    if top is None:
        return
    verdict = _e_decide(top)
    return None if verdict is None else verdict.exc
