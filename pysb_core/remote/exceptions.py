"""How an exception raised in the sandbox crosses back and is raised again in the caller.

Pickle drops ``__traceback__``, ``__cause__`` and ``__context__``; the caller wants all
three (the child's frames in the traceback, and :func:`sandbox_denials` must find a denial
that a library wrapped). So the child sends the chain as a list of *links*, each with

- the exception pickled on its own (may be refused by the parent's allowlist),
- a primitive descriptor (module, qualname, message) to fall back on,
- the frames ``(filename, lineno, name)`` of its traceback,
- how it hangs on the previous link (``cause`` / ``context``, ``suppress_context``).

The parent rebuilds every link under the restricted unpickler, re-links the chain and gives
each link a real traceback made of synthetic frames that carry the child's file names,
line numbers and function names (so ``traceback`` prints the child's source lines).
"""

from __future__ import annotations

import _pickle  # the worker imports this module: no `pickle`, `typing` or `types` there

from pysb_core.errors import SandboxProtocolError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import types
    from typing import Any

_MAX_LINKS = 16
_MAX_FRAMES = 200

Frames = list[tuple[str, int, str]]


# --------------------------------------------------------------------------- child side


def describe_chain(exc: BaseException, hide_file: str) -> bytes:
    """Encode ``exc`` and its cause/context chain (child side). Never raises."""
    links: list[dict[str, Any]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    relation = ""
    while current is not None and id(current) not in seen and len(links) < _MAX_LINKS:
        seen.add(id(current))
        links.append(_describe(current, relation, hide_file))
        if current.__cause__ is not None:
            relation, current = "cause", current.__cause__
        else:
            relation, current = "context", current.__context__
    return _pickle.dumps(links, protocol=5)


def _describe(exc: BaseException, relation: str, hide_file: str) -> dict[str, Any]:
    try:
        pickled: bytes | None = _pickle.dumps(exc, protocol=5)
    except Exception:
        pickled = None
    try:
        message = str(exc)
    except Exception:
        message = f"<{type(exc).__name__} with an unprintable message>"
    frames: Frames = []
    tb = exc.__traceback__
    while tb is not None and len(frames) < _MAX_FRAMES:
        try:
            code = tb.tb_frame.f_code
            filename, name, lineno = code.co_filename, code.co_name, tb.tb_lineno or 1
        except Exception:  # a guard's door hides its code: leave that frame out
            filename = hide_file
        if filename != hide_file:
            frames.append((str(filename), int(lineno), str(name)))
        try:
            tb = tb.tb_next
        except Exception:
            break
    return {
        "pickled": pickled,
        "state": _plain_state(exc),
        "module": type(exc).__module__,
        "qualname": type(exc).__qualname__,
        "message": message,
        "frames": frames,
        "relation": relation,
        "suppress": bool(exc.__suppress_context__),
    }


_PLAIN = (str, int, float, bytes, bool, type(None))


def _plain(value: Any, depth: int = 0) -> bool:
    if type(value) in _PLAIN:
        return True
    if type(value) in (tuple, list) and depth < 2 and len(value) < 64:
        return all(_plain(v, depth + 1) for v in value)
    return False


def _plain_state(exc: BaseException) -> dict[str, Any]:
    """``args`` and the instance attributes of ``exc`` that are plain data: what its pickle
    may leave out (``JSONDecodeError`` pickles as ``(msg, doc, pos)``: no ``lineno``, and
    ``args`` would become that tuple)."""
    state: dict[str, Any] = {}
    try:
        if _plain(exc.args):
            state["args"] = tuple(exc.args)
        attrs = {
            k: v
            for k, v in vars(exc).items()
            if type(k) is str and not k.startswith("__") and _plain(v)
        }
        if attrs:
            state["attrs"] = attrs
    except Exception:
        pass
    return state


# -------------------------------------------------------------------------- parent side


def rebuild_chain(data: bytes | bytearray, allowed: dict[tuple[str, str], Any]) -> BaseException:
    """Decode what :func:`describe_chain` sent (parent side), under the restricted unpickler."""
    from pysb_core.remote import unpickler

    links = unpickler.loads(data, {})
    if not isinstance(links, list) or not links:
        return SandboxProtocolError("the sandbox sent a malformed exception")
    built = [_rebuild(link, allowed) for link in links if isinstance(link, dict)]
    for i in range(len(built) - 1):
        nxt = links[i + 1]
        if nxt.get("relation") == "cause":
            built[i].__cause__ = built[i + 1]
        else:
            built[i].__context__ = built[i + 1]
        built[i].__suppress_context__ = bool(links[i].get("suppress"))
    return built[0]


def _rebuild(link: dict[str, Any], allowed: dict[tuple[str, str], Any]) -> BaseException:
    from pysb_core.remote import unpickler

    module = str(link.get("module", "?"))
    qualname = str(link.get("qualname", "?"))
    message = str(link.get("message", ""))
    exc: BaseException | None = None
    pickled = link.get("pickled")
    if isinstance(pickled, bytes | bytearray):
        try:
            value = unpickler.loads(pickled, allowed, exceptions=True)
        except Exception:
            value = None
        if isinstance(value, Exception):
            exc = value
    if exc is None:
        try:
            cls = unpickler._resolve_loaded(module, qualname)
        except (LookupError, TypeError):
            cls = None
        if isinstance(cls, type) and issubclass(cls, Exception):
            exc = unpickler._exception_factory(cls)(message)
        else:
            exc = SandboxProtocolError(f"{module}.{qualname}: {message}")
    _restore_state(exc, link.get("state"))
    frames = link.get("frames") or []
    tb = remote_traceback(frames)
    if tb is not None:
        exc.__traceback__ = tb
    return exc


def _restore_state(exc: BaseException, state: Any) -> None:
    """Put back what the exception's pickle left out (see :func:`_plain_state`): plain
    values only, into the instance dictionary (no ``__setattr__`` of the class runs), never
    over an attribute the pickle restored."""
    if not isinstance(state, dict) or isinstance(exc, SandboxProtocolError):
        return
    args = state.get("args")
    if type(args) is tuple and _plain(args):
        exc.args = args
    attrs = state.get("attrs")
    if type(attrs) is dict:
        own = getattr(exc, "__dict__", None)
        if type(own) is not dict:
            return
        for key, value in attrs.items():
            named = type(key) is str and key.isidentifier() and not key.startswith("__")
            if named and _plain(value) and key not in own and not hasattr(type(exc), key):
                own[key] = value


_code_cache: dict[tuple[str, int, str], types.CodeType] = {}


class _Unwind(Exception):
    """Raised inside a synthetic frame to capture it."""


def _frame_for(filename: str, lineno: int, name: str) -> types.FrameType | None:
    key = (filename, lineno, name)
    code = _code_cache.get(key)
    if code is None:
        try:
            code = compile("\n" * (max(lineno, 1) - 1) + "raise _Unwind", filename, "exec")
            code = code.replace(co_name=name)
        except (SyntaxError, ValueError, TypeError):
            return None
        if len(_code_cache) > 4096:
            _code_cache.clear()
        _code_cache[key] = code
    scope = {"__name__": "pysb_sandbox", "__file__": filename, "_Unwind": _Unwind}
    try:
        exec(code, scope)
    except _Unwind as caught:
        tb = caught.__traceback__
        return tb.tb_next.tb_frame if tb is not None and tb.tb_next is not None else None
    return None


def remote_traceback(frames: list[Any]) -> types.TracebackType | None:
    """Build a traceback whose frames name the child's files, lines and functions."""
    import types

    tb: types.TracebackType | None = None
    for entry in reversed(frames[:_MAX_FRAMES]):
        try:
            filename, lineno, name = str(entry[0]), int(entry[1]), str(entry[2])
        except (TypeError, ValueError, IndexError):
            continue
        frame = _frame_for(filename, lineno, name)
        if frame is not None:
            tb = types.TracebackType(tb, frame, -1, max(lineno, 1))
    return tb
