"""The function Ray runs for every ``.remote()`` call of a ``@sandboxed`` function."""

from __future__ import annotations

import threading
from typing import Any

import ray

from pysb_ray import warm
from pysb_ray.answer import EncodedAnswer, function_name
from pysb_ray.spec import ProfileSpec

_lock = threading.Lock()
_functions: dict[tuple[tuple[str, Any], ...], Any] = {}


def execute(
    spec: ProfileSpec, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> EncodedAnswer:
    """Body of the Ray task: the call, in this worker's warm sandbox for ``spec``; the
    answer travels encoded and is decoded where it is received (``pysb_ray.answer``)."""
    return EncodedAnswer(warm.run(spec, fn, args, kwargs), function_name(fn))


def remote_function(options: dict[str, Any]) -> Any:
    """``ray.remote(**options)(execute)``, one per set of options (Ray exports each once)."""
    key = tuple(sorted((k, repr(v)) for k, v in options.items()))
    with _lock:
        found = _functions.get(key)
        if found is None:
            found = ray.remote(**options)(execute) if options else ray.remote(execute)
            _functions[key] = found
        return found
