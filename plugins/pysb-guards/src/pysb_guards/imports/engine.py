"""The import guard's decision engine (sealed: see ``_seal.seal_group``).

These functions never run with this module's globals: :func:`pysb_guards.imports.guard.install`
re-creates every ``_e_*`` function in one private namespace that also holds the names
declared below (``STATE``, ``RECORDER``, ``SYS_DICT``...). None of them raises on purpose: a
refusal is returned (a ``Refusal``) and raised by a face.

Why one module: its ``_e_*`` functions are re-created together in one sealed namespace where
they call one another by name; one module is one namespace's source. Splitting it would add
modules whose globals must be copied and kept consistent with the seal.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATE: Any = None  # type: ignore[assignment]  # sealed
RECORDER: Any = None  # type: ignore[assignment]  # sealed
DENIED: Any = None  # type: ignore[assignment]  # sealed
IMPORT_DENIED: Any = None  # type: ignore[assignment]  # sealed
PREFIXES: Any = None  # type: ignore[assignment]  # sealed
IS_LIBRARY: Any = None  # type: ignore[assignment]  # sealed
GETFRAME: Any = None  # type: ignore[assignment]  # sealed
SYS_DICT: Any = None  # type: ignore[assignment]  # sealed
MAKE_FACE: Any = None  # type: ignore[assignment]  # sealed
MAKE_DOOR: Any = None  # type: ignore[assignment]  # sealed
MAKE_GATE: Any = None  # type: ignore[assignment]  # sealed
DEFER: Any = None  # type: ignore[assignment]  # sealed
REFUSE: Any = None  # type: ignore[assignment]  # sealed
EXC_OF: Any = None  # type: ignore[assignment]  # sealed
IS_GUARD_FRAME: Any = None  # type: ignore[assignment]  # sealed
FRAME_CODE: Any = None  # type: ignore[assignment]  # sealed
SEALED_BUILTINS: Any = None  # type: ignore[assignment]  # sealed
DICT_GET: Any = None  # type: ignore[assignment]  # sealed
CHECK_MODULE: Any = None  # type: ignore[assignment]  # sealed
RESOLVE: Any = None  # type: ignore[assignment]  # sealed
PLACE: Any = None  # type: ignore[assignment]  # sealed
GCD_IMPORT: Any = None  # type: ignore[assignment]  # sealed
BOOTSTRAP: Any = None  # type: ignore[assignment]  # sealed
BOOT0: Any = None  # type: ignore[assignment]  # sealed
BOOT1: Any = None  # type: ignore[assignment]  # sealed
FUNCTION: Any = None  # type: ignore[assignment]  # sealed
CODE: Any = None  # type: ignore[assignment]  # sealed
IS_FACE: Any = None  # type: ignore[assignment]  # sealed
TYPE_DICT: Any = None  # type: ignore[assignment]  # sealed
TYPE_MRO: Any = None  # type: ignore[assignment]  # sealed
IMPORT_CODES: Any = None  # type: ignore[assignment]  # sealed
NEVER: Any = None  # type: ignore[assignment]  # sealed
NAMESPACE: Any = None  # type: ignore[assignment]  # sealed
NS_DICT: Any = None  # type: ignore[assignment]  # sealed
MODULES: Any = None  # type: ignore[assignment]  # sealed
ALWAYS: Any = None  # type: ignore[assignment]  # sealed
KEEP: Any = None  # type: ignore[assignment]  # sealed
IMPORT_NAME: Any = None  # type: ignore[assignment]  # sealed
EXTENDED_ARG: Any = None  # type: ignore[assignment]  # sealed
INTERNAL: Any = None  # type: ignore[assignment]  # sealed
LSTAT: Any = None  # type: ignore[assignment]  # sealed
READLINK: Any = None  # type: ignore[assignment]  # sealed
GETCWD: Any = None  # type: ignore[assignment]  # sealed
EXTENSION_ROOTS: Any = None  # type: ignore[assignment]  # sealed
DYNLOAD: Any = None  # type: ignore[assignment]  # sealed
INTERPRETER_MODULES: Any = None  # type: ignore[assignment]  # sealed
EXPOSED: Any = None  # type: ignore[assignment]  # sealed
NEW_VALUE: Any = None  # type: ignore[assignment]  # sealed
MODULE_TYPE: Any = None  # type: ignore[assignment]  # sealed
BUILTIN: Any = None  # type: ignore[assignment]  # sealed


def _e_top(name):
    return name.partition(".")[0]


def _e_allowed(top):
    if top in NEVER:
        return False
    if top in STATE["program"]:
        return True
    return STATE["star"] or top in STATE["allowed"]


def _e_importer():
    """The frame of the code that asked for the import and its code: the nearest frame that
    is neither the import system nor pysb's own (None when no Python code asked: atexit, C
    callbacks). The guards' own frames are told by identity (``IS_GUARD_FRAME``), the import
    system's by the very dictionaries of its modules or the code of the guard's own
    functions."""
    f = GETFRAME(1)
    while f is not None:
        g = f.f_globals
        if g is BOOT0 or g is BOOT1 or f.f_builtins is SEALED_BUILTINS or IS_GUARD_FRAME(f):
            f = f.f_back
            continue
        code = FRAME_CODE(f)
        if id(code) in IMPORT_CODES:
            f = f.f_back
            continue
        return f, code
    return None, None


def _e_by_extension_init():
    """True when the import is asked by C code initialising an extension module: below the
    guard's own frames and the import system's, the first frame is a door of
    ``_imp.create_dynamic`` / ``exec_dynamic`` (or the builtin pair). The name is then the
    C code's own (``_sqlite3`` imports ``functools``), and the C code is a library file
    (``_e_judge_dynamic``). A Python frame of anyone's in between (a replaced
    ``builtins.__import__``) makes it an ordinary import. The door whose judge asks this (the
    create call being judged: the first frame above the sealed ones) does not count: that
    call is the import itself, made by whoever called it (``module_from_spec`` of a spec
    the program made by hand counted as an extension's own import)."""
    f = GETFRAME(2)
    doors = STATE["extension_doors"]
    first = True
    while f is not None:
        if f.f_builtins is SEALED_BUILTINS:
            f = f.f_back
            continue
        if IS_GUARD_FRAME(f):
            if id(FRAME_CODE(f)) in doors and not first:
                return True
            first = False
            f = f.f_back
            continue
        first = False
        g = f.f_globals
        if g is BOOT0 or g is BOOT1 or f.f_builtins is SEALED_BUILTINS:
            f = f.f_back
            continue
        if id(FRAME_CODE(f)) in IMPORT_CODES:
            f = f.f_back
            continue
        return False
    return False


def _e_loaded(name):
    """``sys.modules[name]`` (None if absent), comparing exact ``str`` keys only: the
    program may have put a key of its own there, whose ``__eq__`` a lookup would run."""
    for k, v in list(dict.items(MODULES)):
        if type(k) is str and k == name:
            return v
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
    name = names[arg] if arg < len(names) else None
    return name if type(name) is str else None


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
    can rewrite: it must stay in the package the library file belongs to. An import asked
    by an extension module's C initialisation is its own too (``_e_by_extension_init``,
    asked last: it is the rare case).
    """
    return _e_library_statement_own(name, top, loaded_ok, relative) or _e_by_extension_init()


def _e_library_statement_own(name, top, loaded_ok, relative):
    """``_e_library_own`` as the importing frame tells it."""
    f, code = _e_importer()
    if f is None:
        return False
    filename = code.co_filename
    if type(filename) is not str or not IS_LIBRARY(filename, PREFIXES):
        return False
    if _e_own_top(filename) == top:
        return True
    written = _e_written(code, f.f_lasti)
    if written is not None and not relative and written.partition(".")[0] == top:
        return True
    if loaded_ok:
        loaded = _e_loaded(name)
        if loaded is not None and id(loaded) not in STATE["shadow"]:
            return True
    function = code.co_name
    return type(function) is str and (filename, function) in INTERNAL


def _e_refusal(name):
    """The refusal of ``name``: an ImportDeniedError built outside sealed code."""
    rule = f"imports: [{_e_top(name)}]"
    RECORDER.deny("imports", name, "import", rule)
    return REFUSE(DEFER(IMPORT_DENIED, name, rule))


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
    """Absolute name of a relative import, as the import system computes it (None if
    unknown). ``globals_`` is the fresh dictionary the gate made (see ``_import_args`` in
    imports.py), or the program's own when that failed: then only when its keys are all
    exact ``str`` (the import system's own lookups could otherwise run the program's
    ``__eq__`` and read something else than this judge did)."""
    if type(globals_) is not dict:
        return None
    for k in list(globals_):
        if type(k) is not str:
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

    Only exact ``str`` and ``int`` values are judged: a ``str`` subclass is replaced by its
    exact value in the arguments the original receives (it could answer the import system
    otherwise than this judge), a level that is not an exact int is refused.
    """
    if kwargs or not args:
        return None  # the gate passes five positional arguments; the original complains
    name = args[0]
    kind = type(name)
    exact = kind is str
    if not exact:
        if not issubclass(kind, str):
            return None  # the original raises its own TypeError
        name = str.__str__(name)
    level = args[4] if len(args) > 4 else 0
    if type(level) is not int:
        return REFUSE(TypeError("pysb: the level of an import must be an int"))
    if level == 0:
        top = name.partition(".")[0]
        state = STATE
        if not ((state["star"] and top not in NEVER) or top in state["allowed"]):
            verdict = _e_decide(name, True)
            if verdict is not None:
                return verdict
    elif level > 0:
        absolute = _e_resolve(name, args[1] if len(args) > 1 else None, level)
        if absolute is not None:
            verdict = _e_decide(absolute, True, True)
            if verdict is not None:
                return verdict
    return None if exact else ((name, *args[1:]), {})


