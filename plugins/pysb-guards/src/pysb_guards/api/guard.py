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

import sys

from pysb_core.guardkit import hookimpl
from pysb_guards import _seal, registry
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
    import _thread
    import os

    import pysb_core
    from pysb_core.guardkit import ApiDeniedError
    from pysb_guards._patch import defer_sweep
    from pysb_guards._where import is_library_file, library_prefixes
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
        PREFIXES=library_prefixes(),
        FRAMEWORK=os.path.join(os.path.dirname(os.path.abspath(pysb_core.__file__)), "child") + "/",
        FRAME_ARGS=_caller_namespaces,
        INIT_EXEMPT=engine._INIT_EXEMPT,
        TERMINAL_IOCTLS=engine._TERMINAL_IOCTLS,
        OWN_MODULE_FACES=engine._OWN_MODULE_FACES,
        FRAMEWORK_CALLS=engine._FRAMEWORK_CALLS,
        GET_IDENT=_thread.get_ident,
        # Entries whose result is filtered (exact str keys and values: the names of
        # sealed functions in ST["posts"]).
        POSTS={"sys._current_frames": "_a_current_frames_post"},
    )
    ns["IS_LIBRARY"] = ns["is_library_file"]
    ns["ST"]["posts"]["_a_current_frames_post"] = ns["_a_current_frames_post"]

    modules: dict[str, list[int]] = {}
    for i, (module_name, _attr, _qualname, _group) in enumerate(ns["PATCHES"]):
        modules.setdefault(module_name, []).append(i)
    for module_name, members in modules.items():
        imports.on_import(module_name, ns["_a_make_patcher"](tuple(members)))
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
