"""The builders of doors, gates and faces, and the C-only readers sealed code relies on.

These functions never run with this module's globals: they are copied into the seal's
private namespace (made by :mod:`pysb_guards._seal.core`, at import), which holds copies of
the tables and the records of the guards' own code; ``builders()`` hands those copies out.
The module's ``make_door``, ``make_gate``, ``make_face`` and ``guard`` are replaced there by
faces over the sealed copies.

Why one module: its functions never run with this module's globals: :mod:`._seal.core` copies
all of them into one sealed namespace at import, where they call one another by name. A second
module would be a second set of globals to copy and keep consistent; one module is one
namespace's source.
"""

from __future__ import annotations

from pysb_guards._seal.refusals import _NEW, _SET_EXC, _SET_TB, Refusal
from pysb_guards._seal.templates import (
    _DEFAULTS,
    _TEMPLATES,
    DOOR_NS,
    GATE_LIMIT,
    _FunctionType,
    _ModuleType,
)

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any


# Names the builders resolve in their private namespaces (see core._seal_core): placeholders
# here, for readers and linters only.
_DOOR_CONSTS: dict[str, Any] = {}
_FACE_CONSTS: dict[str, Any] = {}
PREPARED: Any = None
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
HOOK_BUSY: Any = None
EXC_OF: Any = None
TB_OF: Any = None
VALUE_OF: Any = None
RAW_NAMESPACE: Any = None
HOOK_FACTORY: Any = None
FRAME_TYPE: Any = None
GETFRAME: Any = None
REFCOUNT: Any = None
GET_IDENT: Any = None
ADD_AUDIT_HOOK: Any = None
OWN_DIRS: Any = None

_BUILDER_NAMES = (
    "_door",
    "_face",
    "_consts",
    "_refuse_tb",
    "_restore",
    "_allow",
    "_same",
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
    "_face_signature",
    "_literal",
)


def _door(template, name, subst):
    """A function of ``template`` whose placeholder constants are replaced by ``subst``;
    its code is recorded as a door's."""
    if type(name) is not str:
        name = "door"
    code = _TEMPLATES[template]
    consts = _consts(template, code, subst, _DOOR_CONSTS)
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
    code = code.replace(co_consts=_consts(template, code, subst, _FACE_CONSTS))
    CODES.append(code)
    FACE_CODES.add(id(code))
    _restore(FACE_NS, FACE_NS_CONTENT)
    return _FunctionType(code, FACE_NS, "face", _DEFAULTS.get(template))


def _consts(template, code, subst, fixed):
    """The constants of ``code`` (``template``'s) with each placeholder replaced: by its
    value in ``subst`` (the door's or face's own), else in ``fixed`` (the same for every
    door, or every face). A template's constants with ``fixed`` applied, and where each of
    its string constants stands, are worked out once (``PREPARED``): a start makes ~260
    doors and faces from 11 templates, and looking each constant up twice per door was
    the largest part of making one."""
    key = (template, fixed is _DOOR_CONSTS)
    prepared = PREPARED.get(key)
    if prepared is None:
        base = [fixed.get(c, c) if type(c) is str else c for c in code.co_consts]
        at = {}
        for i, c in enumerate(code.co_consts):
            if type(c) is str:
                at[c] = (*at.get(c, ()), i)
        prepared = PREPARED[key] = (base, at)
    base, at = prepared
    consts = list(base)
    for key, value in dict.items(subst):
        for i in at.get(key, ()):
            consts[i] = value
    return tuple(consts)


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


def _same(result, args, kwargs):
    return result


def make_door(original, judge, post=None, name="door", fix=None):
    """A sealed function: ``judge(args, kwargs)`` then ``original(*args, **kwargs)``.

    The judge returns None (go on), ``(args, kwargs)`` (call with these instead), a
    :class:`Refusal` or a :class:`Value`. ``post(result, args, kwargs)`` may filter the
    result. Exceptions of the original come back as a Refusal without the door's frame.
    """
    if judge is None or judge is ALLOW_ALL:
        judge = _allow
    if fix is not None:  # ``fix(exception)`` sees what the original raised, first
        post = _same if post is None else post
        return _door("door_fix", name, {"@J": judge, "@O": original, "@P": post, "@F": fix})
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


