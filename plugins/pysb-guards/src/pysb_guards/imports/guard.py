"""The import guard: the program imports only the top-level names its profile lists.

Three doors, one decision:

- ``importlib._bootstrap._find_spec``, which the import system calls for every module it
  looks for, before any finder of ``sys.meta_path`` (the program's list, in the program's
  order) is asked (the audit hook puts it back before every import the interpreter starts,
  if the program replaced it);
- ``builtins.__import__`` / ``importlib.__import__``, which also see imports of modules
  already in ``sys.modules``;
- ``importlib.import_module``.

At install every module the framework loaded is taken out of ``sys.modules`` (kept aside,
not re-executed), except what the interpreter itself needs; importing one of them later goes
through ``_find_spec``, which puts the very same module back when the import is allowed.

The decision is on the top-level name (a submodule follows its package): allowed when the
profile lists it (or says ``"*"``), when it is the program's own script or ``-m`` module,
when the interpreter imports it on demand (``encodings``, ``_strptime``...), or when the
import is made by library code (``json`` importing ``re``) rather than by the program --
the profile governs what the *program* imports; the calls a module makes are the job of the
files, network and api guards. Refusals raise :class:`~pysb_core.errors.ImportDeniedError`
(a ``ModuleNotFoundError``) naming the line to add, ``imports: [requests]``.

Modules patched by other guards when they load (``subprocess``, ``ctypes``, ``pickle``...)
are patched here, as the loader finishes executing them (see :func:`on_import`).

Why one module: it is the import guard's install: ``_find_spec``, the ``__import__`` doors,
the set-aside modules' loader and the audit hook all take their decision from one sealed
engine made here, and their wiring (what stands in ``importlib._bootstrap``, what is
evicted) must be read together; the decisions are in :mod:`.engine` (the plain code on the
import path in :mod:`.importlib_bootstrap`).
"""

from __future__ import annotations

import sys

from pysb_core.guardkit import hookimpl
from pysb_guards import _seal, _stacks
from pysb_guards._patch import sweep_pending
from pysb_guards.imports import engine
from pysb_guards.imports.importlib_bootstrap import (
    PATCHING_LOADER_CODES,
    REINSERT_LOADER_CODES,
    make_find_spec,
)

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from pysb_core.guardkit import Policy, Recorder

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
        "time",  # datetime's C code imports it for strftime/timetuple
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
        "posix",
        "_interpreters",
        "_xxsubinterpreters",
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
def pysb_child_install(policy: Policy, recorder: Recorder) -> str:
    """Install ``_find_spec`` and the ``__import__`` checks; take framework modules aside.

    Returns the family put in force (the bootstrap refuses to run a program whose profile
    needs a family no guard armed)."""
    install(policy, recorder)
    return GUARD