def _e_judge_import_module(args, kwargs):
    """Judge of ``import_module(name, package)``: exact values only, as above."""
    if kwargs or not args:
        return None
    name = args[0]
    package = args[1] if len(args) > 1 else None
    kind = type(name)
    exact = kind is str
    if not exact:
        if not issubclass(kind, str):
            return None
        name = str.__str__(name)
    if package is not None and type(package) is not str:
        if not issubclass(type(package), str):
            if name.startswith("."):
                return REFUSE(TypeError("pysb: a relative import needs a str package"))
            package = None
        else:
            package = str.__str__(package)
        exact = False
    if name.startswith("."):
        if package is None:
            return None  # the original raises its own TypeError
        level = len(name) - len(name.lstrip("."))
        bits = package.rsplit(".", level - 1)
        absolute = bits[0] + ("." + name[level:] if name[level:] else "")
    else:
        absolute = name
        top = name.partition(".")[0]
        state = STATE
        if (state["star"] and top not in NEVER) or top in state["allowed"]:
            return None if exact else ((name, package), {})
    verdict = _e_decide(absolute, True)
    if verdict is not None:
        return verdict
    return None if exact else ((name, package), {})


def _e_find_action(name):
    """What the guard's ``_find_spec`` does for ``name``: refuse (a Refusal), put a set-aside
    module back (``("stash", module)``), have its loader patched (``("patch", None)``), or
    nothing (None). Pure decision: ``_find_spec``'s own code (plain, in
    importlib_bootstrap.py) calls the finders, which may be the program's."""
    kind = type(name)
    if kind is not str:
        if not issubclass(kind, str):
            return None
        name = str.__str__(name)
    verdict = _e_decide(name)
    if verdict is not None:
        return verdict
    module = STATE["stash"].get(name)
    if module is not None:
        return ("stash", module)
    module = STATE["first"].get(name)
    if module is not None and _e_guarded_key(name):
        # such a module taken out of sys.modules by the program: a new instance is refused
        # (_e_judge_create), so an import hands the first one back
        return ("stash", module)
    if name in STATE["patchers"]:
        return ("patch", None)
    return None


