"""The sensitive-API guard's engine: the judges of the registry's faces and of the audit
events behind them.

These functions never run with this module's globals: :func:`pysb_guards.api.guard.install`
re-creates every ``_a_*`` function in one private namespace (``_seal.seal_group``) holding
the decision table, the registry's entries and the builders; the names in capitals are
the values given there. Arming (``pysb_child_arm``) swaps the decision table inside that
namespace.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any

ST: Any = None  # type: ignore[assignment]  # sealed
ENTRIES: Any = None  # type: ignore[assignment]  # sealed
PATCHES: Any = None  # type: ignore[assignment]  # sealed
RECORDER: Any = None  # type: ignore[assignment]  # sealed
DENIED: Any = None  # type: ignore[assignment]  # sealed
REFUSAL: Any = None  # type: ignore[assignment]  # sealed
MAKE_DOOR: Any = None  # type: ignore[assignment]  # sealed
MAKE_FACE: Any = None  # type: ignore[assignment]  # sealed
IS_FACE: Any = None  # type: ignore[assignment]  # sealed
DEFER: Any = None  # type: ignore[assignment]  # sealed
REFUSE: Any = None  # type: ignore[assignment]  # sealed
EXC_OF: Any = None  # type: ignore[assignment]  # sealed
CHECK_MODULE: Any = None  # type: ignore[assignment]  # sealed
IS_GUARD_FRAME: Any = None  # type: ignore[assignment]  # sealed
IS_DOOR_FRAME: Any = None  # type: ignore[assignment]  # sealed
FRAME_CODE: Any = None  # type: ignore[assignment]  # sealed
DOOR_CODE_ID: Any = None  # type: ignore[assignment]  # sealed
RESOLVE: Any = None  # type: ignore[assignment]  # sealed
PLACE: Any = None  # type: ignore[assignment]  # sealed
GETFRAME: Any = None  # type: ignore[assignment]  # sealed
SEALED: Any = None  # type: ignore[assignment]  # sealed
PREFIXES: Any = None  # type: ignore[assignment]  # sealed
IS_LIBRARY: Any = None  # type: ignore[assignment]  # sealed
FRAMEWORK: Any = None  # type: ignore[assignment]  # sealed
FRAME_ARGS: Any = None  # type: ignore[assignment]  # sealed
INIT_EXEMPT: Any = None  # type: ignore[assignment]  # sealed
FRAMEWORK_CALLS: Any = None  # type: ignore[assignment]  # sealed
GET_IDENT: Any = None  # type: ignore[assignment]  # sealed
POSTS: Any = None  # type: ignore[assignment]  # sealed
TERMINAL_IOCTLS: Any = None  # type: ignore[assignment]  # sealed
OWN_MODULE_FACES: Any = None  # type: ignore[assignment]  # sealed
TRACE_ARGS: Any = None  # type: ignore[assignment]  # sealed
TRACE_SETTERS: Any = None  # type: ignore[assignment]  # sealed
FRAME_TYPE: Any = None  # type: ignore[assignment]  # sealed
PARTIAL: Any = None  # type: ignore[assignment]  # sealed
OWN_DIRS: Any = None  # type: ignore[assignment]  # sealed
NO_TRACE: Any = None  # type: ignore[assignment]  # sealed

#: The modules whose faces of C functions say the module itself as ``__module__``, not the
#: C module behind it (``signal``, not ``_signal``). A face is a Python function, no
#: builtin, and for a module without ``__all__`` the tools that list a module's contents
#: take a routine that is not built in as the module's only when its ``__module__`` names
#: it (pydoc; CPython's test_signal checks that every routine of ``signal`` that is not
#: built in says ``'signal'``, as signal.py's own Python functions over ``_signal`` do,
#: bpo-27718). With ``'_signal'`` the faces would drop out of ``help(signal)``. The other
#: public modules of faced C functions (os, pickle, threading) list them in ``__all__``,
#: so their faces keep CPython's value (plugins/pysb-guards/tests/test_faces.py).
_OWN_MODULE_FACES = frozenset({"signal"})


def _a_arm():
    if ST["armed"]:
        return None
    ST["verdicts"] = ST["pending"]
    ST["armed"] = True
    ST["close"]()
    return None


def _a_refusal(qualname):
    """The refusal of ``qualname``: an ApiDeniedError built outside sealed code."""
    group, category = ENTRIES[qualname]
    by_rule = ST["sources"].get(group) or ST["sources"].get(category) or ST["sources"].get("*")
    why = f" by {', '.join(by_rule)}" if by_rule else ""
    message = (
        f"call of '{group}' ({category}) refused{why}: add `api: allow: [{group}]` "
        f"(this function) or `api: allow: [{category}]` (the whole category) to the profile"
    )
    rule = f"api: allow: [{group}]"
    RECORDER.deny("api", group, category, rule)
    return REFUSE(DEFER(DENIED, message, qualname=group, category=category, suggested_rule=rule))


def _a_caller():
    """The nearest frame that is not pysb's guard machinery (told by identity: sealed
    code, a door, a face -- not by globals a frame of the program's may share)."""
    f = GETFRAME(2)
    while f is not None and IS_GUARD_FRAME(f):
        f = f.f_back
    return f