@hookimpl
def pysb_child_arm(policy: Policy, recorder: Recorder) -> None:
    """Point captured originals at the faces (one pass for every guard), then close the list
    of program modules and the audit hook's handler table."""
    if _runtime:
        sweep_pending(visit_modules)
        _runtime[0][1]()
        _seal.audit_registry()[1]()


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
    import posix
    import types

    from pysb_core.guardkit import ImportDeniedError
    from pysb_guards._where import is_library_file, library_prefixes

    imports = policy.imports
    star = imports is not None and "*" in imports
    allowed = set(ALWAYS) | {n.partition(".")[0] for n in (imports or ()) if n != "*"}
    program = set(_pending_program)
    del _pending_program[:]

    add_handler, _close = _seal.audit_registry()
    import_name, extended_arg = _opcodes()
    never = frozenset({"pysb_guards"})
    # The names __import__ and import_module let through without asking the judge: those
    # its first test allows on the name alone (see _seal's gates). Program modules join
    # them until the guards are armed.
    fast = {n for n in allowed | program if n and n not in never}
    first = _c_modules()
    b = _seal.builders()
    # The frames of _find_spec and the loaders are the import system's, not an importer's.
    import_codes = [
        *PATCHING_LOADER_CODES,
        *REINSERT_LOADER_CODES,
    ]
    ns = _seal.seal_group(
        [
            *(fn for name, fn in vars(engine).items() if name.startswith("_e_")),
            is_library_file,
        ],
        STATE={
            "allowed": allowed,
            "program": program,
            "star": star,
            "learning": bool(recorder.learning),
            "armed": False,
            "stash": {},
            "patchers": {},
            "created": {},
            "pending": {},
            "find_face": None,  # importlib._bootstrap._find_spec (importlib_bootstrap.py)
            "find_original": _frozen_importlib._find_spec,
            "codes": import_codes,
            "learned": set(),
            "roots": (),
            "fast": fast,
            "extension_doors": set(),  # code ids of the doors of _imp's four C functions
            "first_keys": set(first),  # C modules with an instance (see _e_ext_key)
            "first": first,  # key -> its first instance
            "faced": set(),  # those of them holding a guard's face (filled at arm)
            "kept": [sys.modules[n] for n in sorted(KEEP | ALWAYS) if n in sys.modules],
            "shadow": set(),  # ids of C modules taken with their user (_e_take_accelerators)
        },
        RECORDER=_seal.private_recorder(recorder),
        DENIED=ImportDeniedError,
        IMPORT_DENIED=_make_import_denied(ImportDeniedError),
        PREFIXES=library_prefixes(),
        GETFRAME=sys._getframe,
        SYS_DICT=vars(sys),
        **{k: b[k] for k in ("MAKE_DOOR", "MAKE_GATE", "MAKE_FACE", "IS_FACE", "DEFER")},
        **{k: b[k] for k in ("REFUSE", "EXC_OF", "IS_GUARD_FRAME", "FRAME_CODE", "DICT_GET")},
        **{k: b[k] for k in ("CHECK_MODULE", "RESOLVE", "PLACE", "SEALED_BUILTINS")},
        GCD_IMPORT=getattr(_frozen_importlib, "_gcd_import", None),
        BOOTSTRAP=_frozen_importlib,
        FUNCTION=type(install),
        CODE=type(install.__code__),
        TYPE_DICT=type.__dict__["__dict__"].__get__,
        TYPE_MRO=type.__dict__["__mro__"].__get__,
        IMPORT_CODES={id(c) for c in import_codes},
        BOOT0=_frozen_importlib.__dict__,
        BOOT1=_frozen_importlib_external.__dict__,
        NEVER=never,
        NAMESPACE=types.SimpleNamespace,
        NS_DICT=vars,
        ALWAYS=ALWAYS,
        KEEP=KEEP,
        MODULES=sys.modules,
        INTERNAL=internal_importers(),
        LSTAT=posix.lstat,
        READLINK=posix.readlink,
        GETCWD=posix.getcwd,
        **_extension_places(),
        EXPOSED=_exposed_prefixes(policy),
        IMPORT_NAME=import_name,
        EXTENDED_ARG=extended_arg,
        NEW_VALUE=b["NEW_VALUE"],
        MODULE_TYPE=type(sys),
        BUILTIN=type(len),
    )
    ns["IS_LIBRARY"] = ns["is_library_file"]
    state = ns["STATE"]
    allow = None

    decide = _seal.make_face(_seal.make_door(ns["_e_find_action"], allow, name="decide"))
    patch = _seal.make_face(_seal.make_door(ns["_e_run_patchers"], allow, name="patch"))
    taken = _seal.make_face(_seal.make_door(ns["_e_taken"], allow, name="taken"))
    state["find_face"] = make_find_spec(decide, patch, taken, _frozen_importlib._find_spec)
    import_codes.append(state["find_face"].__code__)
    ns["IMPORT_CODES"].add(id(state["find_face"].__code__))
    ns["_e_restore_find_spec"]()
    # importlib.util took the original by name (`from ._bootstrap import _find_spec`)
    ns["_e_on_import"]("importlib.util", ns["_e_patch_importlib_util"])

    # __import__, importlib.__import__ and importlib.import_module see imports of modules
    # already in sys.modules. With `imports: "*"` there is nothing for them to refuse (the
    # guards' own modules are kept out of sys.modules, so _find_spec still refuses those):
    # no patch, no cost.
    if not star:
        original = builtins.__import__
        door = _seal.make_door(original, ns["_e_judge_import"], name="__import__")
        gate = _seal.make_gate("__import__", original, door, fast, _import_args)
        import_face = _seal.make_face(gate, original, None, "__import__")
        builtins.__import__ = import_face
        state["import_face"] = import_face
        ns["_e_on_import"]("importlib", ns["_e_patch_importlib"])

    # Fresh instances of C modules come only from these four functions of _imp. The C code
    # runs under a door (never under sealed frames): extension modules may import Python
    # code, and through sys.path_hooks, the program's.
    for name, judge in (
        ("create_builtin", "_e_judge_create"),
        ("create_dynamic", "_e_judge_dynamic"),
    ):
        original = getattr(_imp, name)
        door = _seal.make_door(original, ns[judge], ns["_e_post_create"], name=name)
        state["extension_doors"].add(b["DOOR_CODE_ID"](door))
        setattr(_imp, name, _seal.make_face(door, original, _prepare_create))
    for name in ("exec_builtin", "exec_dynamic"):
        original = getattr(_imp, name)
        door = _seal.make_door(original, ns["_e_judge_exec"], ns["_e_post_exec"], name=name)
        state["extension_doors"].add(b["DOOR_CODE_ID"](door))
        setattr(_imp, name, _seal.make_face(door, original))

    # Take framework modules aside (they come back, unchanged, when an import allows it).
    ns["_e_evict"]()
    for name in KEEP | ALWAYS:
        if name in sys.modules:
            state["created"][id(sys.modules[name])] = name

    add_handler("import", ns["_e_audit_import"])
    add_handler("exec", ns["_e_audit_exec"])
    _runtime.append(
        (
            _seal.guard(ns["_e_allow_program"], None),
            _seal.guard(ns["_e_arm"], None),
            _seal.guard(ns["_e_on_import"], None),
            _seal.guard(ns["_e_visit"], None),
        )
    )
    # Stack walks and dumps of the program leave the guards' frames out (issue 17).
    _stacks.install(on_import, _seal)


