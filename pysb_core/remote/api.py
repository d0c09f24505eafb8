"""The public partial-mode API: ``@sandbox``, ``sandboxes()``, ``run()``.

One sandbox per host process, reference counted: nested or concurrent ``sandboxes()``
share it and only the last exit stops it; sync and async callers share it too. Inside the
sandboxed interpreter (or under ``pysb run``) ``@sandbox`` calls the function directly and
``sandboxes()`` starts nothing.

Why one module: it is the whole public partial-mode surface (``@sandbox``, ``sandboxes()``,
``run()``) and the one reference-counted sandbox they share, with the SIGTERM handling that
shared sandbox needs; the three entry points differ only in how they reach that shared state,
and this is the module users read. The transport, client and worker are in their own modules.
"""

from __future__ import annotations

import functools
import inspect
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pysb_core.errors import SandboxError
from pysb_core.remote.state import is_in_sandbox

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_client: Any = None
_refs = 0
_async_functions = False  # an async @sandbox function exists: workers start an event loop
#: Top-level names of the modules that define sandboxed functions: like the program's own
#: script in complete mode, the worker's import guard allows them (and pysb_core itself,
#: which those modules import to decorate their functions).
_program_modules: set[str] = {"pysb_core"}


def _note_module(fn: Any) -> None:
    module = getattr(fn, "__module__", None) or ""
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = getattr(spec, "name", None) or ""
    top = module.partition(".")[0]
    if top and top != "__main__":
        _program_modules.add(top)


def _running_client(name: str) -> Any:
    client = _client
    if client is None:
        raise SandboxError(
            f"{name}() is sandboxed but no sandbox is running: call it inside "
            "`with pysb_core.sandboxes():` (or `async with`), or run your coroutine with "
            "pysb_core.run(main())"
        )
    return client


# --------------------------------------------------------------------------- references


