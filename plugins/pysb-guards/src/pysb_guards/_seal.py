"""Doors, faces and the audit hook: how the guards keep originals and state out of reach.

A guarded function is split in two:

- the **face** is what modules expose (``os.stat`` becomes a face). Its code holds its door,
  its ``prepare`` and the C functions it needs as *constants*: no closure, no global name.
  A copy of a face's code (readable) with other globals behaves as the face itself. It
  turns a refusal into a raised exception, so that tracebacks show the face, never the door.
- the **door** holds the original and the judge as *code constants*, has no closure, no
  defaults and an empty globals dictionary. Reading a code object (``f.__code__`` or
  ``frame.f_code``) raises a PEP 578 audit event, and our audit hook refuses it for doors
  (except to the guards' own sealed code): ``__closure__``, ``__globals__``, ``__wrapped__``
  and ``__defaults__`` lead nowhere.

Judges and everything they use are built by *sealed* factories: functions re-created with
a private globals dictionary (a snapshot of the builtins taken at install), so that
the program cannot swap a helper or a builtin under them through a module's globals. No
guard keeps its state in module globals; there is no ``_armed`` flag to flip.

**Sealed code never calls code the program can change.** ``frame.f_back`` is not audited:
program code that runs while a sealed frame is on the stack (a generator frame taken
earlier and resumed there) walks up to that frame and reads its globals -- the guard's
whole state. So sealed code builds no exception of a class with Python code (it raises
:func:`defer`'s placeholder), makes and reads ``Refusal`` / ``Value`` with C calls only,
accepts only exact built-in types from the program, reads C heap types the program can
write to (``os.stat_result``) through descriptors taken at install, and looks into no
dictionary the program can put a key of its own into (a ``str`` subclass whose ``__eq__``
runs when a lookup collides with its hash) without checking its keys first.

**The guards' own frames are told by identity.** A sealed frame runs with one of the
private namespaces made here (recorded by ``id``, kept alive, none made once the guards are
armed); a door frame runs a door's code, a face frame a face's code (both recorded when made,
kept alive). Globals alone prove nothing: ``DOOR_NS`` is reachable from any door.

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
_ModuleType = type(sys)
del _types

#: The globals of every door. No door code reads a global name; the builtins are there for
#: C functions that default to their caller's builtins (``exec`` of a module's code).
DOOR_NS: dict[str, Any] = {"__builtins__": vars(builtins)}

#: The globals of every face (faces read no global name either).
_FACE_NS: dict[str, Any] = {"__builtins__": builtins, "__name__": "pysb_guards.<face>"}


class Refusal:
    """What a door returns instead of raising: the face raises ``exc`` (with ``tb``)."""

    __slots__ = ("exc", "tb")

    def __init__(self, exc: BaseException, tb: Any = None) -> None:
        self.exc = exc
        self.tb = tb

    def raised(self) -> BaseException:
        """The exception the face raises: a :func:`defer` placeholder is built now."""
        return built(self.exc)


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
#   hook) builds the real exception with :func:`built`, when no sealed frame is left on the
#   stack. A fresh exception also carries no ``__context__`` from inside the judge;
# - makes its Refusal and Value objects with :func:`refusal_of` / :func:`value_of` (C calls:
#   ``object.__new__`` and the slots' own descriptors, taken at install), and reads them
#   with the descriptors too (``EXC_OF``): a property the program puts on the class in
#   place of a slot never runs in a sealed frame. Doors and faces do the same.
#
# The four are handed to sealed engines by :func:`builders` (``DEFER``, ``REFUSE``,
# ``NEW_VALUE``, ``EXC_OF``), as copies with private globals.

_DEFERRED = object()  # what marks a placeholder: only sealed code and built() use it


def defer(cls: type, *args: Any, **kwargs: Any) -> RuntimeError:
    """The placeholder sealed code raises (or refuses with) instead of ``cls(*args,
    **kwargs)``: the exception is built outside every sealed frame (:func:`built`)."""
    return RuntimeError(_DEFERRED, cls, args, kwargs)


def built(exc: BaseException) -> BaseException:
    """The exception ``exc`` stands for: a :func:`defer` placeholder is constructed now
    (in a face or the audit hook, where the program's code may run), anything else is
    itself. Runs outside sealed frames; what it runs is the program's own business."""
    if type(exc) is RuntimeError:
        a = exc.args
        if len(a) == 4 and a[0] is _DEFERRED:
            return a[1](*a[2], **a[3])
    return exc


def refusal_of(exc: BaseException, tb: Any = None) -> Refusal:
    """A :class:`Refusal` of ``exc``, made by C code alone (see above)."""
    r = _NEW(Refusal)
    _SET_EXC(r, exc)
    _SET_TB(r, tb)
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
_TB_OF = Refusal.__dict__["tb"].__get__
_VALUE_OF = Value.__dict__["value"].__get__


def _allow_all(args: tuple, kwargs: dict) -> None:
    """The judge that lets every call through (the doors use a private copy of it)."""
    return None


# Templates. They are never called: their code is copied with each placeholder constant
# replaced (``_door``, ``_face``). Compiled with this module, they cost nothing at sandbox
# start (code compiled from text there did).
#
# Every name they use is a placeholder replaced by the object itself, so the code loads
# them with LOAD_CONST: no global, no closure, no local ever holds the original or the judge.
# A placeholder is written ``("@J" if 1 else 0)``: the compiler drops the test and loads "@J"
# as a constant, and, unlike a call on a bare literal, warns about nothing (in an ``except``
# clause a bare literal draws no warning either).
#
# Doors (``_t_door``, ``_t_door_nopost``, the gates, ``_t_audit_hook``) show as
# `File "<pysb-door>"`, faces (``_t_face*``) as `File "<pysb guard>"` in tracebacks.
#
# A door refuses keyword names that are not exact ``str`` before its judge looks at them: a
# ``str`` subclass whose hash collides with ``"dir_fd"`` would run its ``__eq__`` in
# ``kwargs.get("dir_fd")``.
#
# Gates are doors that answer the common case themselves: ``__import__`` and
# ``import_module`` of a name whose top-level package is in "@FAST" (a set only sealed code
# and gates hold) go straight to the original; every other call goes through "@SLOW", the
# full door and its judge. Only an exact ``str`` takes the short way (a subclass could
# answer ``partition`` with anything), and "@FAST" holds only names the judge allows
# without looking further: the short way never answers differently from the long one.
# A dotted name whose package is in "@FAST" joins it (up to "@LIMIT" entries), sparing
# ``partition`` next time: the verdict depends on the exact name alone, never on
# ``sys.modules``, and a dotted entry can never match a top-level name. A relative
# ``__import__`` goes to "@SLOW" with the importing module's package read out of its
# globals by "@NORM" (plain code: reading a dictionary of the program may run the
# program's code), in a fresh dictionary that the judge and the original both read.


def _t_door(*args, **kwargs):
    if kwargs:
        for k in kwargs:
            if ("@TYPE" if 1 else 0)(k) is not ("@STR" if 1 else 0):
                return ("@R" if 1 else 0)(("@TE" if 1 else 0)("keywords must be strings"), None)
    try:
        v = ("@J" if 1 else 0)(args, kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, None)
    if ("@LEN" if 1 else 0)("@PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    if v is not None:
        if ("@TYPE" if 1 else 0)(v) is not ("@T" if 1 else 0):
            return v
        args, kwargs = v
    try:
        r = ("@O" if 1 else 0)(*args, **kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, e.__traceback__.tb_next)
    return ("@P" if 1 else 0)(r, args, kwargs)


def _t_door_nopost(*args, **kwargs):
    if kwargs:
        for k in kwargs:
            if ("@TYPE" if 1 else 0)(k) is not ("@STR" if 1 else 0):
                return ("@R" if 1 else 0)(("@TE" if 1 else 0)("keywords must be strings"), None)
    try:
        v = ("@J" if 1 else 0)(args, kwargs)
    except "@BE" as e:  # noqa: B030
        return ("@R" if 1 else 0)(e, None)
    if ("@LEN" if 1 else 0)("@PENDING" if 1 else 0):
        ("@RUN" if 1 else 0)()
    if v is not None:
        if ("@TYPE" if 1 else 0)(v) is not ("@T" if 1 else 0):
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
    if ("@NORM" if 1 else 0) is not None:
        return ("@SLOW" if 1 else 0)(*("@NORM" if 1 else 0)(name, globals, locals, fromlist, level))
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


def _t_audit_hook(event, args):
    if event in ("@W" if 1 else 0):
        r = ("@D" if 1 else 0)(event, args)
        if ("@LEN" if 1 else 0)("@PENDING" if 1 else 0):
            ("@RUN" if 1 else 0)()
        if r is not None:
            r = ("@B" if 1 else 0)(r)
            try:
                raise r
            finally:
                r = None  # no cycle exception -> traceback -> this frame -> exception


def _t_face(*args, **kwargs):
    r = ("@DOOR" if 1 else 0)(*args, **kwargs)
    c = ("@TYPE" if 1 else 0)(r)
    if c is ("@REFUSAL" if 1 else 0):
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    if c is ("@VALUE" if 1 else 0):
        return ("@VALUE_OF" if 1 else 0)(r)
    return r


def _t_face_prepare(*args, **kwargs):
    args, kwargs = ("@PREPARE" if 1 else 0)(args, kwargs)
    r = ("@DOOR" if 1 else 0)(*args, **kwargs)
    c = ("@TYPE" if 1 else 0)(r)
    if c is ("@REFUSAL" if 1 else 0):
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    if c is ("@VALUE" if 1 else 0):
        return ("@VALUE_OF" if 1 else 0)(r)
    return r


def _t_face_lone_str(*args, **kwargs):
    if (
        kwargs
        or ("@LEN" if 1 else 0)(args) != 1
        or ("@TYPE" if 1 else 0)(args[0]) is not ("@STR" if 1 else 0)
    ):
        args, kwargs = ("@PREPARE" if 1 else 0)(args, kwargs)
    r = ("@DOOR" if 1 else 0)(*args, **kwargs)
    c = ("@TYPE" if 1 else 0)(r)
    if c is ("@REFUSAL" if 1 else 0):
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    if c is ("@VALUE" if 1 else 0):
        return ("@VALUE_OF" if 1 else 0)(r)
    return r


def _t_face___import__(name, globals=None, locals=None, fromlist=(), level=0):
    r = ("@DOOR" if 1 else 0)(name, globals, locals, fromlist, level)
    if ("@TYPE" if 1 else 0)(r) is ("@REFUSAL" if 1 else 0):
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    return r


def _t_face_import_module(name, package=None):
    r = ("@DOOR" if 1 else 0)(name, package)
    if ("@TYPE" if 1 else 0)(r) is ("@REFUSAL" if 1 else 0):
        r = ("@B" if 1 else 0)(("@EXC_OF" if 1 else 0)(r)).with_traceback(("@TB_OF" if 1 else 0)(r))
        try:
            raise r
        finally:
            r = None  # no cycle exception -> traceback -> this frame -> exception
    return r


#: ``from __future__ import annotations`` (this module's): ``exec``, ``eval`` and ``compile``
#: of a string inherit the future flags of the frame calling them, which for a guarded
#: call is a door. The templates have no annotations: they drop the flag, or code the
#: program (``dataclasses``' generated ``__init__``) compiles would get string annotations.
_FUTURE_ANNOTATIONS = 0x1000000


def _renamed(code: Any, filename: str, name: str | None = None) -> Any:
    """``code`` shown as coming from ``filename`` (and called ``name``), without this
    module's future flags."""
    flags = code.co_flags & ~_FUTURE_ANNOTATIONS
    if name is None:
        return code.replace(co_filename=filename, co_flags=flags)
    return code.replace(co_filename=filename, co_name=name, co_qualname=name, co_flags=flags)


_TEMPLATES = {
    name[3:]: _renamed(fn.__code__, "<pysb guard>", "face")
    if name.startswith("_t_face")
    else _renamed(fn.__code__, "<pysb-door>")
    for name, fn in list(globals().items())
    if name.startswith("_t_")
}
_DEFAULTS = {
    name[3:]: fn.__defaults__
    for name, fn in list(globals().items())
    if name.startswith("_t_") and fn.__defaults__
}


#: What each gate's original is called with: ``__import__`` itself; for ``import_module``,
#: ``importlib._bootstrap._gcd_import(name, package, 0)`` -- what the standard
#: ``import_module`` calls for an absolute name, one frame fewer.
GATES = ("__import__", "import_module")

#: How many names a gate's set may hold (top-level names plus the dotted names it adds).
GATE_LIMIT = 4096


# ---------------------------------------------------------------------------------------
# The builders. These functions never run with this module's globals: they are copied
# into the seal's private namespace (made by _seal_core, at import), which holds copies of
# the tables and the records of the guards' own code; builders() hands those copies out.
# ---------------------------------------------------------------------------------------

# Names the builders resolve in their private namespaces (see _seal_core): placeholders
# here, for readers and linters only.
_DOOR_CONSTS: dict[str, Any] = {}
_FACE_CONSTS: dict[str, Any] = {}
CODES: Any = None
DOOR_CODES: Any = None
FACE_CODES: Any = None
DOOR_OF: Any = None
READING: Any = None
FACE_NS: Any = None
DOOR_NS_CONTENT: Any = None
FACE_NS_CONTENT: Any = None
JUNK: Any = None
ALLOW_ALL: Any = None
TYPE_DICT: Any = None
TYPE_NAME: Any = None
TYPE_QUALNAME: Any = None
TYPE_MRO: Any = None
MODULE_DICT: Any = None
C_CALLABLES: Any = None
SEALED: Any = None
CLOSED: Any = None
SHARED: Any = None
BUILDER_NAMES: Any = None
SOURCES: Any = None
BUILT: Any = None
PENDING_SIGNALS: Any = None
RUN_PENDING: Any = None
PENDING: Any = None  # _run_pending's own globals
BUSY: Any = None
MAIN: Any = None
EXC_OF: Any = None
TB_OF: Any = None
VALUE_OF: Any = None
RAW_NAMESPACE: Any = None
HOOK_FACTORY: Any = None
FRAME_TYPE: Any = None
GETFRAME: Any = None
GET_IDENT: Any = None
ADD_AUDIT_HOOK: Any = None
OWN_DIRS: Any = None

_BUILDER_NAMES = (
    "_door",
    "_face",
    "_refuse_tb",
    "_restore",
    "_allow",
    "make_door",
    "make_gate",
    "make_face",
    "guard",
    "is_face",
    "defer",
    "built",
    "refusal_of",
    "value_of",
    "is_guard_frame",
    "is_door_frame",
    "frame_code",
    "code_of",
    "door_code_id",
    "dict_get",
    "_check_names",
    "check_module",
    "resolve",
    "place",
    "_names_of",
    "_unbound_signature",
)


def _door(template, name, subst):
    """A function of ``template`` whose placeholder constants are replaced by ``subst``;
    its code is recorded as a door's."""
    if type(name) is not str:
        name = "door"
    code = _TEMPLATES[template]
    consts = tuple(
        subst.get(c, _DOOR_CONSTS.get(c, c)) if type(c) is str else c for c in code.co_consts
    )
    code = code.replace(co_consts=consts, co_name=name, co_qualname=name)
    CODES.append(code)
    code_id = id(code)
    DOOR_CODES.add(code_id)
    _restore(DOOR_NS, DOOR_NS_CONTENT)
    door = _FunctionType(code, DOOR_NS, name, _DEFAULTS.get(template))
    DOOR_OF[id(door)] = code_id  # (a new door at a dead one's id replaces its entry)
    return door


def _face(template, subst):
    """A face of ``template`` (see :func:`_door`); its code is recorded as a face's."""
    code = _TEMPLATES[template]
    consts = tuple(
        subst.get(c, _FACE_CONSTS.get(c, c)) if type(c) is str else c for c in code.co_consts
    )
    code = code.replace(co_consts=consts)
    CODES.append(code)
    FACE_CODES.add(id(code))
    _restore(FACE_NS, FACE_NS_CONTENT)
    return _FunctionType(code, FACE_NS, "face", _DEFAULTS.get(template))


def _restore(ns, content):
    """Make ``ns`` (``DOOR_NS`` or the faces' globals: the program reaches both through any
    door or face) hold exactly ``content`` before a function is made with it. Making a
    function looks ``__builtins__`` and ``__name__`` up in its globals: a key of the
    program's there could run its ``__eq__`` here, and without ``__builtins__`` the new
    function would take the builtins of this (sealed) frame -- for the program to read
    in its ``__builtins__``. What the program put there stays alive (no finalizer runs)."""
    items = list(dict.items(ns))
    if len(items) == len(content):
        for k, v in items:
            if type(k) is not str or k not in content or content[k] is not v:
                break
        else:
            return
    JUNK.append(items)
    dict.clear(ns)
    dict.update(ns, content)


def _refuse_tb(exc, tb):
    """What doors refuse with: a Refusal made by C calls only."""
    r = _NEW(Refusal)
    _SET_EXC(r, exc)
    _SET_TB(r, tb)
    return r


def _allow(args, kwargs):
    return None


def make_door(original, judge, post=None, name="door"):
    """A sealed function: ``judge(args, kwargs)`` then ``original(*args, **kwargs)``.

    The judge returns None (go on), ``(args, kwargs)`` (call with these instead), a
    :class:`Refusal` or a :class:`Value`. ``post(result, args, kwargs)`` may filter the
    result. Exceptions of the original come back as a Refusal without the door's frame.
    """
    if judge is None or judge is ALLOW_ALL:
        judge = _allow
    template = "door" if post is not None else "door_nopost"
    return _door(template, name, {"@J": judge, "@O": original, "@P": post})


def make_gate(kind, original, slow, fast, norm=None):
    """A sealed door for ``kind`` (one of :data:`GATES`): names whose top-level package is
    in ``fast`` go to ``original``; every other call to ``slow`` (a door, with its judge).

    ``fast`` must hold only names ``slow``'s judge lets through on the name alone; the set
    is the caller's (sealed state), so it can grow before user code. ``norm`` (for
    ``__import__``) turns the arguments of a call that is not the short way into those the
    judge and the original see (plain code: the program's may run there).
    """
    subst = {
        "@O": original,
        "@SLOW": slow,
        "@FAST": fast,
        "@ZERO": 0,
        "@LIMIT": GATE_LIMIT,
        "@NORM": norm,
    }
    return _door("gate_" + kind, kind, subst)


def make_face(door, like=None, prepare=None, kind=""):
    """The public side of ``door``: raise refusals, answer values, look like ``like``.

    ``prepare(args, kwargs)`` normalises arguments before the door sees them; when it
    says ``skips_lone_str``, a call with one exact ``str`` argument skips it. ``kind``
    (one of :data:`GATES`) gives the face that gate's signature: explicit parameters are
    cheaper to pass on than ``*args, **kwargs``. Only C code reads ``like`` (the program
    may have made it).
    """
    if kind:
        template = "face_" + kind
    elif prepare is None:
        template = "face"
    elif type(prepare) is _FunctionType and dict_get(prepare.__dict__, "skips_lone_str") is True:
        template = "face_lone_str"
    else:
        template = "face_prepare"
    face = _face(template, {"@DOOR": door, "@PREPARE": prepare})
    attrs = ("__name__", "__qualname__", "__doc__", "__module__")
    for attr, value in zip(attrs[: len(names := _names_of(like))], names, strict=True):
        if attr in ("__name__", "__qualname__") and type(value) is not str:
            continue
        try:
            setattr(face, attr, value)
        except (AttributeError, TypeError):
            pass
    face.__pysb_face__ = True
    if type(like) is C_CALLABLES[0]:
        # A C function is no descriptor: kept as a class attribute (``_unlink = os.unlink``)
        # it is called without the instance. A Python function would bind; its face is
        # handed out as a (callable, non-binding) staticmethod. Pickled by name (see
        # _reduce_static), like the C function. Its ``__func__`` / ``__wrapped__`` is the
        # face itself; ``inspect`` reads the C function's text signature on it (a
        # ``__signature__`` of None stops ``inspect.unwrap`` there, before the face's
        # ``(*args, **kwargs)``).
        method = staticmethod(face)
        text = _unbound_signature(like.__text_signature__)
        if text is not None:
            ns = method.__dict__
            dict.__setitem__(ns, "__text_signature__", text)
            dict.__setitem__(ns, "__signature__", None)
        return method
    return face


def _unbound_signature(text):
    """A C function's text signature without its ``$module`` / ``$self`` parameter (the
    object it is bound to, which ``inspect`` drops only for a bound C function)."""
    if type(text) is not str or not text.startswith("(") or not text.endswith(")"):
        return None
    if not text.startswith("($"):
        return text
    _self, comma, rest = text[1:-1].partition(",")
    rest = rest.strip() if comma else ""
    if rest == "/":
        rest = ""
    elif rest.startswith("/,"):
        rest = rest[2:].strip()
    return "(" + rest + ")"


def _names_of(like):
    """``__name__``, ``__qualname__``, ``__doc__`` and ``__module__`` of ``like``, read by C
    code only (nothing for an object of the program's own kind)."""
    kind = type(like)
    if kind is _FunctionType:
        return like.__name__, like.__qualname__, like.__doc__, like.__module__
    if kind is type:
        ns = TYPE_DICT(like)
        try:
            _check_names(ns)
        except ImportError:
            return ()
        doc = ns.get("__doc__")
        doc = doc if type(doc) is str else None
        return TYPE_NAME(like), TYPE_QUALNAME(like), doc, ns.get("__module__")
    if kind is C_CALLABLES[0]:  # builtin_function_or_method, maybe bound to anything
        owner = like.__self__
        if owner is None or type(owner) is _ModuleType:
            return like.__name__, like.__qualname__, like.__doc__, like.__module__
        return like.__name__, like.__name__, like.__doc__, None
    for c in C_CALLABLES:
        if kind is c:  # a descriptor of a C type
            return like.__name__, like.__qualname__, like.__doc__, None
    return ()


def guard(original, judge, **kw):
    """Face and door in one call: the usual way to guard one function."""
    prepare = kw.pop("prepare", None)
    name = kw.pop("name", None)
    if name is None:
        names = _names_of(original)
        name = names[0] if names else "door"
    door = make_door(original, judge, kw.pop("post", None), name)
    return make_face(door, original, prepare)


def is_face(obj):
    if type(obj) is staticmethod:
        obj = obj.__func__  # a read-only member of an exact built-in type: C only
    if type(obj) is not _FunctionType:
        return False
    return dict_get(obj.__dict__, "__pysb_face__") is True


def frame_code(f):
    """``f.f_code``, a door's frame's too: while it is read, the audit hook lets this
    thread read door code (``READING``; no frame walk of the hook's own, which would cost
    two more audit events per read)."""
    me = GET_IDENT()
    READING.add(me)
    try:
        return f.f_code
    finally:
        READING.discard(me)


def code_of(fn):
    """``fn.__code__``, a door's too (see :func:`frame_code`)."""
    me = GET_IDENT()
    READING.add(me)
    try:
        return fn.__code__
    finally:
        READING.discard(me)


def door_code_id(door):
    """The id of the code of a door made by these builders (None for anything else)."""
    return DOOR_OF.get(id(door))


def is_guard_frame(f):
    """True for a frame of the guards' own code: sealed code (its builtins are the sealed
    namespaces' own), a door, a face (their code, recorded when made)."""
    if f.f_builtins is SEALED:
        return True
    g = f.f_globals
    if g is DOOR_NS:
        return id(frame_code(f)) in DOOR_CODES
    if g is FACE_NS:
        return id(f.f_code) in FACE_CODES
    return False


def is_door_frame(f):
    return f.f_globals is DOOR_NS and id(frame_code(f)) in DOOR_CODES


def dict_get(d, key, default=None):
    """``d[key]`` for a dictionary the program may have put keys of its own in: only exact
    ``str`` keys are compared (a ``str`` subclass's ``__eq__`` never runs)."""
    if type(d) is not dict:
        return default
    for k, v in list(dict.items(d)):
        if type(k) is str and k == key:
            return v
    return default


def _check_names(ns):
    """Raise ImportError unless every key of ``ns`` (a module's or a class's dictionary) is
    an exact ``str``: a lookup there could otherwise run the program's ``__eq__``."""
    for k in list(ns):
        if type(k) is not str:
            raise ImportError("pysb: an object to patch holds a name that is not a str")


def check_module(module):
    """Raise ImportError unless ``module`` is a plain module whose dictionary holds exact
    ``str`` keys only: :func:`resolve` and :func:`place` then run no code of the program's.
    Patchers fail closed: a module they cannot patch safely is not imported."""
    if type(module) is not _ModuleType:
        raise ImportError("pysb: only a module object can be patched")
    ns = MODULE_DICT(module)
    if type(ns) is not dict:
        raise ImportError("pysb: a module's namespace must be a dict")
    _check_names(ns)


def resolve(module, path, inherit=False, checked=False):
    """``(owner, name, value)`` for the attribute ``path`` of ``module`` (dotted: through
    modules, or classes whose metaclass is ``type``), read by C code only; None when it is
    not there. With ``inherit`` the last name is also looked up in the bases of a class (as
    ``getattr`` would); every dictionary read is checked first (see :func:`_check_names`;
    ``checked``: the caller just checked ``module`` with :func:`check_module`)."""
    if not checked:
        check_module(module)
    owner = module
    parts = path.split(".")
    last = len(parts) - 1
    for i, part in enumerate(parts):
        if type(owner) is _ModuleType:
            if i:
                check_module(owner)
            value = dict.get(MODULE_DICT(owner), part)
        elif type(owner) is type:
            value = None
            for cls in TYPE_MRO(owner) if inherit and i == last else (owner,):
                ns = TYPE_DICT(cls)
                _check_names(ns)
                value = ns.get(part)
                if value is not None:
                    break
        else:
            return None
        if value is None:
            return None
        if i == last:
            return owner, part, value
        owner = value
    return None


def place(owner, name, value, checked=False):
    """Set ``owner.name`` (an owner :func:`resolve` answered) with C code only; False when
    the owner does not take it (an immutable type). The value replaced must be kept alive
    by the caller (a door holds its original): its finalizer must not run here."""
    if type(owner) is _ModuleType:
        if not checked:
            check_module(owner)
        dict.__setitem__(MODULE_DICT(owner), name, value)
        return True
    if type(owner) is type:
        _check_names(TYPE_DICT(owner))
        try:
            type.__setattr__(owner, name, value)
        except (AttributeError, TypeError):
            return False
        return True
    return False


def _hook_factory(
    door_ns, function_type, frame_type, getframe, get_ident, sealed, closed, reading,
    own=None,
):  # fmt: skip
    """Build the dispatcher of the single audit hook and the function adding handlers
    (with ``close``, ``safe_frame`` and the set of events the dispatcher needs to see).

    Handlers *return* the exception to raise (or None): the hook itself is a door, so a
    traceback of a refusal shows only the door's frame, whose code is not readable.

    The dispatcher also keeps the guards' frames out of the program's reach: a frame
    obtained by ``sys._getframe``, ``tb_frame``, ``gi_frame``, ``cr_frame`` or ``ag_frame``
    by code that is not sealed is refused when a sealed frame lies on its chain (code the
    program runs while a judge is on the stack -- a signal handler -- must not walk up to
    the judge's globals). Sealed frames are told by their builtins (``sealed``: the one
    dictionary every sealed namespace holds as ``__builtins__``, which no other code can
    reach): no lookup in a dictionary the program may have put a key of its own into, and
    no ``id()`` (an audit event of its own). A door's code
    is readable only by sealed code that says so (``reading``: the ids of the threads in
    ``frame_code`` / ``code_of`` right now).

    Tracebacks lose the guards' own entries as the program reads them (``own``: the
    faces' globals, the door and face code ids, the directories of pysb's plain code). A
    guarded call adds a face's entry (and the hook's own, a door, for a refusal of the
    backstop) below the caller's; Python adds them as the exception leaves each frame,
    after which no guard code runs. So reading ``tb.tb_frame`` (an audited attribute, and
    what every reader -- ``traceback``, ``inspect``, ``logging``, IPython -- reads first)
    splices the guards' entries out of the chain that follows ``tb``: the reader then
    goes on with the program's next frame, as CPython shows an unguarded call. Only
    ``tb_next`` is written (a C setter); nothing the program made is called.
    """
    if own is None:
        own = (None, (), (), ())
    face_ns, door_codes, face_codes, own_dirs = own
    handlers = {}
    # The events the dispatcher looks at: the hook (a door holding this set) leaves every
    # other event -- most of them, ``socket.__new__``, ``import``, ``compile``... -- at once.
    watched = {"object.__getattr__", "sys._getframe"}
    busy = set()
    frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}
    try:
        raise TypeError
    except TypeError as e:
        tb_type = type(e.__traceback__)

    def sealed_chain(frame):
        while frame is not None:
            if frame.f_builtins is sealed:
                return True
            frame = frame.f_back
        return False

    def own_frame(frame):
        """True for a frame of pysb's own: sealed, a door, a face, pysb's plain code."""
        if frame.f_builtins is sealed:
            return True
        g = frame.f_globals
        me = get_ident()
        reading.add(me)  # a door's code too (the nested audit event lets it through)
        try:
            code = frame.f_code
        finally:
            reading.discard(me)
        if g is door_ns:
            return id(code) in door_codes
        if g is face_ns:
            return id(code) in face_codes
        name = code.co_filename
        return type(name) is str and str.startswith(name, own_dirs)

    def splice(tb):
        """Drop the guards' entries that follow ``tb`` in its chain."""
        nxt = tb.tb_next
        skipped = nxt
        while nxt is not None and own_frame(nxt.tb_frame):
            nxt = nxt.tb_next
        if nxt is not skipped:
            tb.tb_next = nxt

    def guard_frame(frame):
        """None when ``frame`` may be handed out, else the exception refusing it."""
        if not sealed_chain(frame):
            return None  # the common case: no guard frame above it
        # guard_frame, dispatch, the hook (a door), then the code asking: sealed code only
        # (the guards' own frame walks)
        caller = getframe(3)
        if caller is not None and caller.f_builtins is sealed:
            return None
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
                if get_ident() in reading:  # sealed code reading it (frame_code)
                    return None
                return AttributeError("pysb: the code of a guard door is not readable")
            if name in frame_attrs:
                me = get_ident()
                if me in busy:
                    return None
                busy.add(me)
                try:
                    if name == "tb_frame" and own_dirs and type(obj) is tb_type:
                        splice(obj)
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
        if type(frame) is not frame_type or sealed_chain(frame):
            return None
        return frame

    return dispatch, add, close, safe_frame, watched


# ---------------------------------------------------------------------------------------
# The seal's own namespace: made once, at import; the module keeps only faces of it.
# ---------------------------------------------------------------------------------------


def _sealing() -> tuple[Callable[[], dict[str, Any]], dict[str, Any], list[bool]]:
    """The one maker of sealed namespaces. Every one holds the same snapshot of the builtins
    (taken now, before any program code) as its ``__builtins__``: a frame whose builtins are
    that very dictionary is sealed code (no other code can reach it to make a function of
    its own with it); ``closed`` is set when the audit hook's registration closes (the
    guards are armed), and from then on the maker is refused."""
    snapshot = dict(vars(builtins))
    closed = [False]

    def private_namespace() -> dict[str, Any]:
        ns: dict[str, Any] = dict(snapshot)
        ns["__builtins__"] = snapshot
        ns["__name__"] = "pysb_guards.<sealed>"
        ns["__pysb_sealed__"] = True
        return ns

    return private_namespace, snapshot, closed


def _not_after_arming(args, kwargs):
    """The judge of this module's public builders."""
    if CLOSED[0]:
        return refusal_of(PermissionError("pysb: the guards' builders work before user code only"))
    return None


def _fill(ns):
    """``ns`` with the shared tables and its own copies of the builders."""
    for name in SHARED:
        ns[name] = SHARED[name]
    for name in BUILDER_NAMES:
        fn = SOURCES[name]
        ns[name] = _FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__)
    ns["_DOOR_CONSTS"] = {
        "@BE": BaseException,
        "@R": ns["_refuse_tb"],
        "@T": tuple,
        "@TYPE": type,
        "@STR": str,
        "@LEN": len,
        "@TE": TypeError,
        "@PENDING": PENDING_SIGNALS,
        "@RUN": RUN_PENDING,
    }
    ns["_FACE_CONSTS"] = {
        "@TYPE": type,
        "@STR": str,
        "@LEN": len,
        "@REFUSAL": Refusal,
        "@VALUE": Value,
        "@B": BUILT,
        "@EXC_OF": EXC_OF,
        "@TB_OF": TB_OF,
        "@VALUE_OF": VALUE_OF,
    }
    return ns