def _e_run_patchers(name, module):
    """Run the patches of ``name`` on ``module`` (``_find_spec``'s loader, C module creation).
    Anyone holding the loader can call this: only a plain module whose namespace holds exact
    ``str`` keys is patched (ImportError otherwise: the import fails, closed)."""
    if type(name) is not str:
        return
    patchers = STATE["patchers"].get(name, ())
    if patchers:
        CHECK_MODULE(module)
    for patcher in patchers:
        patcher(module)


def _e_on_import(name, patcher):
    if STATE["armed"]:
        return REFUSE(PermissionError("pysb: patches are registered before user code only"))
    STATE["patchers"].setdefault(name, []).append(patcher)
    module = MODULES.get(name) or STATE["stash"].get(name)
    if module is not None:
        patcher(module)
    return None


def _e_patch_importlib(module):
    face = STATE["import_face"]
    found = RESOLVE(module, "__import__")
    if found is not None and found[2] is not face:
        PLACE(module, "__import__", face)
    found = RESOLVE(module, "import_module")
    if found is None or IS_FACE(found[2]):
        return
    im = found[2]
    door = MAKE_DOOR(im, _e_judge_import_module, name="import_module")
    if _e_is_standard_import_module(im):
        # Its frame (below the door, for a relative name) is the import system's: the
        # importer is whoever called it.
        code = im.__code__
        STATE["codes"].append(code)
        IMPORT_CODES.add(id(code))
        gate = MAKE_GATE("import_module", im, door, STATE["fast"])
        PLACE(module, "import_module", MAKE_FACE(gate, im, None, "import_module"))
    else:
        PLACE(module, "import_module", MAKE_FACE(door, im))