def reference(fn: Callable[..., Any], accept: Iterable[Any] = ()) -> str:
    """``module:qualname`` by which the worker finds ``fn``; a clear error when it cannot."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname:
        raise SandboxError(f"{fn!r} has no module and name; the sandbox can only call functions")
    if "<lambda>" in qualname:
        raise SandboxError(
            f"a lambda ({module}.{qualname}) cannot be sandboxed: the sandboxed worker finds "
            "functions by module and name. Define it with `def` at the top level of a module"
        )
    if "<locals>" in qualname:
        raise SandboxError(
            f"{qualname}() is defined inside another function, so the sandboxed worker cannot "
            "find it by name. Move it to the top level of a module"
        )
    if module == "__main__":
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        name = getattr(spec, "name", None)
        if not name or name == "__main__":
            where = getattr(main, "__file__", None) or "the __main__ script"
            raise SandboxError(
                f"{qualname}() is defined in {where}, which runs as __main__: the sandboxed "
                "worker cannot import a script. Move the function into a module (for example "
                "tools.py next to the script) and import it from there, or run the program "
                "with `python -m package.module`"
            )
        lookup: Any = main
        module = name
    else:
        lookup = sys.modules.get(module)
    obj = lookup
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn and all(obj is not a for a in accept):
        raise SandboxError(
            f"{module}.{qualname} does not name this function (it was replaced or created at "
            "run time), so the sandboxed worker would run something else. Define sandboxed "
            "functions once, at the top level of a module"
        )
    return f"{module}:{qualname}"


# ------------------------------------------------------------------------------ @sandbox


def sandbox(
    fn: F | None = None, /, *, timeout: float | None = None, retry_on_crash: bool = False
) -> Any:
    """Run the decorated function in the sandboxed worker (``@sandbox`` or ``@sandbox(...)``).

    ``timeout`` bounds one call (the worker is killed and restarted on expiry);
    ``retry_on_crash`` lets a call that was running when the worker died run again.
    """
    if fn is None:
        return functools.partial(sandbox, timeout=timeout, retry_on_crash=retry_on_crash)
    if not callable(fn):
        raise TypeError(f"@sandbox decorates functions, not {type(fn).__name__}")
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout must be a positive number of seconds")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"{fn.__qualname__} is a generator: a sandboxed function must return its value "
            "(return a list instead of yielding)"
        )
    name = getattr(fn, "__qualname__", repr(fn))
    ref: list[str] = []
    _note_module(fn)

    def resolve(wrapper: Any) -> str:
        if not ref:
            ref.append(reference(fn, (wrapper,)))
        return ref[0]

    if inspect.iscoroutinefunction(fn):
        global _async_functions
        _async_functions = True

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if is_in_sandbox():
                return await fn(*args, **kwargs)
            client = _running_client(name)
            try:
                return await client.call_async(
                    name,
                    resolve(async_wrapper),
                    args,
                    kwargs,
                    timeout=timeout,
                    retry=retry_on_crash,
                )
            except BaseException as exc:
                _drop_client_entries(exc)
                raise  # a bare raise adds no entry of its own

        async_wrapper.__pysb_wrapped__ = fn  # type: ignore[attr-defined]
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # the host's hot path: no Python-level call here but the client's (issue 30)
        if is_in_sandbox():
            return fn(*args, **kwargs)
        client = _client if _client is not None else _running_client(name)
        try:
            return client.call(
                name,
                ref[0] if ref else resolve(wrapper),
                args,
                kwargs,
                timeout=timeout,
                retry=retry_on_crash,
            )
        except BaseException as exc:
            _drop_client_entries(exc)
            raise  # a bare raise adds no entry of its own

    def encoded(*args: Any, **kwargs: Any) -> bytes:
        client = _running_client(name)
        return client.call(  # type: ignore[no-any-return]
            name,
            resolve(wrapper),
            args,
            kwargs,
            timeout=timeout,
            retry=retry_on_crash,
            encoded=True,
        )

    wrapper.__pysb_wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__pysb_encoded__ = encoded  # type: ignore[attr-defined]
    return wrapper


def call_encoded(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> bytes:
    """Call the ``@sandbox`` function ``fn`` in the running sandbox and return its answer
    *undecoded*: the bytes the sandbox sent, in pysb's envelope.

    For a host process that only relays the answer to another process (pysb-ray's Ray
    workers): it decodes nothing the sandbox sent, so no general-purpose pickler ever
    encodes that data again; the receiver decodes the bytes with
    :func:`pysb_core.decode_answer`, which returns the value or raises the call's
    exception under partial mode's restricted decoder. The call's output, timeout,
    ``retry_on_crash`` and crash rules are those of a normal call; what fails on the host
    side (a crash, a timeout, a stopped sandbox) is raised here, not encoded.
    """
    encoded = getattr(fn, "__pysb_encoded__", None)
    if encoded is None:
        raise TypeError(
            f"{fn!r} is not a synchronous @sandbox function: call_encoded() calls the "
            "function that @pysb_core.sandbox returned (async functions are not supported)"
        )
    if is_in_sandbox():
        raise SandboxError(
            "call_encoded() runs on the host side of a sandbox; inside the sandbox call the "
            "function directly"
        )
    return encoded(*args, **kwargs)  # type: ignore[no-any-return]


def _drop_client_entries(exc: BaseException) -> None:
    """Leave the client's own entries (the call, the decoding of the sandbox's answer) out
    of the traceback of an exception a call raised: the caller reads its own line, the
    decorated function's wrapper (as for any decorator), then the sandbox's frames."""
    from pysb_core.remote import client

    tb = exc.__traceback__  # the wrapper's own entry
    if tb is None:
        return
    own = client.__file__
    nxt = tb.tb_next
    while nxt is not None and nxt.tb_frame.f_code.co_filename == own:
        nxt = nxt.tb_next
    tb.tb_next = nxt


# ------------------------------------------------------------------------------ SIGTERM


class _Terminated(SystemExit):
    """SIGTERM arrived while a sandbox ran: unwind to ``sandboxes()``'s exit, stop the
    worker (clean-ups, learned rules), then die by SIGTERM as the default action would."""


_sigterm_armed = False


def _on_sigterm(signum: int, frame: Any) -> None:
    if _client is None:  # no sandbox to stop: behave as the default action
        _die_by(signum)
    raise _Terminated(128 + signum)


def _die_by(signum: int) -> None:
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # this very process


def _arm_sigterm() -> None:
    """Only on the main thread, and only where the application left the default action."""
    global _sigterm_armed
    if _sigterm_armed or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _sigterm_armed = True
    except (ValueError, OSError):
        pass


def _disarm_sigterm() -> None:
    global _sigterm_armed
    if not _sigterm_armed or threading.current_thread() is not threading.main_thread():
        return  # elsewhere: the handler stays, and acts as the default when no sandbox runs
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _sigterm_armed = False


# ---------------------------------------------------------------------------- sandboxes()


def _package_profile(depth: int) -> str | None:
    """The ``.pysb.yaml`` next to the calling module (its package), if there is one."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return None
    module = sys.modules.get(frame.f_globals.get("__name__", ""))
    path = getattr(module, "__file__", None) or frame.f_globals.get("__file__")
    if not path:
        return None
    candidate = os.path.join(os.path.dirname(os.path.abspath(path)), ".pysb.yaml")
    return candidate if os.path.isfile(candidate) else None