def _builders():
    """The seal's own builders: sealed copies (in the seal's private namespace, with its
    own copies of the tables), shared by every guard -- only sealed code holds them."""
    return {
        "MAKE_DOOR": make_door,
        "MAKE_GATE": make_gate,
        "MAKE_FACE": make_face,
        "GUARD": guard,
        "IS_FACE": is_face,
        "DEFER": defer,
        "REFUSE": refusal_of,
        "NEW_VALUE": value_of,
        "EXC_OF": EXC_OF,
        "ALLOW": _allow,
        "IS_GUARD_FRAME": is_guard_frame,
        "IS_DOOR_FRAME": is_door_frame,
        "CODE_OF": code_of,
        "FRAME_CODE": frame_code,
        "DOOR_CODE_ID": door_code_id,
        "DICT_GET": dict_get,
        "CHECK_MODULE": check_module,
        "RESOLVE": resolve,
        "PLACE": place,
        "SEALED_BUILTINS": SEALED,
    }


def _seal_group(functions, **values):
    ns = RAW_NAMESPACE()
    ns.update(values)
    for fn in functions:
        ns[fn.__name__] = _FunctionType(
            fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__
        )
    return ns


def _sealed(factory):
    return _FunctionType(
        factory.__code__, RAW_NAMESPACE(), factory.__name__, factory.__defaults__,
        factory.__closure__,
    )  # fmt: skip


