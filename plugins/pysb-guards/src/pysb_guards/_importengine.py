"""The import guard's decision engine (sealed: see ``_seal.seal_group``).

These functions never run with this module's globals: :func:`pysb_guards.imports.install`
re-creates every ``_e_*`` function in one private namespace that also holds the names
declared below (``STATE``, ``RECORDER``, ``SYS``...). None of them raises on purpose: a
refusal is returned (a ``Refusal``) and raised by a face.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
MAKE_GATE: Any = None  # type: ignore[assignment]  # sealed
GCD_IMPORT: Any = None  # type: ignore[assignment]  # sealed
BOOTSTRAP: Any = None  # type: ignore[assignment]  # sealed
FUNCTION: type = None  # type: ignore[assignment]  # sealed
ALLOW: Any = None  # type: ignore[assignment]  # sealed
IS_FACE: Any = None  # type: ignore[assignment]  # sealed
FACE_CODES: Any = None  # type: ignore[assignment]  # sealed
BOOT_NS: Any = None  # type: ignore[assignment]  # sealed
MARK: Any = None  # type: ignore[assignment]  # sealed
NEVER: Any = None  # type: ignore[assignment]  # sealed
NAMESPACE: Any = None  # type: ignore[assignment]  # sealed
MODULESPEC: Any = None  # type: ignore[assignment]  # sealed
MODULES: dict[str, Any] = None  # type: ignore[assignment]  # sealed
ALWAYS: frozenset[str] = None  # type: ignore[assignment]  # sealed
KEEP: frozenset[str] = None  # type: ignore[assignment]  # sealed
IMPORT_NAME: int = None  # type: ignore[assignment]  # sealed
EXTENDED_ARG: int = None  # type: ignore[assignment]  # sealed
INTERNAL: frozenset[tuple[str, str]] = None  # type: ignore[assignment]  # sealed


def _e_top(name):
    return name.partition(".")[0]


def _e_allowed(top):
    if top in NEVER:
        return False
    if top in STATE["program"]:
        return True
    return STATE["star"] or top in STATE["allowed"]


def _e_importer():
    """The frame of the code that asked for the import: the nearest frame that is neither
    the import system nor pysb's own (None when no Python code asked: atexit, C callbacks)."""
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
        return f
    return None


def _e_own_top(filename):
    """Top-level package of a library file (below the longest library prefix)."""
    if filename.startswith("<frozen "):
        return filename[8:-1].partition(".")[0]
    best = ""
    for prefix in PREFIXES:
        if filename.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    if not best:
        return None
    head = best[:-1].rpartition("/")[2]
    if head.startswith("pysb_"):
        return head  # pysb's own prefixes are its package directories
    return filename[len(best) :].partition("/")[0].partition(".")[0]


def _e_written(code, at):
    """The name an ``IMPORT_NAME`` at offset ``at`` of ``code`` names (None otherwise)."""
    ops = code.co_code
    if at < 0 or at + 1 >= len(ops) or ops[at] != IMPORT_NAME:
        return None
    arg = ops[at + 1]
    shift = 8
    while at >= 2 and ops[at - 2] == EXTENDED_ARG:
        at -= 2
        arg |= ops[at + 1] << shift
        shift += 8
    names = code.co_names
    return names[arg] if arg < len(names) else None


def _e_library_own(name, top, loaded_ok, relative):
    """True when library code imports ``name`` on its own behalf, False when the import is
    the program's (to be judged).

    Library code's ``import`` *statement* names a constant (the ``IMPORT_NAME`` under way in
    its frame): its own business. An import made by a *call* -- ``__import__``,
    ``import_module``, C code -- takes its name as data, which may be the program's (a
    ``Thread`` whose target is ``__import__``, ``pkgutil.resolve_name('csv:reader')``, a
    pickle naming a module): judged as the program's, unless it names the calling library's
    own package, a module already in ``sys.modules`` (``loaded_ok``: nothing runs, nothing
    is put back), or the caller is one of the interpreter's internal importers (INTERNAL).
    A relative import follows the importing module's ``__package__``, which the program
    can rewrite: it must stay in the package the library file belongs to.
    """
    f = _e_importer()
    if f is None:
        return False
    code = f.f_code
    filename = code.co_filename
    if type(filename) is not str or not IS_LIBRARY(filename, PREFIXES):
        return False
    if _e_own_top(filename) == top:
        return True
    written = _e_written(code, f.f_lasti)
    if written is not None and not relative and written.partition(".")[0] == top:
        return True
    if loaded_ok and name in MODULES:
        return True
    return (filename, code.co_name) in INTERNAL


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