class Sandboxes:
    """The context manager ``sandboxes()`` returns (``with`` and ``async with``)."""

    def __init__(
        self,
        profile: str | os.PathLike[str] | None = None,
        provider: str | None = None,
        *,
        init_fn: Callable[[], Any] | str | None = None,
        learn: bool | str | None = None,
        result_classes: Iterable[Any] = (),
        python_guards: bool | None = None,
        cli: Any = None,
        events: str | None = None,
        environ: dict[str, str] | None = None,
        cwd: str | None = None,
        threads: int | None = None,
        workers: int | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        _depth: int = 1,
    ) -> None:
        #: A profile found next to the caller, not named: used only when trusted (pysb trust).
        self.discovered = False
        # The caller's package profile, unless PYSB_PROFILE (of the environment the
        # sandbox is built from) names one: the pipeline refuses a missing one either way.
        if profile is None and not (environ if environ is not None else os.environ).get(
            "PYSB_PROFILE"
        ):
            profile = _package_profile(_depth)
            self.discovered = profile is not None
        self.profile = os.fspath(profile) if profile is not None else None
        self.provider = provider
        self.init_fn = init_fn
        self.learn = learn
        self.result_classes = list(result_classes)
        self.python_guards = python_guards
        self.cli = cli
        self.events = events
        self.environ = environ
        self.cwd = cwd
        if workers is not None and (type(workers) is not int or workers < 1):
            raise ValueError(f"workers must be a positive number of processes, not {workers!r}")
        self.threads = threads
        self.workers = workers or 1
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._entered = 0

    # -- life cycle ----------------------------------------------------------------------

    def _start(self, use_asyncio: bool) -> None:
        global _client, _refs
        from pysb_core.remote.client import Client
        from pysb_core.remote.launcher import SessionLauncher
        from pysb_core.remote.unpickler import allowlist

        if is_in_sandbox():  # already sandboxed: calls run directly
            return
        with _lock:
            if _client is not None:
                _refs += 1
                self._entered += 1
                return
            init_ref = self.init_fn
            if init_ref is not None and not isinstance(init_ref, str):
                target = getattr(init_ref, "__pysb_wrapped__", init_ref)
                init_ref = reference(target, (init_ref,))
            if isinstance(init_ref, str):
                _program_modules.add(init_ref.partition(":")[0].partition(".")[0])
            allowed = allowlist(self.result_classes)
            launcher = SessionLauncher(
                profile=self.profile,
                discovered=self.discovered,
                provider=self.provider,
                cli=self.cli,
                python_guards=self.python_guards,
                learn=self.learn,
                events=self.events,
                cwd=self.cwd,
                environ=self.environ,
            )
            options: dict[str, Any] = {
                "init_fn": init_ref,
                "result_classes": allowed,
                "threads": self.threads,
                "use_asyncio": use_asyncio or _async_functions,
                "program_modules": sorted(_program_modules),
                "start_timeout": self.start_timeout,
                "stop_timeout": self.stop_timeout,
            }
            if self.workers > 1:
                from pysb_core.remote.pool import Pool

                client: Any = Pool(launcher, self.workers, **options)
            else:
                client = Client(launcher, **options)
            try:
                client.start()
            except BaseException:
                launcher.finish(None)
                raise
            _client, _refs = client, 1
            self._entered += 1

    def _stop(self) -> bool:
        """Leave; True when this exit stopped the worker."""
        global _client, _refs
        with _lock:
            if self._entered == 0:
                return False
            self._entered -= 1
            _refs -= 1
            if _refs > 0 or _client is None:
                return False
            client, _client = _client, None
            try:
                client.stop()
            finally:
                _disarm_sigterm()
            return True

    def __enter__(self) -> Sandboxes:
        self._start(False)
        if self._entered:
            _arm_sigterm()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        stopped = self._stop()
        if stopped and isinstance(exc, _Terminated):
            _die_by(signal.SIGTERM)

    async def __aenter__(self) -> Sandboxes:
        import asyncio

        await asyncio.to_thread(self._start, True)
        if self._entered:
            _arm_sigterm()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        import asyncio

        stopped = await asyncio.to_thread(self._stop)
        if stopped:
            _disarm_sigterm()
            if isinstance(exc, _Terminated):
                _die_by(signal.SIGTERM)

    @property
    def pid(self) -> int | None:
        """PID of the running worker, the first one with ``workers=N`` (None when none
        runs)."""
        client = _client
        return client.pid if client is not None else None

    @property
    def pids(self) -> list[int | None]:
        """PIDs of the running workers, one per worker (empty when none runs)."""
        client = _client
        if client is None:
            return []
        return list(getattr(client, "pids", [client.pid]))

    @property
    def provider_name(self) -> str | None:
        client = _client
        return getattr(client._launcher, "provider", None) if client is not None else None