def _returning(fn):
    """Turn a handler-registration function's returned exception into a Refusal."""

    def call(*args):
        r = fn(*args)
        if type(r) is PermissionError:
            return refusal_of(r)
        return r

    return call


#: Signal handlers of the program that arrived while a guard's sealed code ran: Python
#: calls a handler between two bytecodes of whatever runs, and the handler's own frame
#: would have the judge's below it (``f_back`` is not audited). The wrapper that
#: ``signal.signal`` installs puts them here instead; every door runs them as soon as its
#: judge returned, and the audit hook as soon as its handlers did, when no sealed frame is
#: below any more (:func:`_run_pending`). What the list holds is only ever called from
#: there: a program that reaches it (through this module) can only queue its own calls.
_PENDING_SIGNALS: list[tuple[Any, int]] = []


def _run_pending():
    """Run the queued handlers, in the main thread, when no sealed frame is below the
    caller (the hook refuses ``sys._getframe`` of a frame with one on its chain to all but
    sealed code): else the outer door runs them. Globals: a few names, no builtins."""
    if GET_IDENT() != MAIN or BUSY:
        return  # BUSY: the audit event of its own sys._getframe, or a handler's calls
    BUSY.append(True)
    try:
        try:
            GETFRAME(1)
        except PermissionError:
            return
        while PENDING:
            handler, signum = PENDING.pop(0)
            handler(signum, None)
    finally:
        BUSY.pop()