#: Standard library functions that import modules other than their own by *calling*
#: ``__import__`` with names of their own making (not the caller's): ``(file below the
#: standard library, function)``. The rest of the standard library's calls import names
#: their callers give them (pickle, logging.config, pkgutil, unittest...): judged.
INTERNAL_IMPORTERS = (
    ("sysconfig.py", "_init_posix"),  # _sysconfigdata_<platform> (3.11, 3.12)
    ("sysconfig/__init__.py", "_init_posix"),  # 3.13
)

#: ``(IMPORT_NAME, EXTENDED_ARG)`` opcodes by version (checked against a probe at install).
_OPCODES = {(3, 11): (108, 144), (3, 12): (108, 144), (3, 13): (75, 71)}


def internal_importers() -> frozenset[tuple[str, str]]:
    """``(filename, function name)`` of :data:`INTERNAL_IMPORTERS` in this interpreter."""
    import os

    # Code objects of the standard library carry the path it was found under, os's too.
    stdlib = os.path.dirname(os.__file__)
    return frozenset((os.path.join(stdlib, rel), name) for rel, name in INTERNAL_IMPORTERS)


def _exposed_prefixes(policy: Policy) -> tuple[str, ...] | None:
    """The exposures' directories (each ending in ``/``) an extension module's file must
    lie below, or None when the policy names no implicit exposure (a policy made by hand,
    without the interpreter's own: the file guard then adds them itself)."""
    if not any(e.implicit for e in policy.exposures):
        return None
    return tuple(e.path.rstrip("/") + "/" for e in policy.exposures)


def _extension_places() -> dict[str, Any]:
    """Where extension modules may come from, as canonical paths: ``EXTENSION_ROOTS``
    (prefixes, each ending in ``/``: the standard library, site-packages, pysb's own
    packages) and ``DYNLOAD`` (the standard library's ``lib-dynload``); and the names of the
    interpreter's own modules (``INTERPRETER_MODULES``)."""
    import os

    from pysb_guards._where import library_prefixes

    roots = []
    for prefix in library_prefixes():
        real = os.path.realpath(prefix).rstrip("/") + "/"
        if real != "/" and real not in roots:
            roots.append(real)
    dynload = os.path.realpath(os.path.join(os.path.dirname(os.__file__), "lib-dynload"))
    try:
        stems = {name.partition(".")[0] for name in os.listdir(dynload)}
    except OSError:
        stems = set()
    return {
        "EXTENSION_ROOTS": tuple(roots),
        "DYNLOAD": dynload,
        # Names only the interpreter's own files may load under (built in, or lib-dynload).
        "INTERPRETER_MODULES": frozenset(stems | set(sys.builtin_module_names)),
    }


