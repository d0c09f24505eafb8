"""``SandboxPool``: a fixed number of Ray actors, each holding one warm sandbox.

For bounded concurrency: at most ``size`` calls run at once, whatever is submitted, and
each actor keeps its sandbox for its whole life (no start after the first). It is built on
``ray.util.ActorPool`` and keeps its methods (``map``, ``map_unordered``, ``submit``,
``get_next``, ``get_next_unordered``, ``has_next``, ``has_free``), with one difference:
where ``ActorPool`` takes ``fn(actor, value)``, a ``SandboxPool`` takes the sandboxed
function itself (``pool.map(tools.score, programs)``, ``pool.submit(tools.add, 1, 2)``).
The pool's profile and provider apply; the function's own ``timeout`` and
``retry_on_crash`` too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import ray
from ray.util import ActorPool

from pysb_ray import warm
from pysb_ray.answer import EncodedAnswer, function_name
from pysb_ray.decorator import check_importable
from pysb_ray.spec import ProfileSpec, load_spec


class SandboxActor:
    """One pool member: a Ray actor whose process runs one warm sandbox."""

    def __init__(self, spec: ProfileSpec) -> None:
        # The sandbox starts with the first call: it must know the function's module
        # (partial mode allows the imports of the modules it was started with).
        self.spec = spec

    def call(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> EncodedAnswer:
        """The call in this actor's sandbox; decoded where it is received (see answer)."""
        return EncodedAnswer(warm.run(self.spec, fn, args, kwargs), function_name(fn))

    def stop(self) -> None:
        warm.stop()


def _sandboxed(fn: Any) -> Any:
    if not callable(fn) or not hasattr(fn, "__pysb_wrapped__"):
        raise TypeError(
            f"{fn!r} is not a sandboxed function: decorate it with @pysb_ray.sandboxed "
            "(or @pysb_core.sandbox) at the top level of a module"
        )
    check_importable(fn)
    return fn


class SandboxPool:
    """``size`` sandboxed Ray actors sharing a profile; see the module docstring."""

    def __init__(
        self,
        size: int,
        *,
        profile: str | os.PathLike[str] | None = None,
        provider: str | None = None,
        num_cpus: float = 1,
        **actor_options: Any,
    ) -> None:
        if size < 1:
            raise ValueError("a SandboxPool needs at least one actor")
        self.spec = load_spec(profile, provider)  # a bad profile fails here, on the driver
        options = {"num_cpus": num_cpus, "max_restarts": 0, "max_task_retries": 0}
        options.update(actor_options)
        actor_class = ray.remote(**options)(SandboxActor)
        self.actors = [actor_class.remote(self.spec) for _ in range(size)]
        self._pool = ActorPool(self.actors)
        self._closed = False

    # -- ActorPool's methods, taking the sandboxed function ---------------------------------

    def map(self, fn: Any, values: Iterable[Any]) -> Iterator[Any]:
        """Results of ``fn(v)`` for each value, in order (as ``ActorPool.map``)."""
        fn = _sandboxed(fn)
        return self._pool.map(lambda actor, v: actor.call.remote(fn, (v,), {}), values)

    def map_unordered(self, fn: Any, values: Iterable[Any]) -> Iterator[Any]:
        """Results of ``fn(v)`` for each value, as they complete."""
        fn = _sandboxed(fn)
        return self._pool.map_unordered(lambda actor, v: actor.call.remote(fn, (v,), {}), values)

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)``; it runs when an actor is free (``get_next``)."""
        fn = _sandboxed(fn)
        self._pool.submit(lambda actor, _: actor.call.remote(fn, args, kwargs), None)

    def get_next(self, timeout: float | None = None, ignore_if_timedout: bool = False) -> Any:
        """The next result in submission order; raises the call's exception."""
        return self._pool.get_next(timeout, ignore_if_timedout)

    def get_next_unordered(
        self, timeout: float | None = None, ignore_if_timedout: bool = False
    ) -> Any:
        return self._pool.get_next_unordered(timeout, ignore_if_timedout)

    def has_next(self) -> bool:
        return self._pool.has_next()

    def has_free(self) -> bool:
        return self._pool.has_free()

    # -- life cycle ------------------------------------------------------------------------

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop every actor's sandbox (clean-ups run), then end the actors."""
        if self._closed:
            return
        self._closed = True
        try:
            ray.get([actor.stop.remote() for actor in self.actors], timeout=timeout)
        except Exception:  # an actor that died or failed to start: nothing to stop there
            pass
        for actor in self.actors:
            ray.kill(actor)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


__all__ = ["SandboxActor", "SandboxPool"]