def _install_hook():
    """Install the one audit hook; the faces adding handlers, closing, checking frames."""
    own = (FACE_NS, DOOR_CODES, FACE_CODES, OWN_DIRS)
    dispatch, add, close, safe_frame, watched = _sealed(HOOK_FACTORY)(
        DOOR_NS, _FunctionType, FRAME_TYPE, GETFRAME, GET_IDENT, SEALED, CLOSED, READING, own
    )
    hook = _door(
        "audit_hook",
        "audit_hook",
        {
            "@D": dispatch,
            "@W": watched,
            "@B": BUILT,
            "@PENDING": PENDING_SIGNALS,
            "@RUN": RUN_PENDING,
            "@LEN": len,
        },
    )
    ADD_AUDIT_HOOK(hook)
    return (
        make_face(make_door(_returning(add), None, name="add")),
        make_face(make_door(close, None, name="close")),
        make_face(make_door(safe_frame, None, name="safe_frame")),
    )


def _own_dirs() -> tuple[str, ...]:
    """The directories of pysb's plain code that can stand in a program's traceback: the
    guards' (``prepare`` steps, the import finder) and the child's bootstrap."""
    import pysb_core

    here = os.path.dirname(os.path.abspath(__file__))
    core = os.path.dirname(os.path.abspath(pysb_core.__file__))
    return (here + os.sep, os.path.join(core, "child") + os.sep)