def sandboxes(
    profile: str | os.PathLike[str] | None = None,
    provider: str | None = None,
    **kwargs: Any,
) -> Sandboxes:
    """Start the sandbox for ``@sandbox`` functions for the duration of a ``with`` block.

    Keyword arguments: ``init_fn`` (runs in the worker after the guards, before any call,
    and again after each restart), ``learn`` (a learning run; the profile is written when
    the sandbox stops), ``result_classes`` (classes the caller accepts in results besides
    plain data), ``python_guards``, ``events``, ``environ``, ``cwd``, ``threads`` (worker
    threads serving concurrent calls, default 16), ``workers`` (sandboxed worker
    processes that calls are spread across, default 1; ``init_fn`` runs in each),
    ``start_timeout``, ``stop_timeout``.
    """
    kwargs.setdefault("_depth", 2)
    return Sandboxes(profile, provider, **kwargs)


def run(main: Any, /, **kwargs: Any) -> Any:
    """Like ``asyncio.run(main)``, with ``sandboxes(**kwargs)`` started around it."""
    import asyncio

    if not inspect.iscoroutine(main):
        raise ValueError(f"a coroutine was expected, got {main!r}")
    kwargs.setdefault("_depth", 2)
    box = Sandboxes(**kwargs)

    async def runner() -> Any:
        async with box:
            return await main

    return asyncio.run(runner())