def _e_is_standard_import_module(im):
    """True when ``im`` is the standard ``importlib.import_module``, which calls
    ``importlib._bootstrap._gcd_import``: its gate then calls it for a listed name (the
    frame a warning's ``stacklevel`` counts, as without the guards). Anything else
    (replaced before the guards) keeps the plain door."""
    if type(im) is not FUNCTION or GCD_IMPORT is None:
        return False
    code = im.__code__
    return (
        DICT_GET(im.__globals__, "_bootstrap") is BOOTSTRAP
        and code.co_varnames[:2] == ("name", "package")
        and code.co_argcount == 2
        and "_gcd_import" in code.co_names
    )


def _e_spec_name(spec):
    """The name the face read out of a module spec (an exact str), or None."""
    if type(spec) is not NAMESPACE:
        return None
    name = DICT_GET(NS_DICT(spec), "name")
    return name if type(name) is str else None


def _e_judge_create(args, kwargs, dynamic=False):
    """``_imp.create_builtin`` / ``create_dynamic``: the import decision, and no second
    instance of a C module the guards patched (``_e_guarded_key``): it would come with
    unpatched functions. Any other C module may have several instances, as in CPython
    (importlib's own tests load a second ``errno``). The face handed us a private
    namespace holding the spec's exact name and origin."""
    spec = args[0] if args else None
    if type(spec) is not NAMESPACE:
        return REFUSE(TypeError("pysb: module specs reach _imp through the guard's face"))
    name = _e_spec_name(spec)
    if name is None:
        return REFUSE(TypeError("pysb: a module spec needs a str name"))
    key = _e_ext_key(name, dynamic)
    if key in STATE["first_keys"] and _e_guarded_key(key):
        message = (
            f"a second instance of the C module '{key}' refused by the sandbox "
            "(it would come without the guards' patches)"
        )
        return REFUSE(DEFER(DENIED, message, target=name))
    return _e_decide(name)


def _e_ext_key(name, dynamic):
    """The C module a create call makes, as the guards' patches name it. A built-in module
    is found by its full name; an extension file's init function is ``PyInit_<last part of
    the name>`` (``pkg._socket`` runs ``_socket``'s), so that part names what it makes --
    unless patches are registered for the full name."""
    if not dynamic or name in STATE["patchers"]:
        return name
    return name.rpartition(".")[2]


def _e_guarded_key(key):
    """True for a C module whose instance carries faces the guards placed at install
    (``STATE["faced"]``, taken at arm) or that is one of the interpreter's own (KEEP,
    ALWAYS): a new instance would come without them. A module patched as it loads
    (``on_import``) gets its patches on every instance (``_e_post_create``)."""
    return key in STATE["faced"] or key in KEEP or key in ALWAYS