#: What pysb's bootstrap itself calls once the guards are armed: ``exec`` / ``compile`` of
#: the program, ``os.kill`` to pass a KeyboardInterrupt on, ``gc.get_objects`` to see
#: whether the exit has anything left to finalize (``pysb_core.child.ending``: the list
#: never leaves its frames, and no code of the program's runs while it exists). Nothing
#: else is exempt for it:
#: it also reads attributes of the program's exception and calls ``sys.excepthook`` and
#: ``sys.stderr.flush``, which the program may have made faces (a property whose getter is
#: ``sys.settrace``, ``flush = os.fork``).
_FRAMEWORK_CALLS = frozenset(
    {"builtins.exec", "builtins.eval", "builtins.compile", "os.kill", "gc.get_objects"}
)


def _a_exempt(group, dynamic):
    """Framework code's own calls (``FRAMEWORK_CALLS``), and for dynamic-code any library
    code, are not judged. A call no Python code made (atexit, a thread started on a face)
    is the program's."""
    f = _a_caller()
    if f is None:
        return False
    filename = FRAME_CODE(f).co_filename
    if type(filename) is not str:
        return False
    if filename.startswith(FRAMEWORK):
        return group in FRAMEWORK_CALLS
    return dynamic and IS_LIBRARY(filename, PREFIXES)


#: Calls a module makes while it is being imported, that the import itself needs (ctypes
#: opens the interpreter's own symbols as ``pythonapi``): an import right stays usable;
#: every call through the result is still judged (``ctypes.call_function``).
_INIT_EXEMPT = {"_ctypes.dlopen": "/ctypes/__init__.py", "ctypes.CDLL": "/ctypes/__init__.py"}


def _a_module_init(suffix):
    """True when the call is made by the library module ``suffix`` while it is imported:
    every frame from the caller up to that module's own ``<module>`` code runs code of that
    same file (a frame of the program's on the way -- a replaced ``__build_class__`` --
    makes it the program's call)."""
    f = _a_caller()
    for _ in range(8):
        if f is None:
            return False
        if IS_GUARD_FRAME(f):
            f = f.f_back
            continue
        code = FRAME_CODE(f)
        filename = code.co_filename
        if type(filename) is not str or not filename.endswith(suffix):
            return False
        name = code.co_name
        if type(name) is str and name == "<module>":
            return IS_LIBRARY(filename, PREFIXES)
        f = f.f_back
    return False


def _a_decide(qualname):
    """None when the call may go on, else a Refusal. One dict lookup once armed."""
    if ST["verdicts"].get(qualname, False):
        return None
    if not ST["armed"]:
        return None
    group, category = ENTRIES[qualname]
    dynamic = category == "dynamic-code"
    if _a_exempt(group, dynamic):
        return None
    suffix = INIT_EXEMPT.get(group)
    if suffix is not None and _a_module_init(suffix):
        return None
    if ST["learning"]:
        if group not in ST["learned"]:
            ST["learned"].add(group)
            RECORDER.learn("api", group, category, f"api: allow: [{group}]", category=category)
        return None
    return _a_refusal(qualname)


