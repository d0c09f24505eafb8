"""``functools.cache`` for the start path, without ``functools``.

``functools`` imports ``collections`` (with ``operator``, ``keyword``, ``reprlib``): about
1 ms of every ``pysb run`` for the two caches the run path keeps (the installed entry
points, the interpreter's paths). :func:`cache` keeps what ``functools.cache`` gives them:
one call per distinct arguments in a process, the wrapped function's name and docstring,
``__wrapped__`` and ``cache_clear()`` (tests start over with it).
"""

from __future__ import annotations

TYPE_CHECKING = False  # on the start path: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class cache:
    """Memoize a function of hashable arguments (positional and keyword, as given)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "cache")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self._results: dict[Any, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(kwargs.items())) if kwargs else args
        try:
            return self._results[key]
        except KeyError:
            pass
        result = self._results[key] = self.__wrapped__(*args, **kwargs)
        return result

    def cache_clear(self) -> None:
        self._results.clear()