def _e_realpath(path):
    """Canonical form of an absolute path: every symbolic link resolved with the original
    ``lstat`` / ``readlink`` (``/proc/self/fd/N`` of a memfd becomes ``/memfd:...``)."""
    out = ""
    rest = [p for p in path.split("/") if p and p != "."]
    rest.reverse()
    links = 0
    while rest:
        name = rest.pop()
        if name == "..":
            out = out[: out.rfind("/")]
            continue
        candidate = out + "/" + name
        try:
            mode = tuple.__getitem__(LSTAT(candidate), 0)
        except OSError:  # not there (a memfd's "/memfd:x (deleted)"): the rest as written
            rest.reverse()
            return "/".join([candidate, *rest])
        if mode & 0o170000 == 0o120000:
            links += 1
            if links > 40:
                return None
            target = READLINK(candidate)
            if target.startswith("/"):
                out = ""
            more = [p for p in target.split("/") if p and p != "."]
            more.reverse()
            rest.extend(more)
            continue
        out = candidate
    return out or "/"


def _e_extension_refusal(name, origin, why):
    message = (
        f"extension module '{name}' from '{origin}' refused by the sandbox: {why}; extension "
        "modules load only from the interpreter's standard library and site-packages, "
        "under the name their file has there"
    )
    RECORDER.deny("imports", name, "extension", "")
    return REFUSE(DEFER(DENIED, message, target=name))


def _e_judge_dynamic(args, kwargs):
    """``_imp.create_dynamic``: the name is judged as an import (see ``_e_judge_create``),
    then the file. ``dlopen`` runs a file's constructors before Python sees a module, so
    the file must be one of the interpreter's or an installed package's (by its canonical
    path: not a copy in a writable exposure, not ``/proc/self/fd/N`` of a memfd); a file of
    the standard library's ``lib-dynload`` loads only under its own name (``readline``,
    never ``json.readline``: a fresh module under another name would miss the patches
    registered for its own), and the name of a module of the interpreter (built in, or in
    ``lib-dynload``) only from that file; the C function is handed the canonical path, so
    that the file loaded is the file judged."""
    verdict = _e_judge_create(args, kwargs, True)
    if verdict is not None:
        return verdict
    spec = args[0]
    name = _e_spec_name(spec)
    origin = DICT_GET(NS_DICT(spec), "origin")
    if type(origin) is not str or not origin:
        return _e_extension_refusal(name, origin, "its spec names no file")
    absolute = origin
    if not origin.startswith("/"):
        try:
            absolute = GETCWD() + "/" + origin
        except OSError:
            return _e_extension_refusal(name, origin, "the working directory is unknown")
    try:
        canon = _e_realpath(absolute)
    except OSError:
        canon = None
    if canon is None:
        return _e_extension_refusal(name, origin, "the file cannot be resolved")
    if not canon.startswith(EXTENSION_ROOTS):
        return _e_extension_refusal(name, origin, f"'{canon}' is not a library file")
    if EXPOSED is not None and not (canon + "/").startswith(EXPOSED):
        # dlopen opens the file with C code of its own (no audit event): a library
        # directory on sys.path that the profile does not expose stays closed.
        return _e_extension_refusal(name, origin, f"'{canon}' is not exposed to the sandbox")
    # The name may be another than the file's (importlib's tests load _testmultiphase as
    # _testmultiphase_nonmodule, pkg._testmultiphase...): the name chooses the init function
    # in the file judged, and the patches follow the module made (_e_ext_key).
    in_dynload = canon.rpartition("/")[0] == DYNLOAD
    if not in_dynload and name in INTERPRETER_MODULES:
        return _e_extension_refusal(
            name, origin, f"'{name}' is a module of the interpreter, not of this file"
        )
    # The import is judged by the module the file is, too (as the exec event judges a
    # module's code by its file): a file of lib-dynload is the module its file name says,
    # one of site-packages belongs to its top-level package. Loaded under the name of a
    # listed package (`json._csv`), it passed the profile's list by that name.
    if in_dynload:
        owner = canon.rpartition("/")[2].partition(".")[0]
    else:
        try:
            owner = _e_module_of_file(canon)
        except ImportError as e:
            return REFUSE(e)
    if owner is not None and owner.isidentifier() and owner != _e_top(name):
        verdict = _e_decide(owner)
        if verdict is not None:
            return verdict
    if canon == origin:
        return None
    return ((NAMESPACE(name=name, origin=canon), *args[1:]), kwargs)


