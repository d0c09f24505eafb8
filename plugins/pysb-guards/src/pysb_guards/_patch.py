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

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def set_attr(owner: Any, name: str, value: Any) -> bool:
    """``setattr`` that reports instead of raising (a read-only attribute stays as is)."""
    try:
        setattr(owner, name, value)
        return True
    except (AttributeError, TypeError):
        return False


def _swap(value: Any, faces: dict[int, Any]) -> Any:
    """The face for ``value``, or a container with its originals replaced, or None."""
    face = faces.get(id(value))
    if face is not None:
        return face
    kind = type(value)
    if kind in (set, frozenset) and value:
        if not faces.keys().isdisjoint(map(id, value)):
            return kind(faces.get(id(v), v) for v in value)
    elif kind is tuple and value and len(value) < 64:
        if not faces.keys().isdisjoint(map(id, value)):
            return tuple(faces.get(id(v), v) for v in value)
    elif kind is staticmethod:
        inner = faces.get(id(value.__func__))
        if inner is not None:
            return staticmethod(inner)
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


def sweep_module(module: Any, faces: dict[int, Any]) -> None:
    """Replace captured originals in one module's globals (and classes, for the few
    modules known to keep functions in class attributes).

    Most modules hold no original at all: one pass in C (``isdisjoint`` over the ids of
    the globals) rules out direct references, and only the containers among the globals
    are looked into.
    """
    namespace = getattr(module, "__dict__", None)
    if type(namespace) is not dict:
        return
    modname = namespace.get("__name__")
    classes = modname in CLASS_SWEEP
    if classes or not faces.keys().isdisjoint(map(id, namespace.values())):
        items = list(namespace.items())
    else:
        items = [(k, v) for k, v in namespace.items() if type(v) in _CONTAINERS]
    ids = faces.keys()
    get = faces.get
    for key, value in items:
        face = get(id(value))
        if face is not None:
            namespace[key] = face
            continue
        kind = type(value)
        if kind in _CONTAINERS:
            new = _swap(value, faces)
            if new is not None:
                namespace[key] = new
            elif kind is set:  # changed in place: others may share the set
                for v in [v for v in value if id(v) in ids]:
                    value.discard(v)
                    value.add(faces[id(v)])
            elif kind is list and len(value) < 256:
                if not ids.isdisjoint(map(id, value)):
                    for i, v in enumerate(value):
                        if id(v) in ids:
                            value[i] = faces[id(v)]
            elif (
                kind is dict
                and len(value) < 256
                and key != "__builtins__"
                and not ids.isdisjoint(map(id, value.values()))
            ):
                for k, v in list(value.items()):
                    if id(v) in ids:
                        value[k] = faces[id(v)]
        elif classes and isinstance(value, type) and value.__module__ == modname:
            _sweep_class(value, faces)


def _sweep_class(cls: type, faces: dict[int, Any]) -> None:
    try:
        items = list(vars(cls).items())
    except TypeError:
        return
    for key, value in items:
        new = _swap(value, faces)
        if new is not None:
            set_attr(cls, key, new)


#: Faces waiting for the one sweep made when the guards are armed (id(original) -> face).
_pending: dict[int, Any] = {}


def sweep(faces: dict[int, Any], visit: Callable[[Callable[[Any], None]], None]) -> None:
    """Sweep every module ``visit`` yields (see :func:`pysb_guards.imports.visit_modules`)."""

    def one(module: Any) -> None:
        if isinstance(module, types.ModuleType):
            sweep_module(module, faces)

    if faces:
        visit(one)


def defer_sweep(faces: dict[int, Any]) -> None:
    """Queue ``faces`` for :func:`sweep_pending` (one pass over the modules for all guards)."""
    _pending.update(faces)


def sweep_pending(visit: Callable[[Callable[[Any], None]], None]) -> None:
    faces = dict(_pending)
    _pending.clear()
    sweep(faces, visit)
