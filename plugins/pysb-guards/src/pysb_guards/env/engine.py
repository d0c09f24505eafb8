"""The environment guard's engine: which reads of ``os.environ`` a learning run records.

A read counts once the guards are armed (``state["armed"]``), unless the program set or
deleted the variable itself (``state["own"]``) or reads back what a scan just listed
(``state["listed"]``: ``dict(os.environ)`` says nothing about what the program needs).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def wrappers(
    cls: type, recorder: Any, state: dict[str, Any], guard: str
) -> dict[str, Callable[..., Any]]:
    """The methods of ``cls`` (``os._Environ``) that note reads for ``recorder`` (the
    guards' private one) as family ``guard``'s, by name; ``state`` holds ``armed``, ``own``
    and ``listed``. (The guard passes its name: the engine imports nothing of the guard.)"""
    own: set[str] = state["own"]
    listed: set[str] = state["listed"]

    def text(key: Any) -> str | None:
        """The variable's name as an exact ``str``: the recorder (sealed) hashes and
        encodes it, and must run no method of a subclass the program made."""
        kind = type(key)
        if issubclass(kind, bytes):
            return bytes.decode(key, "utf-8", "surrogateescape")
        return str.__str__(key) if issubclass(kind, str) else None

    def note(key: Any) -> None:
        name = text(key)
        if name is None or not state["armed"] or name in own:
            return
        if name in listed:
            listed.discard(name)
            return
        recorder.learn(guard, name, "read", f"env: {name}: ${{{name}}}")

    original_getitem = cls.__getitem__
    original_setitem = cls.__setitem__
    original_delitem = cls.__delitem__
    original_iter = cls.__iter__

    def __getitem__(self: Any, key: Any) -> Any:
        try:
            return original_getitem(self, key)
        finally:
            note(key)

    def __setitem__(self: Any, key: Any, value: Any) -> None:
        name = text(key)
        if name is not None:
            own.add(name)
        original_setitem(self, key, value)

    def __delitem__(self: Any, key: Any) -> None:
        name = text(key)
        if name is not None:
            own.add(name)
        original_delitem(self, key)

    def __iter__(self: Any) -> Any:
        for key in original_iter(self):
            name = text(key)
            if name is not None:
                listed.add(name)
            yield key

    def __contains__(self: Any, key: Any) -> bool:
        try:
            original_getitem(self, key)
        except KeyError:
            note(key)
            return False
        note(key)
        return True

    return {
        "__getitem__": __getitem__,
        "__setitem__": __setitem__,
        "__delitem__": __delitem__,
        "__iter__": __iter__,
        "__contains__": __contains__,
    }
