"""The seal's core: the one maker of sealed namespaces, the sealed copies of the builders,
the audit hook installed once, and the faces this package hands out.

Made once, at import: the module keeps only faces of the seal's namespace. Every face
refuses once the guards are armed (``close()`` of :func:`audit_registry`).

Why one module: it runs once, at import, and builds the one sealed namespace; the builders it
copies, the audit hook it installs and the faces it hands out all close over that namespace, and
its security rests on no other module's globals seeing it. Splitting it would spread that
namespace over module boundaries, which is what the seal exists to avoid.
"""

from __future__ import annotations

import builtins
import sys

from pysb_guards._seal import makers, refusals
from pysb_guards._seal.audithook import _hook_factory, own_dirs
from pysb_guards._seal.makers import (
    _BUILDER_NAMES,
    ADD_AUDIT_HOOK,
    BUILDER_NAMES,
    BUILT,
    CLOSED,
    DOOR_CODES,
    EXC_OF,
    FACE_CODES,
    FACE_NS,
    FRAME_TYPE,
    GET_IDENT,
    GETFRAME,
    HOOK_BUSY,
    HOOK_FACTORY,
    OWN_DIRS,
    PENDING_SIGNALS,
    RAW_NAMESPACE,
    READING,
    REFCOUNT,
    RUN_PENDING,
    SEALED,
    SHARED,
    SOURCES,
    TB_OF,
    VALUE_OF,
    _allow,
    _door,
    check_module,
    code_of,
    dict_get,
    door_code_id,
    frame_code,
    is_door_frame,
    is_face,
    is_guard_frame,
    place,
    resolve,
)
from pysb_guards._seal.makers import guard as _raw_guard
from pysb_guards._seal.makers import make_door as _raw_make_door
from pysb_guards._seal.makers import make_face as _raw_make_face
from pysb_guards._seal.makers import make_gate as _raw_make_gate
from pysb_guards._seal.refusals import (
    _DEFERRED,
    _EXC_OF,
    _NEW,
    _SET_EXC,
    _SET_TB,
    _SET_VALUE,
    _TB_OF,
    _VALUE_OF,
    Refusal,
    Value,
    _allow_all,
    built,
    defer,
    refusal_of,
    value_of,
)
from pysb_guards._seal.signals import _PENDING_SIGNALS, _run_pending, guard_signal_handlers
from pysb_guards._seal.templates import (
    _DEFAULTS,
    _FACE_NS,
    _TEMPLATES,
    DOOR_NS,
    GATE_LIMIT,
    _FrameType,
    _FunctionType,
    _ModuleType,
)

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


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
        "@PENDING": PENDING_SIGNALS,
        "@NONE_PENDING": [],  # compared with, never changed (see the templates)
        "@RUN": RUN_PENDING,
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


def _install_hook():
    """Install the one audit hook; the faces adding handlers, closing, checking frames."""
    own = (FACE_NS, DOOR_CODES, FACE_CODES, OWN_DIRS)
    dispatch, add, close, safe_frame, watched = _sealed(HOOK_FACTORY)(
        DOOR_NS, _FunctionType, FRAME_TYPE, GETFRAME, GET_IDENT, SEALED, CLOSED, READING, own,
        HOOK_BUSY, REFCOUNT,
    )  # fmt: skip
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


def _seal_core() -> dict[str, Any]:
    """Make the seal's namespace and put faces of its functions in this module (and of the
    four public builders in :mod:`~pysb_guards._seal.makers`, over the raw sources)."""
    import _thread

    raw, sealed_builtins, closed = _sealing()
    module = globals()
    core_only = ("_not_after_arming", "_fill", "_builders", "_seal_group", "_sealed")
    core_only += ("_returning", "_install_hook")
    homes = (vars(makers), vars(refusals), module)
    sources = {
        name: next(home[name] for home in homes if name in home)
        for name in (*_BUILDER_NAMES, *core_only)
    }
    # The threads whose audit hook is dispatching an event right now (the dispatcher's own
    # sys._getframe and frame reads are let through then): _run_pending runs no handler
    # while its thread is in it (see there).
    hook_busy: set[int] = set()
    shared = {
        "_TEMPLATES": dict(_TEMPLATES),
        "PREPARED": {},  # (template, door?) -> its fixed constants, where its strings stand
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
                "HOOK_BUSY": hook_busy,
                "GETFRAME": sys._getframe,
                "GET_IDENT": _thread.get_ident,
                "MAIN": _thread.get_ident(),
            },
            "run_pending",
        ),
        "SEALED": sealed_builtins,
        "CLOSED": closed,
        "HOOK_BUSY": hook_busy,
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
        OWN_DIRS=own_dirs(),
        FRAME_TYPE=_FrameType,
        GETFRAME=sys._getframe,
        REFCOUNT=sys.getrefcount,
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
        face.__module__ = "pysb_guards._seal"
        module[name] = face
        return face

    for name in ("make_door", "make_gate", "make_face", "guard"):
        setattr(makers, name, public(name, name, module[name].__doc__))
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
make_door: Callable[..., Any] = _raw_make_door
make_gate: Callable[..., Any] = _raw_make_gate
make_face: Callable[..., Any] = _raw_make_face
guard: Callable[..., Any] = _raw_guard
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
        guard_signal_handlers(safe_frame, guard)
    return _installed[0]