def _seal_core() -> dict[str, Any]:
    """Make the seal's namespace and put faces of its functions in this module."""
    import _thread

    raw, sealed_builtins, closed = _sealing()
    module = globals()
    core_only = ("_not_after_arming", "_fill", "_builders", "_seal_group", "_sealed")
    core_only += ("_returning", "_install_hook")
    sources = {name: module[name] for name in (*_BUILDER_NAMES, *core_only)}
    shared = {
        "_TEMPLATES": dict(_TEMPLATES),
        "_DEFAULTS": dict(_DEFAULTS),
        "_FunctionType": _FunctionType,
        "_ModuleType": _ModuleType,
        "DOOR_NS": DOOR_NS,
        "FACE_NS": _FACE_NS,
        "DOOR_NS_CONTENT": dict(DOOR_NS),
        "FACE_NS_CONTENT": dict(_FACE_NS),
        "JUNK": [],
        "Refusal": Refusal,
        "Value": Value,
        "GATE_LIMIT": GATE_LIMIT,
        "ALLOW_ALL": _allow_all,
        "_DEFERRED": _DEFERRED,
        "_NEW": _NEW,
        "_SET_EXC": _SET_EXC,
        "_SET_TB": _SET_TB,
        "_SET_VALUE": _SET_VALUE,
        "EXC_OF": _EXC_OF,
        "TB_OF": _TB_OF,
        "VALUE_OF": _VALUE_OF,
        "MODULE_DICT": _ModuleType.__dict__["__dict__"].__get__,
        "TYPE_DICT": type.__dict__["__dict__"].__get__,
        "TYPE_NAME": type.__dict__["__name__"].__get__,
        "TYPE_QUALNAME": type.__dict__["__qualname__"].__get__,
        "TYPE_MRO": type.__dict__["__mro__"].__get__,
        "C_CALLABLES": (
            type(len),  # builtin_function_or_method (first: it may be bound to anything)
            type(str.join),  # method_descriptor
            type(str.__add__),  # wrapper_descriptor
            type(dict.__dict__["fromkeys"]),  # classmethod_descriptor
        ),
        # What faces and the audit hook build refusals with: the program's code runs in it
        # (the exception's class), so its globals are not sealed (only a few builtins).
        "BUILT": _FunctionType(
            built.__code__,
            {
                "__builtins__": {"RuntimeError": RuntimeError, "len": len, "type": type},
                "_DEFERRED": _DEFERRED,
            },
            "built",
        ),
        "PENDING_SIGNALS": _PENDING_SIGNALS,
        "RUN_PENDING": _FunctionType(
            _run_pending.__code__,
            {
                "__builtins__": {"PermissionError": PermissionError},
                "PENDING": _PENDING_SIGNALS,
                "BUSY": [],
                "GETFRAME": sys._getframe,
                "GET_IDENT": _thread.get_ident,
                "MAIN": _thread.get_ident(),
            },
            "run_pending",
        ),
        "SEALED": sealed_builtins,
        "CLOSED": closed,
        "RAW_NAMESPACE": raw,
        # Every door's and face's code, kept alive: an id is never reused.
        "CODES": [],
        "DOOR_CODES": set(),
        "FACE_CODES": set(),
        "DOOR_OF": {},
        # Threads of sealed code reading a door's code right now (frame_code, code_of).
        "READING": set(),
        "GET_IDENT": _thread.get_ident,
    }
    core = raw()
    core.update(shared)
    core.update(
        SHARED=shared,
        SOURCES=sources,
        BUILDER_NAMES=_BUILDER_NAMES,
        HOOK_FACTORY=_hook_factory,
        OWN_DIRS=_own_dirs(),
        FRAME_TYPE=_FrameType,
        GETFRAME=sys._getframe,
        ADD_AUDIT_HOOK=sys.addaudithook,
    )
    for name, fn in sources.items():
        core[name] = _FunctionType(fn.__code__, core, fn.__name__, fn.__defaults__)
    core["_fill"](core)

    def public(name: str, target: str, doc: str | None) -> Callable[..., Any]:
        door = core["make_door"](core[target], core["_not_after_arming"], name=name)
        face = core["make_face"](door)
        face.__name__ = face.__qualname__ = name
        face.__doc__ = doc
        face.__module__ = __name__
        module[name] = face
        return face

    for name in ("make_door", "make_gate", "make_face", "guard"):
        public(name, name, module[name].__doc__)
    public("builders", "_builders", _BUILDERS_DOC)
    public("seal_group", "_seal_group", _SEAL_GROUP_DOC)
    public("sealed", "_sealed", _SEALED_DOC)
    public("_private_namespace", "RAW_NAMESPACE", _PRIVATE_NAMESPACE_DOC)
    public("_install_audit_hook", "_install_hook", "Install the audit hook (once).")
    return core


