"""The sensitive-API guard: every function of the registry is denied unless a rule allows it.

At install every applicable entry of :mod:`pysb_guards.registry` gets a face and a door
(the same parameterised door for all: its judge is one dict lookup), in modules already
loaded and in modules loaded later (the import guard runs the patches as they load). The
guard is **armed** in ``pysb_child_arm``, last, right before user code: until then every
call passes, so the framework's start-up needs no exemption. Arming replaces the judge's
decision table inside sealed state; there is no flag in any module to flip back.

Rules (SPEC §4 "api"): a rule on a function -- any spelling of it -- beats a rule on its
category, which beats ``*``; at equal specificity ``deny`` wins; order never matters. Each
door of a call chain is judged (``subprocess.run`` -> ``subprocess.Popen`` ->
``_posixsubprocess.fork_exec``) and a refusal names the door it stopped at.

``dynamic-code`` (``eval``, ``exec``, ``compile``) is judged only when the *program* calls
them: the standard library and installed packages use them internally (``dataclasses``,
``namedtuple``, ``typing``) and code they run is itself under every guard. Calls made by
pysb's own start-up code (``pysb_core/child``) are not judged either.

Backstop: audit events raised by the C functions (``os.system``, ``os.exec``,
``os.posix_spawn``, ``os.fork``, ``os.kill``, ``subprocess.Popen``, ``ctypes.dlopen``,
``gc.get_referents``, ``pickle.find_class``, ``exec`` / ``compile``...) are judged too when
the call did not come through a face: an original reached some other way, or
``pickle.Unpickler``, whose C type cannot be patched.
"""

from __future__ import annotations

import sys

from pysb_guards import _seal, registry

try:
    from pysb_core.markers import hookimpl
except ImportError:  # pragma: no cover - an older pysb_core
    import pluggy

    hookimpl = pluggy.HookimplMarker("pysb")  # type: ignore[assignment]

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.events import Recorder
    from pysb_core.policy import Policy

GUARD = "api"

_runtime: list[Any] = []  # [arm face] once installed


# ---------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------


@hookimpl
def pysb_child_install(policy: Policy, recorder: Recorder) -> None:
    """Patch every applicable registry entry (unarmed: calls pass until pysb_child_arm)."""
    install(policy, recorder)


@hookimpl
def pysb_child_arm(policy: Policy, recorder: Recorder) -> None:
    """Arm: from now on the rules decide. Called last, right before user code."""
    if _runtime:
        _runtime[0]()


# ---------------------------------------------------------------------------------------
# Install
# ---------------------------------------------------------------------------------------


def install(policy: Policy, recorder: Recorder) -> None:
    if _runtime:
        return
    import os

    import pysb_core
    from pysb_core.errors import ApiDeniedError
    from pysb_guards import imports
    from pysb_guards._patch import defer_sweep
    from pysb_guards._where import is_library_file, library_prefixes

    imports.ensure_installed(policy, recorder)
    entries = tuple(e for e in registry.applicable())
    rules = [(r.action, r.target) for r in policy.api]
    verdicts = registry.resolve(rules, entries)
    sources: dict[str, list[str]] = {}
    for r in policy.api:
        sources.setdefault(r.target, []).append(f"`api: {r.action}: [{r.target}]` ({r.source})")

    add_handler, close_registration = _seal.audit_registry()
    face_codes = tuple(
        _seal.make_face(_seal.make_door(len, _seal._allow_all), None, p).__code__
        for p in (None, _seal._unchanged)
    )
    mark = _seal.sealed_mark()
    ns = _seal.seal_group(
        [fn for name, fn in globals().items() if name.startswith("_a_") and callable(fn)],
        ST={
            "armed": False,
            "learning": bool(recorder.learning),
            "verdicts": {},
            "pending": verdicts,
            "sources": sources,
            "faces": {},
            "learned": set(),
            "close": close_registration,
        },
        ENTRIES={e.qualname: e for e in entries},
        RECORDER=_seal.private_recorder(recorder),
        DENIED=ApiDeniedError,
        REFUSAL=_seal.Refusal,
        # Faces are built when a module loads, after the program started: private builders.
        **_seal.builders(),
        DOOR_NS=_seal.DOOR_NS,
        GETFRAME=sys._getframe,
        FACE_CODES=face_codes,
        MARK=mark,
        PREFIXES=library_prefixes(),
        IS_LIBRARY=is_library_file,
        FRAMEWORK=os.path.join(os.path.dirname(os.path.abspath(pysb_core.__file__)), "child") + "/",
        SYS=sys,
        FRAME_ARGS=_caller_namespaces,
        INIT_EXEMPT=_INIT_EXEMPT,
    )

    modules: dict[str, list[registry.Entry]] = {}
    for e in entries:
        if e.patch:
            modules.setdefault(e.module, []).append(e)
    for module_name, members in modules.items():
        imports.on_import(module_name, ns["_a_make_patcher"](tuple(members)))
    faces = ns["ST"]["faces"]
    defer_sweep(faces)

    events: dict[str, list[str]] = {}
    # Entries judged only through their events (pickle.Unpickler) come first: a refusal by
    # the backstop then names the door most likely used.
    for e in sorted(entries, key=lambda e: e.patch):
        for event in e.events:
            if e.group not in events.setdefault(event, []):
                events[event].append(e.group)
    for event, groups in events.items():
        add_handler(event, ns["_a_make_event_handler"](event, tuple(groups)))
    add_handler("exec", ns["_a_dynamic_event"])
    add_handler("compile", ns["_a_dynamic_event"])
    _runtime.append(_seal.guard(ns["_a_arm"], _seal._allow_all))