def _probe() -> Any:
    import _pysb_probe_  # type: ignore[import-not-found]  # noqa: F401 - never called


def _opcodes() -> tuple[int, int]:
    """``IMPORT_NAME`` and ``EXTENDED_ARG`` of this interpreter, without importing ``opcode``
    (0.6 ms) on the versions we know: the table's value must be the one instruction of
    :func:`_probe` naming ``_pysb_probe_``."""
    known = _OPCODES.get(sys.version_info[:2])
    if known is not None:
        ops = _probe.__code__.co_code
        found = [i for i in range(0, len(ops), 2) if ops[i] == known[0]]
        if len(found) == 1 and _probe.__code__.co_names[ops[found[0] + 1]] == "_pysb_probe_":
            return known
    import opcode

    return opcode.opmap["IMPORT_NAME"], opcode.opmap["EXTENDED_ARG"]


def _make_import_denied(denied: type[BaseException]) -> Callable[[str, str], BaseException]:
    """The maker of the exception refusing an import (called by faces, outside sealed
    code), with ``ImportDeniedError`` bound at install: importing it at refusal time went
    through the import system, and a program that rewrote the closure of
    ``importlib._bootstrap._find_spec`` (its decision cell: pysb's modules set aside are
    no longer handed back) got a plain ``ModuleNotFoundError: No module named
    'pysb_core'`` instead of pysb's refusal (SPEC §7)."""

    def import_denied(name: str, rule: str) -> BaseException:
        exc = denied(
            f"import of '{name}' refused by the sandbox: add `{rule}` to the profile",
            target=name,
            suggested_rule=rule,
        )
        exc.name = name  # type: ignore[attr-defined]
        exc.msg = str(exc)  # type: ignore[attr-defined]
        return exc

    return import_denied


def _import_args(
    name: Any, globals: Any = None, locals: Any = None, fromlist: Any = (), level: Any = 0
) -> tuple:
    """The arguments of an ``__import__`` that is not the gate's short way, as its judge and
    the original both read them: for a relative import, the package the import system
    would compute from ``globals`` (``__package__``, else ``__spec__.parent``, else
    ``__name__``), in a fresh dictionary holding nothing else.

    Plain code, run by the gate (a door) before its judge: reading the program's dictionary
    may run the program's code, which must never happen in sealed code. When the package
    cannot be read, the arguments go on unchanged (the judge reads only a dictionary of
    exact ``str`` keys; the import system raises its own error).
    """
    if type(level) is int and level > 0 and isinstance(globals, dict):
        try:
            package = globals.get("__package__")
            if package is None:
                spec = globals.get("__spec__")
                if spec is not None:
                    package = spec.parent
                else:
                    package = globals["__name__"]
                    if "__path__" not in globals:
                        package = package.rpartition(".")[0]
            if issubclass(type(package), str):
                globals = {"__package__": str.__str__(package)}
        except Exception:
            pass
    return name, globals, locals, fromlist, level


def _text(value: Any) -> str | None:
    return str.__str__(value) if issubclass(type(value), str) else None


def _prepare_create(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Read the spec once, here: the judge and the C function see the same exact strings,
    in a namespace the program cannot change."""
    import types

    spec = args[0] if args else kwargs.get("spec")
    name = _text(getattr(spec, "name", None))
    origin = _text(getattr(spec, "origin", None))
    return (types.SimpleNamespace(name=name, origin=origin), *args[1:]), {}


def _c_modules() -> dict[str, Any]:
    """The C modules loaded now (built in, or an extension file), by name: each has an
    instance already, so a second one is judged (``_e_judge_create``)."""
    import _imp

    names = {}
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None)
        extension = isinstance(origin, str) and origin.endswith(".so")
        if origin == "built-in" or _imp.is_builtin(name) or extension:
            names[name] = module
    return names