def make_face(door, like=None, prepare=None, kind="", module=None):
    """The public side of ``door``: raise refusals, answer values, look like ``like``.

    ``prepare(args, kwargs)`` normalises arguments before the door sees them; when it
    says ``skips_lone_str``, a call with one exact ``str`` argument skips it. ``kind``
    (one of :data:`GATES`) gives the face that gate's signature: explicit parameters are
    cheaper to pass on than ``*args, **kwargs``. Only C code reads ``like`` (the program
    may have made it). ``module`` (a ``str``), when given, is the face's ``__module__``
    instead of ``like``'s (see ``api.engine._OWN_MODULE_FACES``).
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
    if type(module) is str:
        face.__module__ = module  # before staticmethod() copies it
    face.__pysb_face__ = True
    text = _face_signature(like)
    if type(like) is C_CALLABLES[0] and text is not None:
        text = _unbound_signature(text) or text
    if text is not None:
        face.__text_signature__ = text  # inspect's reading of the original's parameters
    if type(like) is C_CALLABLES[0]:
        # A C function is no descriptor: kept as a class attribute (``_unlink = os.unlink``)
        # it is called without the instance. A Python function would bind; its face is
        # handed out as a (callable, non-binding) staticmethod. Pickled by name (see
        # _reduce_static), like the C function. Its ``__func__`` / ``__wrapped__`` is the
        # face itself; ``inspect`` reads the C function's text signature on it (a
        # ``__signature__`` of None stops ``inspect.unwrap`` there, before the face's
        # ``(*args, **kwargs)``).
        # Without a text signature, None (as for the C function: inspect then finds none,
        # a ValueError; CPython's test_inspect reads the attribute on every C function).
        # No ``__wrapped__`` (staticmethod copies one in): the C function has none, and
        # the face is not what inspect.unwrap should lead to.
        method = staticmethod(face)
        ns = method.__dict__
        dict.__setitem__(ns, "__text_signature__", _unbound_signature(like.__text_signature__))
        dict.__setitem__(ns, "__signature__", None)
        if "__wrapped__" in ns:
            dict.__delitem__(ns, "__wrapped__")
        return method
    return face


def _literal(value, depth=0):
    """The text of a default value that inspect reads back as itself, or None."""
    kind = type(value)
    # those ``ast.literal_eval`` reads back (a float may be inf or nan)
    for literal in (type(None), bool, int, str, bytes):
        if kind is literal:
            return repr(value)
    if kind is tuple and depth < 2 and len(value) < 16:
        items = [_literal(v, depth + 1) for v in value]
        if None in items:
            return None
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return None


def _face_signature(like):
    """The ``__text_signature__`` that makes inspect read the parameters of ``like`` (the
    original) on its face, whose own code takes ``*args, **kwargs``; None when it cannot
    say them (a default that is not a literal, a C callable made by the program). C code
    reads ``like`` (an exact function, code, tuple, dict of exact str keys)."""
    kind = type(like)
    if kind is not _FunctionType:
        for c in C_CALLABLES:
            if kind is c:
                text = like.__text_signature__
                # none: a text inspect cannot read is its ValueError, as for the original
                return text if type(text) is str else "(<no signature>)"
        return None  # a class (inspect reads its constructor), a ctypes function...
    code = like.__code__
    names = code.co_varnames
    count, posonly, kwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    defaults = like.__defaults__ or ()
    kwdefaults = like.__kwdefaults__ or {}
    if type(defaults) is not tuple or type(kwdefaults) is not dict:
        return None
    _check_names(kwdefaults)
    parts = []
    first_default = count - len(defaults)
    for i in range(count):
        part = names[i]
        if i >= first_default:
            value = _literal(defaults[i - first_default])
            if value is None:
                return None
            part = part + "=" + value
        parts.append(part)
        if i == posonly - 1:
            parts.append("/")
    at = count + kwonly
    if code.co_flags & 0x04:  # CO_VARARGS
        parts.append("*" + names[at])
        at += 1
    elif kwonly:
        parts.append("*")
    for name in names[count : count + kwonly]:
        part = name
        if name in kwdefaults:
            value = _literal(kwdefaults[name])
            if value is None:
                return None
            part = part + "=" + value
        parts.append(part)
    if code.co_flags & 0x08:  # CO_VARKEYWORDS
        parts.append("**" + names[at])
    return "(" + ", ".join(parts) + ")"


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
