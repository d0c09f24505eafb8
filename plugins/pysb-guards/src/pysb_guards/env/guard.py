"""The environment guard: enforced by construction, learned by watching ``os.environ``.

The pipeline starts the sandboxed interpreter with exactly ``Policy.env`` as its
environment: a variable the profile does not name is simply absent (``KeyError``), whatever
the program does. There is nothing to patch when enforcing.

In a learning run the child sees the host's environment, and this module records which
variables the program reads (``os.environ[...]``, ``.get``, ``in``, ``os.getenv``, and the
bytes forms) after the guards are armed, so that the learned profile forwards each one with
``env: NAME: ${NAME}``. Not counted: variables the program set or deleted itself, and a scan
that reads back what it just listed (``dict(os.environ)``, ``for k in os.environ:
os.environ[k]``), which says nothing about what the program needs.
"""

from __future__ import annotations

from pysb_core.guardkit import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.guardkit import Policy, Recorder

GUARD = "env"

_state: dict[str, Any] = {}


@hookimpl
def pysb_child_install(policy: Policy, recorder: Recorder) -> str:
    """In a learning run, start watching reads of the environment. The variables
    themselves are enforced by construction (the child gets only the whitelist), so the
    family is in force either way: it is returned."""
    if recorder.learning:
        install(recorder)
    return GUARD


@hookimpl
def pysb_child_arm(policy: Policy, recorder: Recorder) -> None:
    """Reads count from here on (the framework's own start-up reads do not)."""
    if _state:
        _state["armed"] = True


def install(recorder: Recorder) -> None:
    """Wrap ``os.environ`` / ``os.environb`` reads (their class, ``os._Environ``)."""
    import os

    if _state:
        return
    from pysb_guards import _seal

    recorder = _seal.private_recorder(recorder)  # no program-writable method under a wrapper
    _state.update(armed=False, own=set(), listed=set())
    cls = type(os.environ)
    own: set[str] = _state["own"]
    listed: set[str] = _state["listed"]

    def text(key: Any) -> str | None:
        """The variable's name as an exact ``str``: the recorder (sealed) hashes and
        encodes it, and must run no method of a subclass the program made."""
        kind = type(key)
        if issubclass(kind, bytes):
            return bytes.decode(key, "utf-8", "surrogateescape")
        return str.__str__(key) if issubclass(kind, str) else None

    def note(key: Any) -> None:
        name = text(key)
        if name is None or not _state["armed"] or name in own:
            return
        if name in listed:
            listed.discard(name)
            return
        recorder.learn(GUARD, name, "read", f"env: {name}: ${{{name}}}")

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

    cls.__getitem__ = __getitem__  # type: ignore[method-assign]
    cls.__setitem__ = __setitem__  # type: ignore[method-assign]
    cls.__delitem__ = __delitem__  # type: ignore[method-assign]
    cls.__iter__ = __iter__  # type: ignore[method-assign]
    cls.__contains__ = __contains__  # type: ignore[method-assign]