def _caller_namespaces(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``eval(src)`` / ``exec(src)`` without globals use the *caller's* namespaces: pass them
    explicitly, since the original is called from the guard's own frame."""
    given = args[1] if len(args) > 1 else kwargs.get("globals")
    if given is not None or not args:
        return args, kwargs
    local = args[2] if len(args) > 2 else kwargs.get("locals")
    frame = sys._getframe(2)
    if local is None:
        local = frame.f_locals
    rest = {k: v for k, v in kwargs.items() if k not in ("globals", "locals")}
    return (args[0], frame.f_globals, local, *args[3:]), rest


# ---------------------------------------------------------------------------------------
# The sealed engine (private globals: ST, ENTRIES, RECORDER... see install()).
# ---------------------------------------------------------------------------------------

ST: dict[str, Any] = None  # type: ignore[assignment]  # sealed
ENTRIES: dict[str, Any] = None  # type: ignore[assignment]  # sealed
RECORDER: Any = None  # sealed
DENIED: Any = None  # sealed
REFUSAL: Any = None  # sealed
MAKE_DOOR: Any = None  # sealed
MAKE_FACE: Any = None  # sealed
IS_FACE: Any = None  # sealed
DOOR_NS: Any = None  # sealed
GETFRAME: Any = None  # sealed
FACE_CODES: Any = None  # sealed
MARK: Any = None  # sealed
PREFIXES: Any = None  # sealed
IS_LIBRARY: Any = None  # sealed
FRAMEWORK: str = None  # type: ignore[assignment]  # sealed
SYS: Any = None  # sealed
FRAME_ARGS: Any = None  # sealed
INIT_EXEMPT: dict[str, str] = None  # type: ignore[assignment]  # sealed


def _a_arm():
    if ST["armed"]:
        return None
    ST["verdicts"] = ST["pending"]
    ST["armed"] = True
    ST["close"]()
    return None


def _a_refusal(qualname):
    entry = ENTRIES[qualname]
    group = entry.group
    category = entry.category
    by_rule = ST["sources"].get(group) or ST["sources"].get(category) or ST["sources"].get("*")
    why = f" by {', '.join(by_rule)}" if by_rule else ""
    message = (
        f"call of '{group}' ({category}) refused{why}: add `api: allow: [{group}]` "
        f"(this function) or `api: allow: [{category}]` (the whole category) to the profile"
    )
    rule = f"api: allow: [{group}]"
    RECORDER.deny("api", group, category, rule)
    return REFUSAL(DENIED(message, qualname=group, category=category, suggested_rule=rule))


def _a_caller():
    """The nearest frame that is not pysb's guard machinery."""
    f = GETFRAME(2)
    while f is not None:
        g = f.f_globals
        if g is DOOR_NS or dict.get(g, "__pysb_sealed__") is MARK:
            f = f.f_back
            continue
        code = f.f_code
        if any(code is c for c in FACE_CODES):
            f = f.f_back
            continue
        return f
    return None


def _a_exempt(dynamic):
    """Framework start-up code, and for dynamic-code any library code, is not judged."""
    f = _a_caller()
    if f is None:
        return True
    filename = f.f_code.co_filename
    if filename.startswith(FRAMEWORK):
        return True
    return dynamic and IS_LIBRARY(filename, PREFIXES)


#: Calls a module makes while it is being imported, that the import itself needs (ctypes
#: opens the interpreter's own symbols as ``pythonapi``): an import right stays usable;
#: every call through the result is still judged (``ctypes.call_function``).
_INIT_EXEMPT = {"_ctypes.dlopen": "/ctypes/__init__.py", "ctypes.CDLL": "/ctypes/__init__.py"}


def _a_module_init(suffix):
    f = _a_caller()
    for _ in range(8):
        if f is None:
            return False
        g = f.f_globals
        if g is DOOR_NS or dict.get(g, "__pysb_sealed__") is MARK:
            f = f.f_back
            continue
        code = f.f_code
        if code.co_name == "<module>" and code.co_filename.endswith(suffix):
            return IS_LIBRARY(code.co_filename, PREFIXES)
        f = f.f_back
    return False


def _a_decide(qualname):
    """None when the call may go on, else a Refusal. One dict lookup once armed."""
    if ST["verdicts"].get(qualname, False):
        return None
    if not ST["armed"]:
        return None
    entry = ENTRIES[qualname]
    dynamic = entry.category == "dynamic-code"
    if _a_exempt(dynamic):
        return None
    suffix = INIT_EXEMPT.get(entry.group)
    if suffix is not None and _a_module_init(suffix):
        return None
    if ST["learning"]:
        if entry.group not in ST["learned"]:
            ST["learned"].add(entry.group)
            RECORDER.learn(
                "api",
                entry.group,
                entry.category,
                f"api: allow: [{entry.group}]",
                category=entry.category,
            )
        return None
    return _a_refusal(qualname)


def _a_make_judge(qualname):
    def judge(args, kwargs):
        if ST["verdicts"].get(qualname, False) or not ST["armed"]:
            return None
        return _a_decide(qualname)

    return judge


def _a_resolve(module, attr):
    owner = module
    parts = attr.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, None, None
    name = parts[-1]
    return (
        owner,
        name,
        owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None),
    )


