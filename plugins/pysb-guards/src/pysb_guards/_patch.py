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
        if any(id(v) in faces for v in value):
            return kind(faces.get(id(v), v) for v in value)
    elif kind is tuple and value and len(value) < 64:
        if any(id(v) in faces for v in value):
            return tuple(faces.get(id(v), v) for v in value)
    elif kind is staticmethod:
        inner = faces.get(id(value.__func__))
        if inner is not None:
            return staticmethod(inner)
    return None


def sweep_module(module: Any, faces: dict[int, Any]) -> None:
    """Replace captured originals in one module's globals and in its classes."""
    namespace = getattr(module, "__dict__", None)
    if type(namespace) is not dict:
        return
    modname = namespace.get("__name__")
    for key, value in list(namespace.items()):
        new = _swap(value, faces)
        if new is not None:
            namespace[key] = new
            continue
        kind = type(value)
        if kind is set:  # mutable sets are changed in place: others may share them
            hits = [v for v in value if id(v) in faces]
            for v in hits:
                value.discard(v)
                value.add(faces[id(v)])
        elif kind is list and len(value) < 256:
            for i, v in enumerate(value):
                if id(v) in faces:
                    value[i] = faces[id(v)]
        elif kind is dict and len(value) < 256 and key != "__builtins__":
            for k, v in list(value.items()):
                if id(v) in faces:
                    value[k] = faces[id(v)]
        elif isinstance(value, type) and getattr(value, "__module__", None) == modname:
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


def sweep(faces: dict[int, Any], visit: Callable[[Callable[[Any], None]], None]) -> None:
    """Sweep every module ``visit`` yields (see :func:`pysb_guards.imports.visit_modules`)."""
    if faces:
        visit(
            lambda module: (
                sweep_module(module, faces) if isinstance(module, types.ModuleType) else None
            )
        )