def _a_make_judge(qualname):
    def judge(args, kwargs):
        if ST["verdicts"].get(qualname, False) or not ST["armed"]:
            return None
        return _a_decide(qualname)

    return judge


def _a_current_frames_post(result, args, kwargs):
    """``sys._current_frames()``'s post step: the calling thread's entry is the frame that
    called the face, as CPython gives it (C code reads the thread's newest frame: here,
    the door's). The dictionary is the C function's own, fresh for this call."""
    if type(result) is dict:
        caller = _a_caller()
        if caller is not None:
            dict.__setitem__(result, GET_IDENT(), caller)
    return result


def _a_trace_judge(args, kwargs):
    """The judge of the trace door (``guard._traced_args``): C calls a trace or profile
    function ``(frame, event, arg)`` for every frame, the guards' own too -- a door's,
    whose code the program may not read, a face's, sealed code's, pysb's plain code's
    (the import finder). Under CPython there are no such frames: for one of them the
    program's function is not called, and no local trace function is set (``NO_TRACE``,
    a Value of None)."""
    if len(args) != 4 or kwargs:
        return None
    frame = args[1]
    if type(frame) is not FRAME_TYPE:
        return None
    if IS_GUARD_FRAME(frame):
        return NO_TRACE
    name = FRAME_CODE(frame).co_filename
    if type(name) is str and str.startswith(name, OWN_DIRS):
        return NO_TRACE
    return None


def _a_untraced(result, args, kwargs):
    """``sys.gettrace()`` / ``getprofile()``'s post step: the program's own function, not
    the wrapper ``sys.settrace`` put in its place (``partial(trace face, function)``)."""
    if type(result) is PARTIAL and result.func is ST["trace_face"]:
        wrapped = result.args
        if type(wrapped) is tuple and len(wrapped) == 1:
            return wrapped[0]
    return result


def _a_unjudged_dynamic(qualname):
    """True for ``eval``, ``exec`` and ``compile`` when the rules allow all three and nothing is
    learned: their faces would judge nothing (their door allows at the first lookup, and
    so does the ``exec`` / ``compile`` events' backstop), yet leave the face's entry in
    every traceback through them -- which C code reads as it is, without the splice on
    ``tb_frame`` (``PyErr_Display`` before 3.13, ``_testcapi.exception_print``: CPython's
    test_traceback) -- and two frames below the code ``exec`` runs. So no face then. All
    three or none: the ``exec`` / ``compile`` events cannot tell ``eval`` from ``exec``
    (both raise them), so with one of them denied the faces tell them apart."""
    names = ("builtins.eval", "builtins.exec", "builtins.compile")
    if qualname not in names or ST["learning"]:
        return False
    verdicts = ST["pending"]
    return all(verdicts.get(name, False) for name in names)


def _a_make_patcher(members):
    """The patch of one module: a face for each of its registry entries (``PATCHES``
    indices). The module is read and written by C code only (``RESOLVE`` / ``PLACE``): it
    may be the program's own object."""

    def patcher(module):
        CHECK_MODULE(module)
        for i in members:
            _module_name, attr, qualname, group = PATCHES[i]
            found = RESOLVE(module, attr, False, True)
            if found is None:
                continue
            owner, name, original = found
            if IS_FACE(original):
                continue
            if _a_unjudged_dynamic(qualname):
                continue  # nothing to judge: the builtin itself, no frame of pysb's
            face = ST["faces"].get(id(original))
            if face is None:
                post = POSTS.get(qualname)
                if post is not None:
                    post = ST["posts"][post]
                door = MAKE_DOOR(original, _a_make_judge(qualname), post, name=name)
                ST["door_groups"][DOOR_CODE_ID(door)] = group
                prepare = FRAME_ARGS if qualname in ("builtins.eval", "builtins.exec") else None
                if group in TRACE_SETTERS:
                    prepare = TRACE_ARGS
                public = group.rpartition(".")[0]
                module_name = public if public in OWN_MODULE_FACES else None
                face = MAKE_FACE(door, original, prepare, "", module_name)
                ST["faces"][id(original)] = face
                if not ST["armed"]:
                    ST["originals"].append((original, face))
            PLACE(owner, name, face, owner is module)

    return patcher


