"""Doors, faces and the audit hook: how the guards keep originals and state out of reach.

A guarded function is split in two:

- the **face** is what modules expose (``os.stat`` becomes a face). It is a plain closure
  over its door; reading its closure, globals or ``__wrapped__`` (there is none) gives
  nothing worth having. It turns a refusal into a raised exception, so that tracebacks
  show the face, never the door.
- the **door** holds the original and the judge as *code constants*, has no closure, no
  defaults and an empty globals dictionary. Reading a code object (``f.__code__`` or
  ``frame.f_code``) raises a PEP 578 audit event, and our audit hook refuses it for doors:
  ``__closure__``, ``__globals__``, ``__wrapped__`` and ``__defaults__`` lead nowhere.

Judges and everything they use are built by *sealed* factories: functions re-created with
a private globals dictionary (a snapshot of the builtins taken at install), so that
the program cannot swap a helper or a builtin under them through a module's globals. No
guard keeps its state in module globals; there is no ``_armed`` flag to flip.

The audit hook cannot be removed from Python. Besides protecting doors it carries the
guards' *backstop* handlers: ``open``, ``os.*``, ``subprocess.Popen``, ``ctypes.dlopen``...
are judged there too, so an original recovered some other way (a C type's ``__init__``,
``type(f.raw)``) still meets the policy. Native code can undo all of this: the OS layer is
the boundary (docs/security.md).
"""

from __future__ import annotations