def _a_make_patcher(members):
    """The patch of one module: a face for each of its registry entries."""

    def patcher(module):
        for entry in members:
            owner, name, original = _a_resolve(module, entry.attr)
            if original is None or IS_FACE(original):
                continue
            face = ST["faces"].get(id(original))
            if face is None:
                door = MAKE_DOOR(original, _a_make_judge(entry.qualname), name=name)
                prepare = (
                    FRAME_ARGS if entry.qualname in ("builtins.eval", "builtins.exec") else None
                )
                face = MAKE_FACE(door, original, prepare)
                ST["faces"][id(original)] = face
            try:
                setattr(owner, name, face)
            except (AttributeError, TypeError):
                pass

    return patcher


def _a_event_caller():
    """The frame that called the C function raising the current audit event."""
    f = GETFRAME(2)
    while f is not None and f.f_globals is not DOOR_NS:
        f = f.f_back  # up to the audit hook (a door)
    return f.f_back if f is not None else None


def _a_make_event_handler(event, groups):
    def handler(args):
        if not ST["armed"]:
            return None
        verdicts = ST["verdicts"]
        if all(verdicts.get(g, False) for g in groups):
            return None
        caller = _a_event_caller()
        if caller is not None and caller.f_globals is DOOR_NS:
            return None  # through a face: judged there
        if caller is not None and caller.f_code.co_filename.startswith(FRAMEWORK):
            return None
        for group in groups:
            if not verdicts.get(group, False):
                if ST["learning"]:
                    _a_decide(group)
                    return None
                return _a_refusal(group).exc
        return None

    return handler


def _a_dynamic_event(args):
    """``exec`` / ``compile`` reached without the builtins' faces, from the program."""
    if not ST["armed"]:
        return None
    verdicts = ST["verdicts"]
    names = ("builtins.eval", "builtins.exec", "builtins.compile")
    if all(verdicts.get(n, False) for n in names):
        return None
    caller = _a_event_caller()
    if caller is None or caller.f_globals is DOOR_NS:
        return None
    filename = caller.f_code.co_filename
    if filename.startswith(FRAMEWORK) or IS_LIBRARY(filename, PREFIXES):
        return None
    if ST["learning"]:
        return None
    denied = next(n for n in names if not verdicts.get(n, False))
    return _a_refusal(denied).exc
