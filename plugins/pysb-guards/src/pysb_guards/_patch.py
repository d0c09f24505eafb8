"""Putting faces in place: module attributes, and the references modules captured earlier.

Replacing ``os.stat`` is not enough: a module loaded before the guards may hold the
original under another name (``from os import stat``, ``tokenize._builtin_open``, the
``os.supports_dir_fd`` set, a class attribute ``scandir = staticmethod(os.scandir)``).
:func:`sweep` finds such references in every loaded module -- including those the import
guard set aside -- and points them at the faces, so no module global hands the program an
original.
"""

from __future__ import annotations

import types
from itertools import compress

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any


def set_attr(owner: Any, name: str, value: Any) -> bool:
    """``setattr`` that reports instead of raising (a read-only attribute stays as is)."""
    try:
        setattr(owner, name, value)
        return True
    except (AttributeError, TypeError):
        return False


#: What an original usually is: a C function or a Python function. Both hash by identity
#: (a C function by its ``__self__`` and C code pointer), so such originals key the faces'
#: table themselves: no ``id()``, an audit event of its own (the sweep looks at every
#: global of every module, and each event is a call of the audit hook). Originals of other
#: kinds (a ``ctypes`` function object, unhashable) are found by id, among the values of
#: their own kinds only.
_KINDS = frozenset({types.BuiltinFunctionType, types.FunctionType})


class _Faces:
    """original -> face, for :func:`sweep_module`."""

    __slots__ = ("by_id", "by_obj", "other_kinds")

    def __init__(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        self.by_obj: dict[Any, Any] = {}
        self.by_id: dict[int, tuple[Any, Any]] = {}
        for original, face in pairs:
            if type(original) in _KINDS:
                self.by_obj[original] = face
            else:
                self.by_id[id(original)] = (original, face)
        self.other_kinds = frozenset(type(o) for o, _ in self.by_id.values())

    def __bool__(self) -> bool:
        return bool(self.by_obj or self.by_id)

    def get(self, value: Any, default: Any = None) -> Any:
        kind = type(value)
        if kind in _KINDS:
            return self.by_obj.get(value, default)
        if kind in self.other_kinds:
            entry = self.by_id.get(id(value))
            if entry is not None and entry[0] is value:
                return entry[1]
        return default

    def touches(self, values: list[Any]) -> bool:
        """Whether ``values`` holds an original (in C, but for the rare other kinds)."""
        kinds = map(_KINDS.__contains__, map(type, values))
        if not self.by_obj.keys().isdisjoint(compress(values, kinds)):
            return True
        if self.other_kinds:
            others = compress(values, map(self.other_kinds.__contains__, map(type, values)))
            return not self.by_id.keys().isdisjoint(map(id, others))
        return False


def _swap(value: Any, faces: _Faces) -> Any:
    """The face for ``value``, or a container with its originals replaced, or None."""
    face = faces.get(value)
    if face is not None:
        return face
    kind = type(value)
    if kind in (set, frozenset) and value:
        items = list(value)
        if faces.touches(items):
            return kind(faces.get(v, v) for v in items)
    elif kind is tuple and value and len(value) < 64:
        if faces.touches(list(value)):
            return tuple(faces.get(v, v) for v in value)
    elif kind is staticmethod:
        inner = faces.get(value.__func__)
        if inner is not None:  # the face of a C function is a staticmethod already
            return inner if type(inner) is staticmethod else staticmethod(inner)
    return None


#: Modules whose classes keep functions as class attributes (``staticmethod(os.scandir)``).
CLASS_SWEEP = frozenset(
    {
        "glob",
        "pathlib",
        "pathlib._local",
        "pathlib._abc",
        "shutil",
        "tempfile",
        "_pyio",
        "subprocess",
        "threading",
        "multiprocessing.process",
        "socket",
        "zipfile",
        "fileinput",
    }
)


_CONTAINERS = frozenset({set, frozenset, tuple, staticmethod, list, dict})


def sweep_module(module: Any, faces: _Faces) -> None:
    """Replace captured originals in one module's globals (and classes, for the few
    modules known to keep functions in class attributes).

    Most modules hold no original at all: one pass in C (``_Faces.touches``) rules out
    direct references, and only the containers among the globals are looked into.
    """
    namespace = getattr(module, "__dict__", None)
    if type(namespace) is not dict:
        return
    modname = namespace.get("__name__")
    classes = modname in CLASS_SWEEP
    if classes or faces.touches(list(namespace.values())):
        items = list(namespace.items())
    else:
        items = [(k, v) for k, v in namespace.items() if type(v) in _CONTAINERS]
    get = faces.get
    for key, value in items:
        face = get(value)
        if face is not None:
            namespace[key] = face
            continue
        kind = type(value)
        if kind in _CONTAINERS:
            new = _swap(value, faces)
            if new is not None:
                namespace[key] = new
            elif kind is set:  # changed in place: others may share the set
                for v in [v for v in value if get(v) is not None]:
                    value.discard(v)
                    value.add(get(v))
            elif kind is list and len(value) < 256:
                if faces.touches(value):
                    for i, v in enumerate(value):
                        face = get(v)
                        if face is not None:
                            value[i] = face
            elif (
                kind is dict
                and len(value) < 256
                and key != "__builtins__"
                and faces.touches(list(value.values()))
            ):
                for k, v in list(value.items()):
                    face = get(v)
                    if face is not None:
                        value[k] = face
        elif classes and isinstance(value, type) and value.__module__ == modname:
            _sweep_class(value, faces)


def _sweep_class(cls: type, faces: _Faces) -> None:
    try:
        items = list(vars(cls).items())
    except TypeError:
        return
    for key, value in items:
        new = _swap(value, faces)
        if new is not None:
            set_attr(cls, key, new)


#: Faces waiting for the one sweep made when the guards are armed: (original, face).
_pending: list[tuple[Any, Any]] = []


def sweep(
    faces: dict[Any, Any] | Iterable[tuple[Any, Any]],
    visit: Callable[[Callable[[Any], None]], None],
) -> None:
    """Sweep every module ``visit`` yields (see :func:`pysb_guards.imports.guard.visit_modules`)
    for the originals of ``faces`` (a dict original -> face, or the pairs)."""
    table = _Faces(faces.items() if type(faces) is dict else faces)

    def one(module: Any) -> None:
        if isinstance(module, types.ModuleType):
            sweep_module(module, table)

    if table:
        visit(one)


def defer_sweep(faces: dict[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
    """Queue ``faces`` (a dict original -> its face, or the pairs) for
    :func:`sweep_pending` (one pass over the modules for all guards)."""
    _pending.extend(faces.items() if type(faces) is dict else faces)


def sweep_pending(visit: Callable[[Callable[[Any], None]], None]) -> None:
    pairs = list(_pending)
    _pending.clear()
    sweep(pairs, visit)