def _e_post_create(module, args, kwargs):
    """A new C module instance: recorded under the key of its patches, which run now (a
    single-phase module comes populated) and again when it is executed."""
    name = _e_spec_name(args[0])
    dynamic = DICT_GET(NS_DICT(args[0]), "origin") not in (None, "built-in")
    key = _e_ext_key(name, dynamic) if name is not None else None
    STATE["created"][id(module)] = key
    STATE["pending"][id(module)] = key
    if key is not None:
        STATE["first_keys"].add(key)
        STATE["first"].setdefault(key, module)
        _e_run_patchers(key, module)
    return module


def _e_judge_exec(args, kwargs):
    """Only a C module the doors just created is executed; any other call (a reload, a
    second exec) does nothing and answers 0, as CPython does for a module whose state is
    set up: running its exec slots again would put unpatched functions back."""
    module = args[0] if args else None
    if id(module) not in STATE["pending"]:
        return NEW_VALUE(0)
    return None


def _e_post_exec(result, args, kwargs):
    module = args[0]
    key = STATE["pending"].pop(id(module), None)
    if key is not None:
        _e_run_patchers(key, module)
    return result


def _e_taken(name, module):
    """The program imported a set-aside module (``name``): it leaves the stash, so that a
    later import after ``del sys.modules[name]`` loads a new module, and a reload runs its
    code, as in CPython. A C module carrying the guards' patches stays (a second instance
    is refused): importing it again hands the same module back."""
    if type(name) is not str:
        return
    stash = STATE["stash"]
    if stash.get(name) is not module:
        return
    if name in STATE["first_keys"] and _e_guarded_key(name):
        return
    for kept in STATE["kept"]:
        if kept is module:  # importlib._bootstrap is _frozen_importlib: always that one,
            return  # as in CPython (importlib's tests re-import it while it is blocked)
    del stash[name]
    _e_take_accelerators(module)


def _e_take_accelerators(module):
    """The C modules whose functions a set-aside module just taken holds (``stat``'s from
    ``_stat``: ``from _stat import *``) leave the stash for ``sys.modules``, as they stand
    in CPython once that module is imported (its own code imported them): a test's
    ``del sys.modules['_stat']`` then takes them out, and the next import makes a fresh
    instance (CPython's ``import_fresh_module``; it got the set-aside one, still held).

    They count as the program's to import only by name (``STATE["shadow"]``): library code
    importing one for the program (a name it was given) is judged as before, as if it were
    still set aside. Nothing here runs the program's code: exact types only, C calls on
    pysb's stash, and ``sys.modules`` written only when every key there is an exact
    ``str`` and the name is absent."""
    ns = NS_DICT(module) if type(module) is MODULE_TYPE else None
    if type(ns) is not dict:
        return
    stash = STATE["stash"]
    names = {id(m): n for n, m in list(dict.items(stash))}
    found = []
    for value in list(dict.values(ns)):
        if type(value) is BUILTIN:
            owner = value.__self__
            if type(owner) is MODULE_TYPE and id(owner) in names:
                dep = names[id(owner)]
                if stash.get(dep) is owner and dep not in found:
                    found.append(dep)
    if not found:
        return
    for k in list(dict.keys(MODULES)):
        if type(k) is not str:
            return
    for dep in found:
        owner = stash[dep]
        if dep in STATE["first_keys"] and _e_guarded_key(dep):
            continue
        if _e_loaded(dep) is not None:
            continue
        del stash[dep]
        dict.__setitem__(MODULES, dep, owner)
        STATE["shadow"].add(id(owner))


def _e_mark_faced():
    """The C modules holding a face of the guards (a second instance would not): read at
    arm, when every family has placed its faces."""
    faced = STATE["faced"]
    stash = STATE["stash"]
    for name in list(STATE["first_keys"]):
        module = MODULES.get(name) or stash.get(name)
        if module is None or type(name) is not str:
            continue
        ns = NS_DICT(module)
        if type(ns) is not dict:
            continue
        for value in list(dict.values(ns)):
            if IS_FACE(value):
                faced.add(name)
                break