_BUILDERS_DOC = """Private copies of the builders (``MAKE_DOOR``, ``MAKE_GATE``, ``MAKE_FACE``,
    ``GUARD``, ``IS_FACE``: the names sealed engines use), for guards that build faces after
    the program started (lazy patches): bind them at install. With them ``DEFER``,
    ``REFUSE``, ``NEW_VALUE`` and ``EXC_OF`` (how sealed code refuses without running code
    the program can change, see :func:`defer`), ``ALLOW`` (the judge letting everything
    through), ``IS_GUARD_FRAME`` / ``IS_DOOR_FRAME`` (the frame walks' test of the guards'
    own frames), ``CODE_OF`` (a function's code, a door's too, for sealed code),
    ``DICT_GET`` / ``RESOLVE`` / ``PLACE`` (reading and patching what the program may have
    made, with C code only), ``SEALED_BUILTINS`` (the builtins of every sealed frame: a
    frame whose ``f_builtins`` is this very dictionary runs sealed code).

    The copies resolve every name in the seal's private namespace, with its own copies of
    the tables: rewriting this module's globals changes nothing for them.
    Before user code only (then PermissionError): the program could otherwise make sealed
    code of its own."""

_SEAL_GROUP_DOC = """Re-create ``functions`` in one private namespace (plus ``values``); return it.

    The functions call each other by name as usual, but the names resolve in a dictionary
    only they hold (with a snapshot of the original builtins), so the program can neither
    read their state through a module's ``__dict__`` nor swap a helper under them. Callers
    keep the entry points they need and drop the namespace. Before user code only."""