import builtins
import os
import sys

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def _unchanged(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A ``prepare`` that changes nothing."""
    return args, kwargs


def _types() -> tuple[type, type, type, type]:
    """FunctionType, CodeType, FrameType and TracebackType without importing ``types``
    (not otherwise needed in the sandbox before the program)."""
    try:
        raise TypeError
    except TypeError as e:
        tb = e.__traceback__
    frame = sys._getframe()
    return type(_unchanged), type(frame.f_code), type(frame), type(tb)


_FunctionType, _CodeType, _FrameType, _TracebackType = _types()
del _types

#: The globals of every door. No door code reads a global name; the builtins are there for
#: C functions that default to their caller's builtins (``exec`` of a module's code).
DOOR_NS: dict[str, Any] = {"__builtins__": vars(builtins)}


class Refusal:
    """What a door returns instead of raising: the face raises ``exc`` (with ``tb``)."""

    __slots__ = ("exc", "tb")

    def __init__(self, exc: BaseException, tb: Any = None) -> None:
        self.exc = exc
        self.tb = tb


class Value:
    """What a judge returns to make the door answer ``value`` without calling the original
    (``os.access`` answers False for a hidden path)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


# Sealed code never calls code the program can change. Refusal, Value and every exception
# class with Python code (pysb's errors, ``socket.gaierror``...) are classes the program
# reaches through the class graph: their ``__init__`` can be replaced, and a replacement
# called from a judge would run the program's code with the judge's frame below it (a
# generator frame resumed there walks ``f_back`` to the judge's globals: nothing audits
# ``f_back``). So sealed code
#
# - raises :func:`defer`'s placeholder instead of constructing such an exception: a plain
#   ``RuntimeError`` (a static built-in type, constructed by C code alone) carrying the
#   class and its arguments. The door turns it into a Refusal and the face (or the audit
#   hook) builds the real exception with :data:`BUILT`, when no sealed frame is left on the
#   stack. A fresh exception also carries no ``__context__`` from inside the judge;
# - makes its Refusal and Value objects with :func:`refusal_of` / :func:`value_of` (C calls:
#   ``object.__new__`` and the slots' own descriptors, taken at install), and reads them
#   with the descriptors too (``EXC_OF``): a property the program puts on the class in
#   place of a slot never runs in a sealed frame.
#
# The four are handed to sealed engines by :func:`builders` (``DEFER``, ``REFUSE``,
# ``NEW_VALUE``, ``EXC_OF``), as copies with private globals.

_DEFERRED = object()  # what marks a placeholder: only sealed code and BUILT use it


def defer(cls: type, *args: Any, **kwargs: Any) -> RuntimeError:
    """The placeholder sealed code raises (or refuses with) instead of ``cls(*args,
    **kwargs)``: the exception is built outside every sealed frame (:data:`BUILT`)."""
    return RuntimeError(_DEFERRED, cls, args, kwargs)


def refusal_of(exc: BaseException) -> Refusal:
    """A :class:`Refusal` of ``exc``, made by C code alone (see above)."""
    r = _NEW(Refusal)
    _SET_EXC(r, exc)
    _SET_TB(r, None)
    return r


def value_of(value: Any) -> Value:
    """A :class:`Value` of ``value``, made by C code alone (see above)."""
    v = _NEW(Value)
    _SET_VALUE(v, value)
    return v


_NEW = object.__new__
_SET_EXC = Refusal.__dict__["exc"].__set__
_SET_TB = Refusal.__dict__["tb"].__set__
_SET_VALUE = Value.__dict__["value"].__set__
_EXC_OF = Refusal.__dict__["exc"].__get__


# Templates. They are never called: their code is copied with each placeholder constant
# replaced (``_door``), or given globals of their own (the faces' builders). Compiled with
# this module, they cost nothing at sandbox start (code compiled from text there did).
#
# Doors (``_t_door``, ``_t_door_nopost``, the gates, ``_t_audit_hook``): every name they use
# is a placeholder replaced by the object itself, so the code loads them with LOAD_CONST:
# no global, no closure, no local ever holds the original or the judge. A placeholder is
# written ``("@J" if 1 else 0)``: the compiler drops the test and loads "@J" as a constant,
# and, unlike a call on a bare literal, warns about nothing (in an ``except`` clause a bare
# literal draws no warning either).
#
# Gates are doors that answer the common case themselves: ``__import__`` and
# ``import_module`` of a name whose top-level package is in "@FAST" (a set only sealed code
# and gates hold) go straight to the original; every other call goes through "@SLOW", the
# full door and its judge. Only an exact ``str`` takes the short way (a subclass could
# answer ``partition`` with anything), and "@FAST" holds only names the judge allows
# without looking further: the short way never answers differently from the long one.
# A dotted name whose package is in "@FAST" joins it (up to "@LIMIT" entries), sparing
# ``partition`` next time: the verdict depends on the exact name alone, never on
# ``sys.modules``, and a dotted entry can never match a top-level name.
#
# Faces (``_t_build*``) get globals of their own (``_FACE_NS``) and show as
# `File "<pysb guard>"` in tracebacks. A gate's face only raises refusals: the import
# judges behind gates never answer a Value.


def _t_door(*args, **kwargs):
    try:
        v = ("@J" if 1 else 0)(args, kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, None)
    if v is not None:
        if v.__class__ is not ("@T" if 1 else 0):
            return v
        args, kwargs = v
    try:
        r = ("@O" if 1 else 0)(*args, **kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)
    return ("@P" if 1 else 0)(r, args, kwargs)


def _t_door_nopost(*args, **kwargs):
    try:
        v = ("@J" if 1 else 0)(args, kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, None)
    if v is not None:
        if v.__class__ is not ("@T" if 1 else 0):
            return v
        args, kwargs = v
    try:
        return ("@O" if 1 else 0)(*args, **kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)


def _t_gate___import__(name, globals=None, locals=None, fromlist=(), level=0):
    if level is ("@ZERO" if 1 else 0) and ("@TYPE" if 1 else 0)(name) is ("@STR" if 1 else 0):
        if name not in ("@FAST" if 1 else 0):
            if name.partition(".")[0] not in ("@FAST" if 1 else 0):
                return ("@SLOW" if 1 else 0)(name, globals, locals, fromlist, level)
            if ("@LEN" if 1 else 0)("@FAST" if 1 else 0) < ("@LIMIT" if 1 else 0):
                ("@FAST" if 1 else 0).add(name)
        try:
            return ("@O" if 1 else 0)(name, globals, locals, fromlist, level)
        except "@BE" as e:  # noqa: B030
            return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)
    return ("@SLOW" if 1 else 0)(name, globals, locals, fromlist, level)


