"""How an exception raised in the sandbox crosses back and is raised again in the caller.

Pickle drops ``__traceback__``, ``__cause__`` and ``__context__``; the caller wants all
three (the child's frames in the traceback, and :func:`sandbox_denials` must find a denial
that a library wrapped). So the child sends the chain as a list of *links*, each with

- the exception pickled on its own (may be refused by the parent's allowlist),
- a primitive descriptor (module, qualname, message) to fall back on,
- the frames ``(filename, lineno, name, line)`` of its traceback, ``line`` being the
  source line as the child read it,
- how it hangs on the previous link (``cause`` / ``context``, ``suppress_context``).

Everything in it is hostile data (issue 26 #2, #3). The parent checks every count, size
and number against the bounds below first (a violation is a
:class:`~pysb_core.errors.SandboxProtocolError`), then rebuilds every link under the
restricted unpickler, re-links the chain and gives each link a real traceback of
synthetic frames. A synthetic frame never names a host path: its file name is
``<sandbox: PATH>`` -- a name in angle brackets, which ``linecache``, ``inspect`` and
CPython's own traceback printer never open (a child could name ``/etc/shadow`` as its
``co_filename``) -- and its source line is the child's text, registered in ``linecache``
under that name (:class:`_SourceLines`: no list as long as the line number). Names and
lines are printed with their control characters escaped (no escape sequences or forged
lines in the host's terminal or logs). The frame is placed at its line number by
``co_firstlineno``, not by compiling that many newlines.

Why one module: describing a chain (child side) and rebuilding it (parent side) are the two
halves of one wire format; the bounds, the descriptor fields and the synthetic-frame rules must
change together, and keeping them side by side is what lets a reader check that every field the
child sends is checked before the parent uses it.
"""

from __future__ import annotations

import _pickle  # the worker imports this module: no `pickle`, `typing` or `types` there
import sys

from pysb_core.errors import SandboxProtocolError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import types
    from typing import Any

#: Bounds on what the child sends (the honest child keeps within them by itself).
MAX_LINKS = 16  # exceptions in one cause/context chain
MAX_FRAMES = 200  # frames in one traceback
MAX_LINENO = 1_000_000  # a line number
MAX_PATH = 4096  # characters of a file name
MAX_NAME = 1024  # characters of a function, module or class name
MAX_LINE = 1024  # characters of a source line
MAX_MESSAGE = 65536  # characters of the fallback message
MAX_ATTRS = 64  # plain attributes restored on one exception

Frames = list[tuple[str, int, str, str]]


# --------------------------------------------------------------------------- child side


