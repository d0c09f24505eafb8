"""The sandboxed side of partial mode: serve calls arriving over the inherited channel
(the call pipe, answers on the answer pipe; or one socket: pysb_core.remote.transport).

Started by the bootstrap in "entry" mode: this module is imported *before* the guards are
installed (framework code), then :func:`serve` runs with the guards installed but not yet
armed. Everything the worker needs after arming -- threads, the event loop, the pickle
and fd functions, the stdout/stderr proxies -- is created or captured first, so that the
armed API guard (which may deny threads, pickle or sockets to user code) never has to make
an exception for the framework.

Concurrency: a fixed pool of worker threads waits in one epoll set where the call fd is
registered one-shot: a frame wakes exactly one idle thread (epoll's waiters are exclusive,
and one-shot keeps the others asleep until that thread has read the frame and re-armed),
which then runs the call itself -- one wake-up per call, no hand-off, no thundering herd.
``async def`` functions run on one event loop thread. Each call's ``print()`` goes up as
OUT/ERR frames tagged with its call id (a context variable says which call a thread or
task is serving), before its RESULT, so the caller sees them in order and unmixed.

Why one module: everything the worker uses after arming must be created or captured before, in
this one start-up: the argument unpickler, the per-call streams, the epoll server and the thread
hand-off all share those captured functions and the per-call context. Splitting them would make
each new module an import made before the guards, and a place where the capture rule could be
broken unseen.
"""

from __future__ import annotations

import _pickle  # the C module: `pickle` would import functools, re, enum... (~5-20 ms)
import contextvars
import importlib
import io
import os
import select
import sys
import threading

from pysb_core.errors import DeniedError, SandboxBaseExceptionError, SandboxError
from pysb_core.remote import buffers, transport
from pysb_core.remote.exceptions import describe_chain
from pysb_core.remote.state import mark_in_sandbox

TYPE_CHECKING = False  # typing is not imported inside the sandbox (start-up budget)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from typing import Any

# Captured now, before any guard is installed. (The API guard later sweeps module globals
# and points them at its faces; that is fine for these, whose faces let framework calls
# through -- except pickle.loads, hence _ArgsUnpickler below.)
_dumps = _pickle.dumps
_import_module = importlib.import_module
_Thread = threading.Thread
_exit = os._exit
_get_ident = threading.get_ident
_CO_COROUTINE = 0x80
_HERE = os.path.abspath(__file__)

_current: contextvars.ContextVar[int | None] = contextvars.ContextVar("pysb_call", default=None)


class _ArgsUnpickler(_pickle.Unpickler):
    """Decodes the host's requests (the trusted direction).

    Its own ``find_class`` imports through ``importlib`` (so the import guard sees a
    framework import) instead of the C default, whose ``pickle.find_class`` audit event
    the API guard would judge as the program unpickling. User code calling
    ``pickle.loads`` itself is still judged.
    """

    def find_class(self, module: str, name: str) -> Any:
        obj: Any = _import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj

    def persistent_load(self, pid: Any) -> Any:
        return self.objs[pid]  # an out-of-band buffer of this call (the host's index)


_OOBPayload = buffers.OOBPayload
_CALL, _CALL_OOB = transport.CALL, transport.CALL_OOB
_CALL_RETRY, _CALL_OOB_RETRY = transport.CALL_RETRY, transport.CALL_OOB_RETRY
_mark = os.write  # StartedLog.mark, inline in the hot path: one 8-byte write to the pipe
_pack_id = transport.STARTED_ID.pack
#: The worker's _CallStream objects (stdout and stderr): flushed before each answer.
_STREAMS: list[_CallStream] = []
_dumps_oob = buffers.dumps_oob
_shallow_buffer = buffers.shallow_buffer
_IN_BAND_LIMIT = buffers.IN_BAND_LIMIT
_RESULT = transport.RESULT
_BytesIO = io.BytesIO