def _t_gate_import_module(name, package=None):
    if ("@TYPE" if 1 else 0)(name) is ("@STR" if 1 else 0):
        if name not in ("@FAST" if 1 else 0):
            if name.partition(".")[0] not in ("@FAST" if 1 else 0):
                return ("@SLOW" if 1 else 0)(name, package)
            if ("@LEN" if 1 else 0)("@FAST" if 1 else 0) < ("@LIMIT" if 1 else 0):
                ("@FAST" if 1 else 0).add(name)
        try:
            return ("@O" if 1 else 0)(name, package, ("@ZERO" if 1 else 0))
        except "@BE" as e:  # noqa: B030
            return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)
    return ("@SLOW" if 1 else 0)(name, package)


def _t_built(exc):
    # The exception a face or the audit hook raises for ``exc``: a ``defer`` placeholder is
    # built here, where no sealed frame is below (the program's code may run: an __init__
    # of its own is its business); anything else is itself. A door: its code and constants
    # are not readable, its frame holds only ``exc``.
    if ("@TYPE" if 1 else 0)(exc) is ("@RTE" if 1 else 0):
        a = exc.args
        if ("@LEN" if 1 else 0)(a) == 4 and a[0] is ("@MARK" if 1 else 0):
            return a[1](*a[2], **a[3])
    return exc


def _t_audit_hook(event, args):
    if event in ("@W" if 1 else 0):
        r = ("@D" if 1 else 0)(event, args)
        if r is not None:
            raise ("@B" if 1 else 0)(r)


def _t_build(door, refusal, value, prepare, built):
    if prepare is None:

        def face(*args, **kwargs):
            r = door(*args, **kwargs)
            c = r.__class__
            if c is refusal:
                raise built(r.exc).with_traceback(r.tb)
            if c is value:
                return r.value
            return r

        return face

    if "skips_lone_str" in prepare.__dict__:

        def face(*args, **kwargs):
            # No global name: faces may be called from sealed code, and a global (``len``)
            # could be the program's, put into this namespace or into builtins.
            if kwargs or args.__len__() != 1 or args[0].__class__ is not "".__class__:
                args, kwargs = prepare(args, kwargs)
            r = door(*args, **kwargs)
            c = r.__class__
            if c is refusal:
                raise built(r.exc).with_traceback(r.tb)
            if c is value:
                return r.value
            return r

        return face

    def face(*args, **kwargs):
        args, kwargs = prepare(args, kwargs)
        r = door(*args, **kwargs)
        c = r.__class__
        if c is refusal:
            raise built(r.exc).with_traceback(r.tb)
        if c is value:
            return r.value
        return r

    return face


def _t_build___import__(door, refusal, value, prepare, built):
    def face(name, globals=None, locals=None, fromlist=(), level=0):
        r = door(name, globals, locals, fromlist, level)
        if r.__class__ is refusal:
            raise built(r.exc).with_traceback(r.tb)
        return r

    return face


def _t_build_import_module(door, refusal, value, prepare, built):
    def face(name, package=None):
        r = door(name, package)
        if r.__class__ is refusal:
            raise built(r.exc).with_traceback(r.tb)
        return r

    return face