def _e_visit(visitor):
    if STATE["armed"]:
        return REFUSE(PermissionError("pysb: modules are visited before user code only"))
    seen = set()
    for module in [*MODULES.values(), *STATE["stash"].values()]:
        if id(module) not in seen:
            seen.add(id(module))
            visitor(module)
    return None


def _e_allow_program(top):
    if STATE["armed"]:
        return REFUSE(PermissionError("pysb: the program modules are fixed before it starts"))
    STATE["program"].add(top)
    if top and top not in NEVER:
        STATE["fast"].add(top)
    return None


def _e_evict():
    """Set aside every module but the interpreter's own (see KEEP and ALWAYS)."""
    stash = STATE["stash"]
    modules = MODULES
    for name in list(modules):
        if _e_top(name) in ALWAYS or name in KEEP:
            continue
        parent = None
        if "." in name:
            above = name.rpartition(".")[0]
            parent = modules.get(above)
            if parent is None:  # set aside already: arming evicts a second time
                parent = stash.get(above)
        if parent is not None and not hasattr(parent, "__path__"):
            continue  # os.path: importlib finds it only in sys.modules ("os is not a package")
        stash[name] = modules.pop(name)


def _e_arm():
    _e_mark_faced()
    STATE["armed"] = True
    # Modules the other families imported while installing are set aside once more: the
    # program finds in sys.modules only what the interpreter keeps there.
    _e_evict()


def _e_sys(name):
    """``sys.<name>``, read with C code only; the ImportError refusing every import when
    the program put a key that is not an exact ``str`` into sys's namespace (a lookup
    there would run its ``__eq__``)."""
    for k in list(SYS_DICT):
        if type(k) is not str:
            raise ImportError("pysb: sys's namespace holds a name that is not a str")
    return dict.get(SYS_DICT, name)


def _e_restore_find_spec():
    """Put the guard's ``_find_spec`` back in ``importlib._bootstrap`` (where the import
    system looks it up by name each time it looks for a module) if the program replaced
    or removed it. Raises ImportError (every import refused) when that namespace holds a
    key that is not an exact ``str`` (a lookup there could run the program's ``__eq__``)."""
    face = STATE["find_face"]
    found = RESOLVE(BOOTSTRAP, "_find_spec")
    if found is None or found[2] is not face:
        PLACE(BOOTSTRAP, "_find_spec", face, True)


def _e_patch_importlib_util(module):
    """``importlib.util`` binds ``_bootstrap._find_spec`` when it is loaded: the guard's."""
    found = RESOLVE(module, "_find_spec")
    if found is not None and found[2] is STATE["find_original"]:
        PLACE(module, "_find_spec", STATE["find_face"], True)


def _e_audit_import(args):
    """``import`` audit event: raised before the interpreter imports a module."""
    try:
        _e_restore_find_spec()
    except ImportError as e:
        return e
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
    path = _e_sys("path")
    if type(path) is not list:
        return None
    for entry in list(path):
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

    Loaders call ``exec(code, module.__dict__)``; whoever obtained the loader (``_find_spec``,
    importlib._bootstrap, a hand-made spec), the module's file names its package. A frozen
    module's code (``FrozenImporter``: ``runpy``, ``importlib.util``, ``os``... whose code
    says ``<frozen NAME>``) is judged by that name: its loader, taken by hand
    (``FrozenImporter.find_spec`` and ``exec_module``), loaded it unjudged.
    """
    code = args[0] if args else None
    if type(code) is not CODE:
        return None
    name = code.co_name
    if type(name) is not str or name != "<module>":
        return None
    filename = code.co_filename
    if type(filename) is not str:
        return None
    if filename.startswith("<frozen ") and filename.endswith(">"):
        top = _e_top(filename[8:-1])
        if not top.isidentifier():
            return None
    elif filename.startswith("<"):
        return None
    else:
        try:
            top = _e_module_of_file(filename)
        except ImportError as e:
            return e
    if top is None:
        return None
    verdict = _e_decide(top)
    return None if verdict is None else EXC_OF(verdict)