def _loads(payload: Any) -> Any:
    if type(payload) is not _OOBPayload:
        return _ArgsUnpickler(_BytesIO(payload)).load()
    unpickler = _ArgsUnpickler(_BytesIO(payload.pickle))
    unpickler.objs = buffers.materialize(payload.buffers)
    return unpickler.load()


def _encode_result(value: Any) -> tuple[int, Any]:
    """RESULT and one pickle, or RESULT_OOB and the parts of a frame with its large
    buffers out of band; a SandboxError when it is above what the host accepts."""
    # buffers.dumps, inline (on every call): most results are one small in-band pickle
    data: Any = None
    if not _shallow_buffer(value):
        try:
            data = _dumps(value, protocol=5)
        except TypeError:
            data = None  # a memoryview deeper inside: pickled out of band below
        if data is not None and len(data) < _IN_BAND_LIMIT:
            return _RESULT, data
    data, out = _dumps_oob(value)
    table = buffers.COUNT.size + buffers.ENTRY.size * len(out) if out else 0
    _bounded(table + len(data) + sum(view.nbytes for _, view in out))
    if not out:
        return transport.RESULT, data
    return transport.RESULT_OOB, buffers.frame_parts(data, out)


DEFAULT_THREADS = 16
_ONE_SHOT = select.EPOLLIN | select.EPOLLONESHOT
WORKER_STACK = 2 << 20  # bytes per worker thread (the main thread's default is 8 MiB)
_M_ARENA_MAX = -8  # glibc mallopt parameter