def _renamed(code: Any, filename: str) -> Any:
    """``code`` (and the code objects it holds) shown as coming from ``filename``."""
    consts = tuple(_renamed(c, filename) if type(c) is _CodeType else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


_TEMPLATES = {
    name[3:]: _renamed(fn.__code__, "<pysb guard>" if "build" in name else "<pysb-door>")
    for name, fn in list(globals().items())
    if name.startswith("_t_")
}
_DEFAULTS = {"gate___import__": _t_gate___import__.__defaults__}
_DEFAULTS["gate_import_module"] = _t_gate_import_module.__defaults__
_FACE_NS: dict[str, Any] = {"__builtins__": builtins, "__name__": "pysb_guards.<face>"}
_BUILDERS = {
    kind: _FunctionType(_TEMPLATES["build" + kind], _FACE_NS, "build")
    for kind in ("", "___import__", "_import_module")
}
_DOOR_CONSTS = {
    "@RTE": RuntimeError,
    "@BE": BaseException,
    "@R": Refusal,
    "@T": tuple,
    "@TYPE": type,
    "@STR": str,
    "@LEN": len,
}


def _door(template: str, name: str, subst: dict[str, Any]) -> Callable[..., Any]:
    """A function of ``template`` whose placeholder constants are replaced by ``subst``."""
    code = _TEMPLATES[template]
    consts = tuple(
        subst.get(c, _DOOR_CONSTS.get(c, c)) if type(c) is str else c for c in code.co_consts
    )
    code = code.replace(co_consts=consts, co_name=name, co_qualname=name)
    return _FunctionType(code, DOOR_NS, name, _DEFAULTS.get(template))


#: The door that builds what faces and the audit hook raise (see :func:`defer`).
BUILT = _door("built", "built", {"@MARK": _DEFERRED})


def make_door(
    original: Callable[..., Any],
    judge: Callable[[tuple, dict], Any],
    post: Callable[[Any, tuple, dict], Any] | None = None,
    name: str = "door",
) -> Callable[..., Any]:
    """A sealed function: ``judge(args, kwargs)`` then ``original(*args, **kwargs)``.

    The judge returns None (go on), ``(args, kwargs)`` (call with these instead), a
    :class:`Refusal` or a :class:`Value`. ``post(result, args, kwargs)`` may filter the
    result. Exceptions of the original come back as a Refusal without the door's frame.
    """
    template = "door" if post is not None else "door_nopost"
    return _door(template, name, {"@J": judge, "@O": original, "@P": post})


#: What each gate's original is called with: ``__import__`` itself; for ``import_module``,
#: ``importlib._bootstrap._gcd_import(name, package, 0)`` -- what the standard
#: ``import_module`` calls for an absolute name, one frame fewer.
GATES = ("__import__", "import_module")

#: How many names a gate's set may hold (top-level names plus the dotted names it adds).
GATE_LIMIT = 4096


def make_gate(
    kind: str, original: Callable[..., Any], slow: Callable[..., Any], fast: set[str]
) -> Callable[..., Any]:
    """A sealed door for ``kind`` (one of :data:`GATES`): names whose top-level package is
    in ``fast`` go to ``original``; every other call to ``slow`` (a door, with its judge).

    ``fast`` must hold only names ``slow``'s judge lets through on the name alone; the set
    is the caller's (sealed state), so it can grow before user code.
    """
    subst = {"@O": original, "@SLOW": slow, "@FAST": fast, "@ZERO": 0, "@LIMIT": GATE_LIMIT}
    return _door("gate_" + kind, kind, subst)


def make_face(
    door: Callable[..., Any],
    like: Any = None,
    prepare: Callable[[tuple, dict], tuple[tuple, dict]] | None = None,
    kind: str = "",
) -> Callable[..., Any]:
    """The public side of ``door``: raise refusals, answer values, look like ``like``.

    ``prepare(args, kwargs)`` normalises arguments before the door sees them; when it
    says ``skips_lone_str``, a call with one exact ``str`` argument skips it. ``kind``
    (one of :data:`GATES`) gives the face that gate's signature: explicit parameters are
    cheaper to pass on than ``*args, **kwargs``.
    """
    face = _BUILDERS["_" + kind if kind else ""](door, Refusal, Value, prepare, BUILT)
    if like is not None:
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(face, attr, getattr(like, attr))
            except (AttributeError, TypeError):
                pass
    face.__pysb_face__ = True
    return face


def face_codes() -> tuple[Any, ...]:
    """The code of every kind of face: frames the import guard's "who imports" walk skips."""
    return tuple(
        c for b in _BUILDERS.values() for c in b.__code__.co_consts if type(c) is _CodeType
    )


def is_face(obj: Any) -> bool:
    return type(obj) is _FunctionType and getattr(obj, "__pysb_face__", False) is True


def guard(original: Callable[..., Any], judge: Callable[[tuple, dict], Any], **kw: Any) -> Any:
    """Face and door in one call: the usual way to guard one function."""
    prepare = kw.pop("prepare", None)
    door = make_door(original, judge, kw.pop("post", None), getattr(original, "__name__", "door"))
    return make_face(door, original, prepare)


def _namespaces() -> tuple[Callable[[], dict[str, Any]], Callable[[], object]]:
    mark = object()

    def private_namespace() -> dict[str, Any]:
        """Fresh globals for sealed code: a *copy* of the builtins as they are now.

        Taken when a guard installs (before user code), it cannot be changed by the program
        replacing ``builtins.len`` later. ``__pysb_sealed__`` tells the guards' frame walks
        which frames are theirs. No module global keeps a copy.
        """
        snapshot = dict(vars(builtins))
        ns: dict[str, Any] = dict(snapshot)
        ns["__builtins__"] = snapshot
        ns["__name__"] = "pysb_guards.<sealed>"
        ns["__pysb_sealed__"] = mark
        return ns

    return private_namespace, lambda: mark


_private_namespace, sealed_mark = _namespaces()
del _namespaces


def seal_group(functions: list[Callable[..., Any]], **values: Any) -> dict[str, Any]:
    """Re-create ``functions`` in one private namespace (plus ``values``); return it.

    The functions call each other by name as usual, but the names resolve in a dictionary
    only they hold (with a snapshot of the original builtins), so the program can neither
    read their state through a module's ``__dict__`` nor swap a helper under them. Callers
    keep the entry points they need and drop the namespace.
    """
    ns = _private_namespace()
    ns.update(values)
    for fn in functions:
        ns[fn.__name__] = _FunctionType(
            fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__
        )
    return ns


def builders() -> dict[str, Callable[..., Any]]:
    """Private copies of :func:`make_door`, :func:`make_gate`, :func:`make_face`,
    :func:`guard` and :func:`is_face` (as ``MAKE_DOOR``, ``MAKE_GATE``, ``MAKE_FACE``,
    ``GUARD``, ``IS_FACE``: the names sealed engines use), for guards that build faces after
    the program started (lazy patches): bind them at install, never call this module's own
    functions then. With them ``DEFER``, ``REFUSE``, ``NEW_VALUE`` and ``EXC_OF``: how sealed
    code refuses without running code the program can change (see :func:`defer`).

    This module's functions look up ``_door``, ``_TEMPLATES``, ``_BUILDERS``... in its
    globals, and the program can reach that dictionary (``Refusal.__init__.__globals__``,
    through the class graph) and rewrite it: a rewritten ``_door`` would receive the judge of
    the next face built. The copies resolve those names in a private namespace holding
    copies of the tables; only the guard that asked holds them.
    """
    ns = _private_namespace()
    ns.update(
        _TEMPLATES=dict(_TEMPLATES),
        _DOOR_CONSTS=dict(_DOOR_CONSTS),
        _DEFAULTS=dict(_DEFAULTS),
        _BUILDERS=dict(_BUILDERS),
        _FunctionType=_FunctionType,
        DOOR_NS=DOOR_NS,
        Refusal=Refusal,
        Value=Value,
        GATE_LIMIT=GATE_LIMIT,
        _DEFERRED=_DEFERRED,
        _NEW=_NEW,
        _SET_EXC=_SET_EXC,
        _SET_TB=_SET_TB,
        _SET_VALUE=_SET_VALUE,
        BUILT=BUILT,
    )
    for fn in (_door, make_door, make_gate, make_face, guard, is_face, defer, refusal_of, value_of):
        ns[fn.__name__] = _FunctionType(
            fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__
        )
    names = {"DEFER": "defer", "REFUSE": "refusal_of", "NEW_VALUE": "value_of"}
    out = {n.upper(): ns[n] for n in ("make_door", "make_gate", "make_face", "guard", "is_face")}
    out.update({k: ns[v] for k, v in names.items()}, EXC_OF=_EXC_OF)
    return out


def private_recorder(recorder: Any) -> Any:
    """The event recorder as judges call it: ``.deny``, ``.learn``, ``.learning``.

    A judge must never run code the program can replace. ``Recorder``'s methods are looked
    up on a class the program reaches through the class graph (and they call ``os.write``
    and ``json`` by module attribute): replaced, they would run the program's code inside a
    judge, whose frames lead to the guard's state. Here the two calls are closures with
    private globals over C functions bound now, held by a ``SimpleNamespace`` (a built-in
    type nobody can add a descriptor to); the report channel and the de-duplication set are
    the recorder's own, so every guard shares them.
    """
    import _json
    import time
    import types

    from pysb_core.events import reporter_functions

    deny, learn = sealed(reporter_functions)(
        getattr(recorder, "_fd", None),
        getattr(recorder, "_seen", set()),
        os.write,
        time.time,
        os.getpid,
        _json.encode_basestring_ascii,
    )
    return types.SimpleNamespace(deny=deny, learn=learn, learning=bool(recorder.learning))


def sealed(factory: Callable[..., Any]) -> Callable[..., Any]:
    """Re-create ``factory`` with private globals (a snapshot of the original builtins).

    Every closure the factory creates inherits those globals: nothing the program can reach
    through a module's ``__dict__`` or ``builtins`` can replace a name they use.
    """
    ns = _private_namespace()
    return _FunctionType(
        factory.__code__, ns, factory.__name__, factory.__defaults__, factory.__closure__
    )


# ---------------------------------------------------------------------------------------
# The audit hook
# ---------------------------------------------------------------------------------------


def _hook_factory(
    door_ns: dict, function_type: type, frame_type: type, getframe: Any, get_ident: Any, mark: Any
) -> tuple:
    """Build the dispatcher of the single audit hook and the function adding handlers
    (with ``close``, ``safe_frame`` and the set of events the dispatcher needs to see).

    Handlers *return* the exception to raise (or None): the hook itself is a door, so a
    traceback of a refusal shows only the door's frame, whose code is not readable.

    The dispatcher also keeps the guards' frames out of the program's reach: a frame
    obtained by ``sys._getframe``, ``tb_frame``, ``gi_frame``, ``cr_frame`` or ``ag_frame``
    from code that is not the guards' own is refused when a sealed frame lies on its
    chain (code the program runs while a judge is on the stack -- a signal handler -- must
    not walk up to the judge's globals).
    """
    handlers: dict[str, tuple] = {}
    # The events the dispatcher looks at: the hook (a door holding this set) leaves every
    # other event -- most of them, ``socket.__new__``, ``import``, ``compile``... -- at once.
    watched = {"object.__getattr__", "sys._getframe"}
    closed = [False]
    busy: set = set()
    frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}

    def sealed_chain(frame):
        while frame is not None:
            if dict.get(frame.f_globals, "__pysb_sealed__") is mark:
                return True
            frame = frame.f_back
        return False

    def guard_frame(frame):
        """None when ``frame`` may be handed out, else the exception refusing it."""
        if not sealed_chain(frame):
            return None  # the common case: no guard frame above it
        caller = getframe(4)  # guard_frame, dispatch, the hook (a door), the C function's caller
        if caller is not None:
            g = caller.f_globals
            if g is door_ns or dict.get(g, "__pysb_sealed__") is mark:
                return None  # the guards' own frame walks
        return PermissionError("pysb: frames of the sandbox's guards are not reachable")

    def dispatch(event, args):
        hs = handlers.get(event)
        if hs is not None:
            for h in hs:
                r = h(args)
                if r is not None:
                    return r
        if event == "object.__getattr__":
            obj = args[0]
            name = args[1]
            door_code = name == "__code__" and type(obj) is function_type
            door_code = door_code and obj.__globals__ is door_ns
            door_frame = name == "f_code" and type(obj) is frame_type
            if door_code or (door_frame and obj.f_globals is door_ns):
                return AttributeError("pysb: the code of a guard door is not readable")
            if name in frame_attrs:
                me = get_ident()
                if me in busy:
                    return None
                busy.add(me)
                try:
                    return guard_frame(getattr(obj, name, None))
                finally:
                    busy.discard(me)
        elif event == "sys._getframe":
            me = get_ident()
            if me in busy:
                return None
            busy.add(me)
            try:
                return guard_frame(args[0])
            finally:
                busy.discard(me)
        return None

    def add(event, handler):
        if closed[0]:
            return PermissionError("pysb: audit handlers can only be added before user code")
        handlers[event] = (*handlers.get(event, ()), handler)
        watched.add(event)
        return None

    def close():
        closed[0] = True

    def safe_frame(frame):
        """The frame a program's signal handler may receive (None inside the guards)."""
        return None if sealed_chain(frame) else frame

    return dispatch, add, close, safe_frame, watched


