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

Terminal injection: ``fcntl.ioctl`` requests that type into or take over a terminal
(``TIOCSTI``, ``TIOCLINUX``...: ``engine._TERMINAL_IOCTLS``) are refused through the
``fcntl.ioctl`` audit event whatever the rules, as the OS providers' seccomp filter does.
"""

from __future__ import annotations

# What the install uses is imported with this module, before any guard: once the import
# guard is installed (the install's first step), an import statement run by the install
# goes through its faces and judge (docs/performance.md, "Start-up").
import _functools
import _operator
import _thread
import os
import sys

import pysb_core
from pysb_core.guardkit import ApiDeniedError, hookimpl
from pysb_guards import _seal, registry
from pysb_guards._patch import defer_sweep
from pysb_guards._seal.audithook import own_dirs
from pysb_guards._where import is_library_file, library_prefixes
from pysb_guards.api import engine

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.guardkit import Policy, Recorder

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
def pysb_child_arm(policy: Policy, recorder: Recorder) -> str | None:
    """Arm: from now on the rules decide. Called last, right before user code.

    Returns the family put in force (None when nothing was installed to arm)."""
    if _runtime:
        _runtime[0]()
        return GUARD
    return None


# ---------------------------------------------------------------------------------------
# Install
# ---------------------------------------------------------------------------------------


def install(policy: Policy, recorder: Recorder) -> None:
    if _runtime:
        return
    # Imported here, not with the module: the import guard's module is kept out of the other
    # families' namespaces, which the program may reach (files.guard's is, by its classes).
    from pysb_guards.imports import guard as imports

    imports.ensure_installed(policy, recorder)
    entries = tuple(e for e in registry.applicable())
    rules = [(r.action, r.target) for r in policy.api]
    verdicts = registry.resolve(rules, entries)
    sources: dict[str, list[str]] = {}
    for r in policy.api:
        sources.setdefault(r.target, []).append(f"`api: {r.action}: [{r.target}]` ({r.source})")

    add_handler, close_registration = _seal.audit_registry()
    b = _seal.builders()
    ns = _seal.seal_group(
        [
            *(fn for name, fn in vars(engine).items() if name.startswith("_a_") and callable(fn)),
            is_library_file,
        ],
        ST={
            "armed": False,
            "learning": bool(recorder.learning),
            "verdicts": {},
            "pending": verdicts,
            "sources": sources,
            "faces": {},
            "originals": [],  # (original, its face): for the sweep at arming
            "door_groups": {},  # id of a door's code -> the group its judge decides
            "learned": set(),
            "close": close_registration,
            "posts": {},  # name -> the sealed post step (filled below)
            "trace_face": None,  # what sys.settrace's function is called through (below)
        },
        # Read by judges: exact str values only (registry.Entry is a class the program can
        # write properties into).
        ENTRIES={e.qualname: (e.group, e.category) for e in entries},
        PATCHES=tuple((e.module, e.attr, e.qualname, e.group) for e in entries if e.patch),
        RECORDER=_seal.private_recorder(recorder),
        DENIED=ApiDeniedError,
        REFUSAL=_seal.Refusal,
        # Faces are built when a module loads, after the program started: private builders.
        **{k: b[k] for k in ("MAKE_DOOR", "MAKE_FACE", "IS_FACE", "DEFER", "REFUSE", "EXC_OF")},
        **{k: b[k] for k in ("IS_GUARD_FRAME", "IS_DOOR_FRAME", "FRAME_CODE", "DOOR_CODE_ID")},
        **{k: b[k] for k in ("RESOLVE", "PLACE")},
        CHECK_MODULE=b["CHECK_MODULE"],
        GETFRAME=sys._getframe,
        SEALED=b["SEALED_BUILTINS"],
        PREFIXES=library_prefixes(),
        FRAMEWORK=os.path.join(os.path.dirname(os.path.abspath(pysb_core.__file__)), "child") + "/",
        FRAME_ARGS=_caller_namespaces,
        INIT_EXEMPT=engine._INIT_EXEMPT,
        TERMINAL_IOCTLS=engine._TERMINAL_IOCTLS,
        OWN_MODULE_FACES=engine._OWN_MODULE_FACES,
        TRACE_ARGS=_traced_args,
        TRACE_SETTERS=_TRACE_SETTERS,
        FRAME_TYPE=type(sys._getframe()),
        PARTIAL=_functools.partial,
        # pysb's plain code in a stack, and its errors' classes (a refusal the file guard
        # builds for importlib's stat of a hidden path runs their __new__ and __init__)
        OWN_DIRS=(
            *own_dirs(),
            os.path.join(os.path.dirname(os.path.abspath(pysb_core.__file__)), "errors.py"),
        ),
        NO_TRACE=b["NEW_VALUE"](None),
        FRAMEWORK_CALLS=engine._FRAMEWORK_CALLS,
        GET_IDENT=_thread.get_ident,
        # Entries whose result is filtered (exact str keys and values: the names of
        # sealed functions in ST["posts"]).
        POSTS={"sys._current_frames": "_a_current_frames_post"},
    )
    ns["IS_LIBRARY"] = ns["is_library_file"]
    # A trace or profile function is called through this face (operator.call(function,
    # frame, event, arg) behind a door whose judge passes over pysb's own frames).
    trace_door = b["MAKE_DOOR"](_operator.call, ns["_a_trace_judge"], name="trace")
    ns["ST"]["trace_face"] = b["MAKE_FACE"](trace_door)
    _tracing[:] = [_functools.partial, ns["ST"]["trace_face"]]
    ns["ST"]["posts"]["_a_current_frames_post"] = ns["_a_current_frames_post"]

    modules: dict[str, list[int]] = {}
    for i, (module_name, _attr, _qualname, _group) in enumerate(ns["PATCHES"]):
        modules.setdefault(module_name, []).append(i)
    for module_name, members in modules.items():
        imports.on_import(module_name, ns["_a_make_patcher"](tuple(members)))
    for name in ("gettrace", "getprofile"):  # give the program's function back
        original = getattr(sys, name)
        door = b["MAKE_DOOR"](original, None, ns["_a_untraced"], name=name)
        face = b["MAKE_FACE"](door, original)
        b["PLACE"](sys, name, face)
        ns["ST"]["originals"].append((original, face))
    defer_sweep(list(ns["ST"]["originals"]))

    events: dict[str, list[str]] = {}
    # Entries judged only through their events (pickle.Unpickler) come first: a refusal by
    # the backstop then names the door most likely used.
    for e in sorted(entries, key=lambda e: e.patch):
        for event in e.events:
            if e.group not in events.setdefault(event, []):
                events[event].append(e.group)
    for event, groups in events.items():
        add_handler(event, ns["_a_make_event_handler"](event, tuple(groups)))
    add_handler("fcntl.ioctl", ns["_a_ioctl_event"])  # terminal injection (issue 26)
    add_handler("exec", ns["_a_dynamic_event"])
    add_handler("compile", ns["_a_dynamic_event"])
    _runtime.append(_seal.guard(ns["_a_arm"], None))


#: The functions that set a trace or profile function (the api guard's faces over them
#: take :func:`_traced_args` as their prepare step).
_TRACE_SETTERS = frozenset(
    {"sys.settrace", "sys.setprofile", "sys._settraceallthreads", "sys._setprofileallthreads"}
)
_tracing: list[Any] = []  # [functools.partial, the trace face] once installed


def _traced_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``sys.settrace(function)`` (and ``setprofile``...): C calls ``function`` for every
    new frame, the guards' own too, and a door's code is not readable (CPython's
    test_import: a tracer reading ``frame.f_code`` of the import finder's door raised). So
    it is set as ``partial(trace face, function)``, which calls it for the program's
    frames only (``engine._a_trace_judge``); ``sys.gettrace()`` gives ``function`` back.
    What the function returns (its local trace function) is set as CPython sets it.
    Plain code: the program may change this step, and with it only what its own trace
    function sees (the ``introspection`` category is no boundary, docs/security.md)."""
    if len(args) != 1 or kwargs or args[0] is None or len(_tracing) != 2:
        return args, kwargs
    partial, face = _tracing
    function = args[0]
    if type(function) is partial and function.func is face:
        return args, kwargs  # sys.settrace(sys.gettrace()) of a wrapper: set it as it is
    return (partial(face, function),), kwargs


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