_SEALED_DOC = """Re-create ``factory`` with private globals (a snapshot of the original builtins).

    Every closure the factory creates inherits those globals: nothing the program can reach
    through a module's ``__dict__`` or ``builtins`` can replace a name they use. Before
    user code only."""

_PRIVATE_NAMESPACE_DOC = """Fresh globals for sealed code: a *copy* of the builtins as they are
    now. Before user code only (a frame with such globals is one of the guards' own)."""

# Set by _seal_core (faces over sealed code, refusing once the guards are armed).
builders: Callable[..., Any] = None  # type: ignore[assignment]
seal_group: Callable[..., Any] = None  # type: ignore[assignment]
sealed: Callable[..., Any] = None  # type: ignore[assignment]
_private_namespace: Callable[[], dict[str, Any]] = None  # type: ignore[assignment]
_install_audit_hook: Callable[[], tuple[Any, Any, Any]] = None  # type: ignore[assignment]
_seal_core()
del _seal_core


def _reduce_static(method: staticmethod) -> str:
    """How ``pickle`` and ``copy`` take the face of a C function (a staticmethod, see
    :func:`make_face`): by name, as the C function itself. Any other staticmethod is
    refused as CPython refuses it."""
    func = method.__func__
    if type(func) is _FunctionType and func.__dict__.get("__pysb_face__") is True:
        return method.__qualname__
    raise TypeError("cannot pickle 'staticmethod' object")


