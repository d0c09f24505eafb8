"""Warm sandboxes in a Ray worker process: started by the first task, reused by the next.

Partial mode runs one sandbox per process (``pysb_core.sandboxes()``), so a Ray worker
keeps one: the sandbox of the (profile content, provider) of its latest task. A task with
the same key reuses it (a call costs tens of microseconds, not a sandbox start); a task
with another key stops it and starts its own. Crashes of the sandboxed worker are handled
by partial mode itself: it restarts the worker, never runs a started call twice, and fails
closed after the fifth death in 180 s -- a sandbox that failed closed is replaced by the
next task. The sandbox stops when the Ray worker exits (``atexit``); a Ray worker that is
killed leaves nothing either: the sandboxed worker sees its socket close and exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from typing import Any

from pysb_core import ProviderUnavailableError, SandboxProtocolError, call_encoded, sandboxes
from pysb_ray.spec import ProfileSpec


class WarmSandbox:
    """One running ``sandboxes()`` and the private directory holding its profile."""

    def __init__(self, spec: ProfileSpec, modules: frozenset[str]) -> None:
        self.key = spec.key
        self.modules = modules
        self.failed_closed = False
        self.directory = tempfile.mkdtemp(prefix="pysb-ray-")
        path = os.path.join(self.directory, spec.name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(spec.node_text())
        cwd = spec.cwd if os.path.isdir(spec.cwd) else None
        # learn=False: a node never runs a learning run (the driver refuses such profiles)
        self.box = sandboxes(profile=path, provider=spec.provider, cwd=cwd, learn=False)
        try:
            self.box.__enter__()
        except ProviderUnavailableError as exc:
            self._remove()
            raise ProviderUnavailableError(
                f"Ray node {_node_name()}: {exc.reason}", fix=exc.fix
            ) from None
        except BaseException:
            self._remove()
            raise

    def stop(self) -> None:
        try:
            self.box.__exit__(None, None, None)
        finally:
            self._remove()

    def _remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _node_name() -> str:
    """The node's address and Ray id, as an operator finds it in ``ray status``."""
    try:
        import ray

        context = ray.get_runtime_context()
        return f"{ray.util.get_node_ip_address()} (node id {context.get_node_id()})"
    except Exception:  # not in a Ray worker (direct use, tests)
        import socket

        return socket.gethostname()


_lock = threading.Lock()
_current: WarmSandbox | None = None
_registered = False
#: Top-level names of the modules whose functions this process has run sandboxed.
_modules: set[str] = set()


def _top_module(fn: Any) -> str:
    target = getattr(fn, "__pysb_wrapped__", fn)
    return str(getattr(target, "__module__", "") or "").partition(".")[0]


def ensure(spec: ProfileSpec, fn: Any) -> WarmSandbox:
    """The warm sandbox for ``spec`` that can run ``fn``, started (or replaced) if needed.

    The sandboxed worker allows the imports of the modules that define sandboxed functions
    when it starts (partial mode's rule): a function of a module the running sandbox was
    not started with restarts it once, with that module too.
    """
    global _current, _registered
    with _lock:
        current = _current
        top = _top_module(fn)
        _modules.add(top)
        if (
            current is not None
            and current.key == spec.key
            and not current.failed_closed
            and top in current.modules
        ):
            return current
        if current is not None:
            _current = None
            current.stop()
        _current = WarmSandbox(spec, frozenset(_modules))
        if not _registered:
            atexit.register(stop)
            _registered = True
        return _current


def stop() -> None:
    """Stop this process's warm sandbox, if one runs (worker exit, pool shutdown)."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.stop()


def run(spec: ProfileSpec, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """Call the ``@sandbox`` function ``fn`` in the warm sandbox of ``spec``; its answer
    comes back undecoded (``pysb_core.call_encoded``): this process only relays it, and
    the process that receives it decodes it (``pysb_ray.answer``)."""
    box = ensure(spec, fn)
    try:
        return call_encoded(fn, *args, **kwargs)
    except SandboxProtocolError as exc:
        if "failed closed" in str(exc):  # five deaths in 180 s: the next task starts afresh
            box.failed_closed = True
        raise