class _CallStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of the worker: per-call capture, else the real stream."""

    def __init__(self, kind: int, fallback: Any, writer: transport.FrameWriter) -> None:
        super().__init__()
        _STREAMS.append(self)
        self._kind = kind
        self._fallback = fallback
        self._writer = writer
        # Text after the last newline, per thread: a line goes up whole, so that the lines
        # of threads printing at once never mix (print() writes the text and "\n" apart).
        self._partial: dict[int, tuple[int, list[str]]] = {}
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        cid = _current.get()
        if cid is None:
            return self._fallback.write(s) if self._fallback is not None else len(s)
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if not s:
            return 0
        me = _get_ident()
        head, newline, tail = s.rpartition("\n")
        with self._lock:
            held = self._partial.pop(me, None)
            if held is not None and held[0] != cid:  # left by an earlier call of this thread
                self._send(held[0], "".join(held[1]))
                held = None
            if not newline:
                parts = held[1] if held is not None else []
                parts.append(s)
                self._partial[me] = (cid, parts)
                return len(s)
            if tail:
                self._partial[me] = (cid, [tail])
        text = head + newline if held is None else "".join(held[1]) + head + newline
        self._send(cid, text)
        return len(s)

    def _send(self, cid: int, text: str) -> None:
        # one frame per OUTPUT_CHARS characters: the host refuses output frames above
        # transport.MAX_OUTPUT bytes (a character is at most four bytes in UTF-8)
        step = transport.OUTPUT_CHARS
        for start in range(0, len(text), step):
            chunk = text[start : start + step]
            self._writer.send(self._kind, cid, chunk.encode("utf-8", "surrogatepass"))

    def flush_call(self, cid: int) -> None:
        """Send what the threads of call ``cid`` wrote after their last newline (before
        the call's answer, or on flush())."""
        if not self._partial:  # nothing held (most calls); this thread's own text is seen
            return
        with self._lock:
            held = [(k, v) for k, v in self._partial.items() if v[0] == cid]
            for k, _ in held:
                del self._partial[k]
        for _, (_, parts) in held:
            self._send(cid, "".join(parts))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        cid = _current.get()
        if cid is not None:
            self.flush_call(cid)
        elif self._fallback is not None:
            self._fallback.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        if _current.get() is None and self._fallback is not None:
            return self._fallback.isatty()
        return False

    def fileno(self) -> int:
        if _current.get() is None and self._fallback is not None:
            return self._fallback.fileno()
        raise io.UnsupportedOperation("a sandboxed call's output is captured; it has no fileno")

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "strict"

    @property
    def buffer(self) -> _BinaryStream:
        return _BinaryStream(self)


class _BinaryStream(io.RawIOBase):
    """``sys.stdout.buffer`` of the worker: bytes are sent as UTF-8 text (replaced if not)."""

    def __init__(self, text: _CallStream) -> None:
        super().__init__()
        self._text = text

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._text.write(data.decode("utf-8", "replace"))
        return len(data)


class _Server:
    """One worker process: reads frames, runs calls, sends answers."""

    def __init__(self, fd: int, started_fd: int, threads: int, out_fd: int = -1) -> None:
        self.started_fd = started_fd
        self.stopping = False
        # answers go to ``out_fd`` (the answer pipe), or back on ``fd`` (the socket)
        self.writer = transport.FrameWriter(fd if out_fd < 0 else out_fd)
        self.reader = transport.ExactFrameReader(fd)
        self.read_lock = threading.Lock()  # never contended: one-shot epoll wakes one thread
        self.fd = fd
        self.epoll = select.epoll()
        self.epoll.register(fd, _ONE_SHOT)
        self.stop = threading.Event()
        self.cache: dict[str, tuple[Callable[..., Any], bool]] = {}
        self.loop: Any = None
        self.tasks: set[Any] = set()  # the loop keeps only weak references to its tasks
        self.threads = [
            _Thread(target=self._serve_frames, name=f"pysb-worker-{i}", daemon=True)
            for i in range(max(1, threads))
        ]

    # -- the frame loop (leader / follower) ----------------------------------------

    def _end(self) -> None:
        self.stopping = True
        self.stop.set()

    def _serve_frames(self) -> None:
        # The hot loop of the worker (issue 30): a call costs its wait, one read, the
        # re-arm, the started mark and one write, and a few Python frames; ``stopping``
        # mirrors ``stop`` as a plain attribute (Event.is_set is a Python call).
        reader, lock = self.reader, self.read_lock
        wait, rearm, fd = self.epoll.poll, self.epoll.modify, self.fd
        while not self.stopping:
            try:
                wait()
            except InterruptedError:
                continue
            with lock:
                if self.stopping:
                    return
                try:
                    kind, cid, payload = reader.read()
                except transport.ChannelClosed:
                    self._end()
                    return
                finally:
                    if not self.stopping:
                        rearm(fd, _ONE_SHOT)  # the next frame wakes the next idle thread
            if kind in (_CALL, _CALL_OOB):
                _mark(self.started_fd, _pack_id(cid))  # the host never sends it again
                self._handle(cid, payload)
            elif kind in (_CALL_RETRY, _CALL_OOB_RETRY):  # safe to repeat: no mark
                self._handle(cid, payload)
            elif kind == transport.SHUTDOWN:
                self._end()
                return

    def _handle(self, cid: int, payload: bytes | bytearray) -> None:
        token = _current.set(cid)
        try:
            ref, args, kwargs = _loads(payload)
            hit = self.cache.get(ref)
            fn, is_async = hit if hit is not None else self._resolve(ref)
            if is_async:
                self._start_async(cid, fn, args, kwargs)
                return
            kind, data = _encode_result(fn(*args, **kwargs))
        except BaseException as exc:
            _flush_call(cid)
            self._send_exception(transport.EXCEPTION, cid, exc)
        else:
            for stream in _STREAMS:  # _flush_call, inline: lines this call left unfinished
                if stream._partial:
                    stream.flush_call(cid)
            self.writer.send(kind, cid, data)
        finally:
            _current.reset(token)

    def _send_exception(self, kind: int, cid: int, exc: BaseException) -> None:
        if not isinstance(exc, Exception):
            exc = _wrap_base_exception(exc)
        try:
            data = describe_chain(exc, _HERE)
        except BaseException as again:
            data = describe_chain(SandboxError(f"unreportable exception: {again!r}"), _HERE)
        if len(data) > transport.MAX_EXCEPTION:  # the host would refuse it: say so instead
            text = f"{type(exc).__module__}.{type(exc).__qualname__}"
            data = describe_chain(
                SandboxError(
                    f"the sandboxed function raised {text}, whose description takes "
                    f"{len(data)} bytes: above partial mode's bound of "
                    f"{transport.MAX_EXCEPTION >> 20} MiB for an exception"
                ),
                _HERE,
            )
        self.writer.send(kind, cid, data)

    # -- finding the function --------------------------------------------------------

    def _resolve(self, ref: str) -> tuple[Callable[..., Any], bool]:
        hit = self.cache.get(ref)
        if hit is not None:
            return hit
        fn = resolve_reference(ref)
        code = getattr(fn, "__code__", None)
        is_async = bool(code is not None and code.co_flags & _CO_COROUTINE)
        self.cache[ref] = (fn, is_async)
        return fn, is_async

    # -- async functions ---------------------------------------------------------------

    def _start_async(self, cid: int, fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
        if self.loop is None:
            kind, data = _encode_result(_drive_without_loop(fn(*args, **kwargs)))
            self.writer.send(kind, cid, data)
            return
        ctx = contextvars.copy_context()  # carries _current = cid into the task
        self.loop.call_soon_threadsafe(self._create_task, cid, fn, args, kwargs, ctx)

    def _create_task(self, cid: int, fn: Any, args: Any, kwargs: Any, ctx: Any) -> None:
        task = self.loop.create_task(self._run_async(cid, fn, args, kwargs), context=ctx)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run_async(self, cid: int, fn: Any, args: Any, kwargs: Any) -> None:
        try:
            kind, data = _encode_result(await fn(*args, **kwargs))
        except BaseException as exc:
            _flush_call(cid)
            self._send_exception(transport.EXCEPTION, cid, exc)
        else:
            _flush_call(cid)
            self.writer.send(kind, cid, data)

    def start_loop(self) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        _Thread(target=self.loop.run_forever, name="pysb-worker-loop", daemon=True).start()

    def run_init(self, ref: str | None) -> None:
        if not ref:
            return
        fn = resolve_reference(ref)
        result = fn()
        if hasattr(result, "__await__"):
            if self.loop is not None:
                import asyncio

                asyncio.run_coroutine_threadsafe(result, self.loop).result()
            else:
                _drive_without_loop(result)


def _bounded(size: int) -> None:
    """A result the host accepts (transport.MAX_RESULT), else a SandboxError saying so."""
    if size > transport.MAX_RESULT:
        raise SandboxError(
            f"the sandboxed function returned {size} bytes of pickle: above partial "
            f"mode's bound of {transport.MAX_RESULT >> 20} MiB for a result; return less, or "
            "write it to a file in an exposure"
        )


def _flush_call(cid: int) -> None:
    """Send the unfinished lines of call ``cid`` before its answer (of the worker's own
    streams, whatever ``sys.stdout`` and ``sys.stderr`` are now)."""
    for stream in _STREAMS:
        if stream._partial:
            try:
                stream.flush_call(cid)
            except Exception:
                pass


def _carry_calls_into_threads() -> None:
    """A thread started by a call runs in that call's context (``threading`` does not copy
    context variables into new threads before 3.14): what it prints is the call's output,
    sent whole line by whole line, instead of going to the worker's own stdout."""
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if _current.get() is not None:
            ctx = contextvars.copy_context()
            run = self.run
            try:
                self.run = lambda: ctx.run(run)  # type: ignore[method-assign]
            except AttributeError:
                pass
        return original(self)

    start.__name__, start.__qualname__, start.__doc__ = "start", "Thread.start", original.__doc__
    start.__module__ = original.__module__
    threading.Thread.start = start  # type: ignore[method-assign]


def _wrap_base_exception(exc: BaseException) -> SandboxBaseExceptionError:
    """SystemExit, KeyboardInterrupt...: reported, never re-raised as such in the caller."""
    text = str(exc)
    new = SandboxBaseExceptionError(
        f"the sandboxed function raised {type(exc).__name__}" + (f": {text}" if text else "")
    )
    new.exception_type = f"{type(exc).__module__}.{type(exc).__qualname__}"  # type: ignore[attr-defined]
    code = getattr(exc, "code", None) if isinstance(exc, SystemExit) else None
    new.code = code if isinstance(code, int | None) else repr(code)  # type: ignore[attr-defined]
    new.__traceback__ = exc.__traceback__
    return new


def _drive_without_loop(coro: Any) -> Any:
    """Run a coroutine that never awaits a real future (no event loop in this worker)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise SandboxError(
        "this sandbox was started without an event loop, so an async sandboxed function that "
        "awaits cannot run; import the module defining it before entering sandboxes(), or "
        "start the sandbox with `async with sandboxes()` or pysb_core.run()"
    )


def resolve_reference(ref: str) -> Callable[..., Any]:
    """Import ``module:qualname`` (through the import guard) and return the function."""
    modname, _, qualname = ref.partition(":")
    try:
        obj: Any = _import_module(modname)
    except DeniedError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and modname.startswith(exc.name):
            raise SandboxError(
                f"the sandbox cannot import module {modname!r} to find {qualname}(): define "
                "sandboxed functions at the top level of a module that the sandboxed child "
                "can import (on sys.path, below an exposed directory)"
            ) from exc
        raise
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SandboxError(
                f"the sandbox imported module {modname!r} but found no {qualname!r} in it: "
                "define sandboxed functions at the top level of the module (not nested, not "
                "a lambda, not created at run time)"
            ) from None
    return getattr(obj, "__pysb_wrapped__", obj)


def _merge_sys_path(entries: list[str]) -> None:
    """Search modules where the caller does (its entries first, then the child's own)."""
    rest = [p for p in sys.path if p not in entries]
    sys.path[:] = [*entries, *rest]


def _fit_memory_limit() -> None:
    """Under a memory limit, keep glibc from reserving 64 MiB of address space per thread.

    glibc gives each new thread its own malloc arena (up to 8 per core), and RLIMIT_AS
    counts the reservation: a dozen idle threads would exhaust a 512 MiB limit.
    """
    import resource

    try:
        if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
            return
        import ctypes  # only now: costs ~2 ms (a framework import, before arming)

        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 2)
    except (OSError, AttributeError, ValueError, ImportError):
        pass  # not glibc: nothing to tune


def serve(args: dict[str, Any], arm: Callable[[], None]) -> None:
    """Entry point called by the bootstrap; never returns (exits when the parent says so)."""
    mark_in_sandbox()
    fd, started_fd = int(args["fd"]), int(args["started_fd"])
    out_fd = int(args.get("out_fd", -1))  # two pipes: calls on fd, answers on out_fd
    for own in (fd, started_fd, out_fd):  # never inherited by processes the user's code starts
        if own >= 0:
            os.set_inheritable(own, False)
    if args.get("sys_path"):
        _merge_sys_path([str(p) for p in args["sys_path"]])
    server = _Server(fd, started_fd, int(args.get("threads") or DEFAULT_THREADS), out_fd)
    sys.stdout = _CallStream(transport.OUT, sys.stdout, server.writer)
    sys.stderr = _CallStream(transport.ERR, sys.stderr, server.writer)
    _carry_calls_into_threads()
    # Modest stacks: a memory limit (RLIMIT_AS) counts every thread's reserved stack.
    _fit_memory_limit()
    previous = threading.stack_size(WORKER_STACK)
    try:
        if args.get("asyncio"):
            server.start_loop()
        for thread in server.threads:
            thread.start()
    finally:
        threading.stack_size(previous)
    arm()
    try:
        server.run_init(args.get("init_fn"))
    except BaseException as exc:
        server._send_exception(transport.INIT_FAILED, 0, exc)
        _finish(1)
    server.writer.send(transport.READY, 0, _dumps({"pid": os.getpid()}, protocol=5))
    server.stop.wait()
    _finish(0)


def _finish(status: int) -> None:
    """Exit at once: daemon threads may sit in reads, and user threads must not hold us."""
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass
    _exit(status)