def _pickle_faces_by_name() -> None:
    import copyreg

    copyreg.pickle(staticmethod, _reduce_static)


_pickle_faces_by_name()


def private_recorder(recorder: Any) -> Any:
    """The event recorder as judges call it: ``.deny``, ``.learn``, ``.learning``.

    A judge must never run code the program can replace. ``Recorder``'s methods are looked
    up on a class the program reaches through the class graph (and they call ``os.write``
    and ``json`` by module attribute): replaced, they would run the program's code inside a
    judge, whose frames lead to the guard's state. Here the two calls are closures with
    private globals over C functions bound now, held by a ``SimpleNamespace`` (a built-in
    type nobody can add a descriptor to); the report channel and the de-duplication set are
    the recorder's own, so every guard shares them. Callers pass exact ``str`` values.
    """
    import _json
    import time
    import types

    from pysb_core.guardkit import reporter_functions

    deny, learn = sealed(reporter_functions)(
        getattr(recorder, "_fd", None),
        getattr(recorder, "_seen", set()),
        os.write,
        time.time,
        os.getpid,
        _json.encode_basestring_ascii,
    )
    return types.SimpleNamespace(deny=deny, learn=learn, learning=bool(recorder.learning))


# ---------------------------------------------------------------------------------------
# The audit hook
# ---------------------------------------------------------------------------------------

_installed: list[Any] = []  # holds the registration faces; set once


def audit_registry() -> tuple[Callable[[str, Callable[[tuple], None]], None], Callable[[], None]]:
    """Install the audit hook once; return faces to add handlers and to close registration.

    The faces only reach the hook's table through doors: after ``close()`` (called when the
    guards are armed) nobody can add, remove or replace a handler from Python, and no
    sealed namespace, door or face can be made with this module's functions any more.
    """
    if not _installed:
        add, close, safe_frame = _install_audit_hook()
        _installed.append((add, close))
        _guard_signal_handlers(safe_frame)
    return _installed[0]


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
                shown = safe_frame(frame)
                if shown is None and frame is not None:
                    # A guard's sealed code was interrupted: the handler runs once it
                    # returned (see _PENDING_SIGNALS), not with the judge below it.
                    _PENDING_SIGNALS.append((user, signum))
                    return None
                return user(signum, shown)

            previous = original_signal(signalnum, wrapper)
            wrappers[id(wrapper)] = (wrapper, user)
        else:
            previous = original_signal(signalnum, handler)
        return unwrap(previous)

    def getsignal(signalnum: Any) -> Any:
        return unwrap(original_getsignal(signalnum))

    signal.__doc__, getsignal.__doc__ = original_signal.__doc__, original_getsignal.__doc__
    faces = {
        "signal": guard(signal, None),
        "getsignal": guard(getsignal, None),
    }
    modules = [_signal, sys.modules.get("signal")]
    for module in modules:
        if module is None:
            continue
        for name, face in faces.items():
            if getattr(module, name, None) in (original_signal, original_getsignal):
                setattr(module, name, face)
    from pysb_guards._patch import defer_sweep

    defer_sweep({original_signal: faces["signal"], original_getsignal: faces["getsignal"]})