def _a_event_caller():
    """The frame that called the C function raising the current audit event: the one
    above the audit hook's door (the sealed frames of the dispatch below it)."""
    f = GETFRAME(2)
    while f is not None and not IS_DOOR_FRAME(f):
        f = f.f_back  # up to the audit hook (a door)
    return f.f_back if f is not None else None


def _a_judged_by_door(caller, groups):
    """True when ``caller`` is the door of a face of this guard that judged one of
    ``groups`` (the C function raising the event was called through it)."""
    if caller is None or not IS_DOOR_FRAME(caller):
        return False
    return ST["door_groups"].get(id(FRAME_CODE(caller))) in groups


def _a_make_event_handler(event, groups):
    def handler(args):
        if not ST["armed"]:
            return None
        verdicts = ST["verdicts"]
        if all(verdicts.get(g, False) for g in groups):
            return None
        caller = _a_event_caller()
        if _a_judged_by_door(caller, groups):
            return None  # through a face: judged there
        if caller is not None and caller.f_builtins is SEALED:
            # called by sealed code itself: the guards' own call (the file guard's SQLite
            # hook sets its authorizer through ctypes); no other code has these builtins
            return None
        framework = False
        if caller is not None:
            filename = FRAME_CODE(caller).co_filename
            framework = type(filename) is str and filename.startswith(FRAMEWORK)
        for group in groups:
            if not verdicts.get(group, False):
                if framework and group in FRAMEWORK_CALLS:
                    continue
                if ST["learning"]:
                    _a_decide(group)
                    return None
                return EXC_OF(_a_refusal(group))
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
    if caller is None or _a_judged_by_door(caller, names):
        return None
    filename = FRAME_CODE(caller).co_filename
    if type(filename) is not str:
        return EXC_OF(_a_refusal(next(n for n in names if not verdicts.get(n, False))))
    if filename.startswith(FRAMEWORK) or IS_LIBRARY(filename, PREFIXES):
        return None
    if ST["learning"]:
        return None
    denied = next(n for n in names if not verdicts.get(n, False))
    return EXC_OF(_a_refusal(denied))


#: ``ioctl`` requests that type into a terminal or take it over, refused whatever the rules
#: (as the OS providers' seccomp filter refuses TIOCSTI and TIOCLINUX): without an OS layer
#: (``subprocess``) the program holds the user's terminal, and these push keystrokes into
#: the shell that reads it once the run is over (issue 26), make it the console, take it
#: as a controlling terminal from another session (root), or remap a virtual console's
#: keys to type a string. The kernel compares the request's low 32 bits.
_TERMINAL_IOCTLS = {
    0x5412: "TIOCSTI",  # push a byte into the terminal's input
    0x541C: "TIOCLINUX",  # virtual console: paste the selection, among others
    0x541D: "TIOCCONS",  # redirect the console's output here
    0x540E: "TIOCSCTTY",  # take the terminal as controlling terminal (forced, as root)
    0x4B47: "KDSKBENT",  # virtual console: set a key's meaning
    0x4B49: "KDSKBSENT",  # virtual console: set the string a function key types
    0x4B4D: "KDSETKEYCODE",  # virtual console: remap a scancode
}


def _a_ioctl_event(args):
    """``fcntl.ioctl`` (its audit event, raised by the C function however it is reached):
    a request of ``TERMINAL_IOCTLS`` is refused, every other passes."""
    if not ST["armed"] or len(args) < 2 or type(args[1]) is not int:
        return None
    name = TERMINAL_IOCTLS.get(args[1] & 0xFFFFFFFF)
    if name is None:
        return None
    message = (
        f"ioctl {name} refused: a sandboxed program may not type into or take over a "
        "terminal (it may be the one your shell reads); no rule allows it"
    )
    RECORDER.deny("api", "fcntl.ioctl", name, "")
    return EXC_OF(REFUSE(DEFER(DENIED, message, qualname="fcntl.ioctl", category="terminal")))