def _e_decide(name, loaded_ok=False, relative=False):
    """None when the import may go on, else a Refusal (see ``_e_library_own`` for the
    flags)."""
    top = _e_top(name)
    if _e_allowed(top):
        return None
    if _e_library_own(name, top, loaded_ok, relative):
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
        return _e_decide(str.__str__(name), True)
    if type(level) is not int:
        return None
    name = _e_resolve(str.__str__(name), args[1] if len(args) > 1 else kwargs.get("globals"), level)
    if name is None:
        return None
    return _e_decide(name, True, True)


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
    return _e_decide(name, True)


def _e_find_action(name):
    """What the guard finder does for ``name``: refuse (a Refusal), put a set-aside
    module back (``("stash", module)``), have its loader patched (``("patch", None)``), or
    nothing (None). Pure decision: the finder's own code (plain, in imports.py) calls the
    other finders, which may be the program's."""
    kind = type(name)
    if kind is not str and not issubclass(kind, str):
        return None
    name = str.__str__(name)
    verdict = _e_decide(name)
    if verdict is not None:
        return verdict
    module = STATE["stash"].get(name)
    if module is not None:
        return ("stash", module)
    if name in STATE["patchers"]:
        return ("patch", None)
    return None


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
    global FACE_CODES
    face = STATE["import_face"]
    if getattr(module, "__import__", None) is not None and module.__import__ is not face:
        module.__import__ = face
    im = getattr(module, "import_module", None)
    if im is not None and not IS_FACE(im):
        door = MAKE_DOOR(im, _e_judge_import_module, name="import_module")
        if _e_is_standard_import_module(im):
            # Its frame (below the door, for a relative name) is the import system's: the
            # importer is whoever called it.
            FACE_CODES = (*FACE_CODES, im.__code__)
            gate = MAKE_GATE("import_module", GCD_IMPORT, door, STATE["fast"])
            module.import_module = MAKE_FACE(gate, im, None, "import_module")
        else:
            module.import_module = MAKE_FACE(door, im)


def _e_is_standard_import_module(im):
    """True when ``im`` is the standard ``importlib.import_module``: for an absolute name it
    calls ``importlib._bootstrap._gcd_import(name, package, 0)``, which its gate may then call
    itself. Anything else (replaced before the guards) keeps the plain door."""
    if type(im) is not FUNCTION or GCD_IMPORT is None:
        return False
    code = im.__code__
    return (
        dict.get(im.__globals__, "_bootstrap") is BOOTSTRAP
        and code.co_varnames[:2] == ("name", "package")
        and code.co_argcount == 2
        and "_gcd_import" in code.co_names
    )


def _e_judge_create(args, kwargs):
    """``_imp.create_builtin`` / ``create_dynamic``: the import decision, and no second
    instance of a loaded C module (it would come with unpatched functions). The face
    handed us a private namespace holding the spec's exact name and origin."""
    spec = args[0] if args else None
    if type(spec) is not NAMESPACE:
        return REFUSAL(TypeError("pysb: module specs reach _imp through the guard's face"))
    name = spec.name
    if type(name) is not str:
        return REFUSAL(TypeError("pysb: a module spec needs a str name"))
    for module in (MODULES.get(name), STATE["stash"].get(name)):
        if module is not None and id(module) in STATE["created"]:
            return REFUSAL(
                DENIED(
                    f"a second instance of the C module '{name}' refused by the sandbox "
                    "(it would come without the guards' patches)",
                    target=name,
                )
            )
    return _e_decide(name)


def _e_post_create(module, args, kwargs):
    name = args[0].name
    STATE["created"][id(module)] = name
    STATE["pending"][id(module)] = name
    return module


def _e_judge_exec(args, kwargs):
    module = args[0] if args else None
    key = id(module)
    if key not in STATE["pending"] and key not in STATE["created"]:
        return REFUSAL(DENIED("pysb: executing a C module the sandbox did not create"))
    return None


def _e_post_exec(result, args, kwargs):
    module = args[0]
    name = STATE["pending"].pop(id(module), None)
    if name is not None:
        _e_run_patchers(name, module)
    return result


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
    if top and top not in NEVER:
        STATE["fast"].add(top)
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
    """Top-level module name of a source file (None if none).

    A library file belongs to the package below its library prefix (fixed at install). Any
    other file is named from the longest ``sys.path`` entry holding it, except that a
    package's ``__init__`` is never a top-level module of its own directory: a program run
    as a directory or a zip has that directory on ``sys.path``, and its package may also be
    imported from the parent.
    """
    if IS_LIBRARY(filename, PREFIXES):
        top = _e_own_top(filename)
        if top:
            return top if top.isidentifier() else None
    best = ""
    for entry in SYS.path:
        if type(entry) is not str or not entry:
            continue
        root = entry.rstrip("/") + "/"
        if (
            filename.startswith(root)
            and len(root) > len(best)
            and not filename[len(root) :].startswith("__init__.")
        ):
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