def describe_chain(exc: BaseException, hide_file: str) -> bytes:
    """Encode ``exc`` and its cause/context chain (child side). Never raises."""
    links: list[dict[str, Any]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    relation = ""
    sources: dict[str, list[str]] = {}
    while current is not None and id(current) not in seen and len(links) < MAX_LINKS:
        seen.add(id(current))
        links.append(_describe(current, relation, hide_file, sources))
        if current.__cause__ is not None:
            relation, current = "cause", current.__cause__
        else:
            relation, current = "context", current.__context__
    return _pickle.dumps(links, protocol=5)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _describe(
    exc: BaseException, relation: str, hide_file: str, sources: dict[str, list[str]]
) -> dict[str, Any]:
    try:
        pickled: bytes | None = _pickle.dumps(exc, protocol=5)
    except Exception:
        pickled = None
    try:
        message = _cut(str(exc), MAX_MESSAGE)
    except Exception:
        message = f"<{type(exc).__name__} with an unprintable message>"
    frames: Frames = []
    tb = exc.__traceback__
    while tb is not None and len(frames) < MAX_FRAMES:
        try:
            code = tb.tb_frame.f_code
            filename, name, lineno = code.co_filename, code.co_name, tb.tb_lineno or 1
        except Exception:  # a guard's door hides its code: leave that frame out
            filename = hide_file
        if filename != hide_file:
            filename, name, lineno = str(filename), str(name), int(lineno)
            line = _source_line(filename, lineno, sources)
            if lineno > MAX_LINENO:
                line, lineno = f"(line {lineno}: beyond what pysb reports)", MAX_LINENO
            frames.append((_cut(filename, MAX_PATH), max(lineno, 1), _cut(name, MAX_NAME), line))
        try:
            tb = tb.tb_next
        except Exception:
            break
    return {
        "pickled": pickled,
        "state": _plain_state(exc),
        "module": _cut(type(exc).__module__, MAX_NAME),
        "qualname": _cut(type(exc).__qualname__, MAX_NAME),
        "message": message,
        "frames": frames,
        "relation": relation,
        "suppress": bool(exc.__suppress_context__),
    }


_SOURCE_BYTES = 8 << 20  # of one source file read to find a line


def _source_line(filename: str, lineno: int, sources: dict[str, list[str]]) -> str:
    """The child's own source line, as text (the parent never reads the child's files)."""
    line = ""
    cache = sys.modules.get("linecache")  # loaded: it knows loaders and encodings
    if cache is not None:
        try:
            line = str(cache.getline(filename, lineno))
        except Exception:
            line = ""
    if not line and not (filename.startswith("<") and filename.endswith(">")):
        lines = sources.get(filename)
        if lines is None:
            try:
                with open(filename, "rb") as f:
                    lines = f.read(_SOURCE_BYTES).decode("utf-8", "replace").splitlines()
            except Exception:  # not readable here (or refused by the guards): no line
                lines = []
            sources[filename] = lines
        line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
    return _cut(line.rstrip("\r\n"), MAX_LINE)


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
            state["attrs"] = dict(list(attrs.items())[:MAX_ATTRS])
    except Exception:
        pass
    return state


# -------------------------------------------------------------------------- parent side


def rebuild_chain(data: bytes | bytearray, allowed: dict[tuple[str, str], Any]) -> BaseException:
    """Decode what :func:`describe_chain` sent (parent side), under the restricted unpickler
    and the bounds; a violation comes back as a ``SandboxProtocolError`` to raise."""
    from pysb_core.remote import unpickler

    try:
        links = unpickler.loads(data, {})
        _check_links(links)
    except SandboxProtocolError as exc:
        return exc
    except Exception as exc:
        return SandboxProtocolError(f"the sandbox sent a malformed exception ({exc})")
    built = [_rebuild(link, allowed) for link in links]
    for i in range(len(built) - 1):
        nxt = links[i + 1]
        if nxt.get("relation") == "cause":
            built[i].__cause__ = built[i + 1]
        else:
            built[i].__context__ = built[i + 1]
        built[i].__suppress_context__ = bool(links[i].get("suppress"))
    return built[0]


def _bad(what: str) -> SandboxProtocolError:
    return SandboxProtocolError(f"the sandbox sent an exception that breaks pysb's bounds: {what}")


def _check_text(value: Any, limit: int, what: str) -> None:
    if type(value) is not str:
        raise _bad(f"{what} is a {type(value).__name__}, not a str")
    if len(value) > limit:
        raise _bad(f"{what} has {len(value)} characters (the bound is {limit})")


def _check_links(links: Any) -> None:
    """Every count, size and number of the chain within its bound, of the expected type."""
    if type(links) is not list or not links:
        raise _bad("it is not a list of links")
    if len(links) > MAX_LINKS:
        raise _bad(f"a chain of {len(links)} exceptions (the bound is {MAX_LINKS})")
    for link in links:
        if type(link) is not dict:
            raise _bad(f"a link is a {type(link).__name__}")
        _check_text(link.get("module", ""), MAX_NAME, "a module name")
        _check_text(link.get("qualname", ""), MAX_NAME, "a class name")
        _check_text(link.get("message", ""), MAX_MESSAGE, "a message")
        if link.get("relation", "") not in ("", "cause", "context"):
            raise _bad("a link hangs on the previous one by an unknown relation")
        frames = link.get("frames", [])
        if type(frames) is not list or len(frames) > MAX_FRAMES:
            raise _bad(f"a traceback of more than {MAX_FRAMES} frames, or not a list")
        for frame in frames:
            if type(frame) is not tuple or len(frame) != 4:
                raise _bad("a frame is not (file, line number, name, line)")
            filename, lineno, name, line = frame
            _check_text(filename, MAX_PATH, "a file name")
            _check_text(name, MAX_NAME, "a function name")
            _check_text(line, MAX_LINE, "a source line")
            if type(lineno) is not int or not 1 <= lineno <= MAX_LINENO:
                raise _bad(f"line number {lineno!r} (the bound is 1 to {MAX_LINENO})")
        state = link.get("state")
        if state is not None and type(state) is not dict:
            raise _bad("an exception's state is not a dict")
        attrs = state.get("attrs") if state else None
        if attrs is not None and (type(attrs) is not dict or len(attrs) > MAX_ATTRS):
            raise _bad(f"more than {MAX_ATTRS} attributes on one exception, or not a dict")


def _rebuild(link: dict[str, Any], allowed: dict[tuple[str, str], Any]) -> BaseException:
    from pysb_core.remote import unpickler

    module = link.get("module", "?")
    qualname = link.get("qualname", "?")
    message = link.get("message", "")
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
            exc = SandboxProtocolError(f"{_printable(module)}.{_printable(qualname)}: {message}")
    _restore_state(exc, link.get("state"))
    tb = remote_traceback(link.get("frames") or [])
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


# ------------------------------------------------------------- synthetic frames, parent side


def _printable(text: str) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\n``...)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def pseudo_filename(filename: str) -> str:
    """The name a child's file gets in the parent: ``<sandbox: PATH>``, which no host tool
    opens (``linecache`` and CPython's traceback printer skip names in angle brackets)."""
    import posixpath

    return f"<sandbox: {posixpath.normpath(_printable(filename)) if filename else '?'}>"