def _make_hook(
    dispatch: Callable[[str, tuple], Any], watched: set[str]
) -> Callable[[str, tuple], None]:
    return _door("audit_hook", "audit_hook", {"@D": dispatch, "@W": watched, "@B": BUILT})


_installed: list[Any] = []  # holds the registration face; set once


def audit_registry() -> tuple[Callable[[str, Callable[[tuple], None]], None], Callable[[], None]]:
    """Install the audit hook once; return faces to add handlers and to close registration.

    The faces only reach the hook's table through doors: after ``close()`` (called when the
    guards are armed) nobody can add, remove or replace a handler from Python.
    """
    if not _installed:
        import _thread

        dispatch, add, close, safe_frame, watched = sealed(_hook_factory)(
            DOOR_NS, _FunctionType, _FrameType, sys._getframe, _thread.get_ident, sealed_mark()
        )
        sys.addaudithook(_make_hook(dispatch, watched))
        allow = _allow_all
        _installed.append((guard(_returning(add), allow), guard(close, allow)))
        _guard_signal_handlers(guard(safe_frame, allow))
    return _installed[0]


def _returning(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn an engine function's returned exception into a Refusal for its face."""

    def call(*args: Any) -> Any:
        r = fn(*args)
        return Refusal(r) if isinstance(r, BaseException) else r

    return call


def clean_traceback(tb: Any, is_private: Callable[[Any], bool]) -> Any:
    """The traceback ``tb`` without the entries of private frames (sealed code)."""
    kept = []
    while tb is not None:
        if not is_private(tb.tb_frame):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for entry in reversed(kept):
        out = _TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out


def _allow_all(args: tuple, kwargs: dict) -> None:
    return None


def caller_is_door(frame: Any) -> bool:
    return frame is not None and frame.f_globals is DOOR_NS


def _guard_signal_handlers(safe_frame: Callable[[Any], Any]) -> None:
    """A handler the program installs receives ``None`` instead of a frame of the guards.

    Python calls a signal handler between any two bytecodes, with the interrupted frame:
    it could be a judge's, whose globals hold the guard's state. ``signal.signal`` wraps
    the program's handler; ``signal.getsignal`` still answers the program's own.
    """
    import _signal

    original_signal = _signal.signal
    original_getsignal = _signal.getsignal
    wrappers: dict[int, tuple[Any, Any]] = {}

    def unwrap(handler: Any) -> Any:
        entry = wrappers.get(id(handler))
        return entry[1] if entry is not None and entry[0] is handler else handler

    def signal(signalnum: Any, handler: Any) -> Any:
        if callable(handler):
            user = handler

            def wrapper(signum: int, frame: Any) -> Any:
                return user(signum, safe_frame(frame))

            previous = original_signal(signalnum, wrapper)
            wrappers[id(wrapper)] = (wrapper, user)
        else:
            previous = original_signal(signalnum, handler)
        return unwrap(previous)

    def getsignal(signalnum: Any) -> Any:
        return unwrap(original_getsignal(signalnum))

    signal.__doc__, getsignal.__doc__ = original_signal.__doc__, original_getsignal.__doc__
    faces = {
        "signal": guard(signal, _allow_all),
        "getsignal": guard(getsignal, _allow_all),
    }
    modules = [_signal, sys.modules.get("signal")]
    for module in modules:
        if module is None:
            continue
        for name, face in faces.items():
            if getattr(module, name, None) in (original_signal, original_getsignal):
                setattr(module, name, face)
    from pysb_guards._patch import defer_sweep

    defer_sweep({id(original_signal): faces["signal"], id(original_getsignal): faces["getsignal"]})