class _SourceLines:
    """The ``linecache`` lines of one pseudo file: the child's lines by number, "" for the
    others -- as long as its largest line number without a list that long."""

    __slots__ = ("known", "length")

    def __init__(self) -> None:
        self.known: dict[int, str] = {}
        self.length = 0

    def add(self, lineno: int, text: str) -> None:
        if lineno not in self.known and len(self.known) >= _LINES_PER_FILE:
            del self.known[next(iter(self.known))]
        self.known[lineno] = text
        self.length = max(self.length, lineno)

    def __len__(self) -> int:
        return self.length

    def __bool__(self) -> bool:
        return self.length > 0

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))]
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        return self.known.get(index + 1, "\n")

    def __iter__(self) -> Any:
        known = self.known
        return (known.get(i, "\n") for i in range(1, self.length + 1))


_FILES = 256  # pseudo files kept in linecache (the oldest is dropped)
_LINES_PER_FILE = 64
_pseudo_files: dict[str, _SourceLines] = {}


def _register_line(pseudo: str, lineno: int, line: str) -> None:
    """Let ``linecache.getline(pseudo, lineno)`` answer the child's text, bounded."""
    import linecache

    lines = _pseudo_files.get(pseudo)
    if lines is None or linecache.cache.get(pseudo, (None, None, None))[2] is not lines:
        while len(_pseudo_files) >= _FILES:
            old = next(iter(_pseudo_files))
            del _pseudo_files[old]
            linecache.cache.pop(old, None)
        lines = _pseudo_files[pseudo] = _SourceLines()
        # mtime None: checkcache() never looks for a file of that name
        linecache.cache[pseudo] = (0, None, lines, pseudo)  # type: ignore[assignment]
    lines.add(lineno, _printable(line.expandtabs(4)) + "\n")


_code_cache: dict[tuple[str, int, str], types.CodeType] = {}
_TEMPLATE: list[types.CodeType] = []


class _Unwind(Exception):
    """Raised inside a synthetic frame to capture it."""


def _frame_for(pseudo: str, lineno: int, name: str) -> types.FrameType | None:
    key = (pseudo, lineno, name)
    code = _code_cache.get(key)
    if code is None:
        if not _TEMPLATE:
            _TEMPLATE.append(compile("raise _Unwind", "<sandbox>", "exec"))
        try:
            code = _TEMPLATE[0].replace(
                co_filename=pseudo, co_name=name, co_qualname=name, co_firstlineno=lineno
            )
        except (ValueError, TypeError, OverflowError):
            return None
        if len(_code_cache) > 4096:
            _code_cache.clear()
        _code_cache[key] = code
    scope = {"__name__": "pysb_sandbox", "_Unwind": _Unwind}
    try:
        exec(code, scope)
    except _Unwind as caught:
        tb = caught.__traceback__
        return tb.tb_next.tb_frame if tb is not None and tb.tb_next is not None else None
    return None


def remote_traceback(frames: list[Any]) -> types.TracebackType | None:
    """A traceback whose frames show the child's files, lines, functions and source text,
    from frames already checked by :func:`_check_links`."""
    import types

    tb: types.TracebackType | None = None
    for filename, lineno, name, line in reversed(frames[:MAX_FRAMES]):
        pseudo = pseudo_filename(filename)
        frame = _frame_for(pseudo, lineno, _printable(name) or "?")
        if frame is not None:
            _register_line(pseudo, lineno, line)
            tb = types.TracebackType(tb, frame, -1, lineno)
    return tb
