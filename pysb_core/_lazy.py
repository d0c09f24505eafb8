"""Names of a module resolved on first use (PEP 562): the one helper behind ``pysb_core``
and its plugin kits.

``pysb_core``, :mod:`pysb_core.providerkit` and :mod:`pysb_core.guardkit` are imported by
the sandboxed interpreter before the program starts; each public name lives in a module of
its own, and importing all of them would cost every run what only some runs use. The
module's ``__getattr__`` and ``__dir__`` made here import a name's module when the name is
first read, and keep the value in the module's namespace so that the next read is a plain
attribute.
"""

from __future__ import annotations

import sys

try:  # what importlib.import_module calls for an absolute name, without importing the
    # importlib package (and warnings with it: ~0.3 ms of every start, in pysb and in the
    # sandbox)
    from _frozen_importlib import _gcd_import as import_module  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - another interpreter
    from importlib import import_module

TYPE_CHECKING = False  # imported in the sandbox: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


def lazy_exports(
    module: str, exports: Mapping[str, str], public: Sequence[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``module`` (its ``__name__``; called while it runs).

    ``exports`` maps a public name to ``"module:attribute"`` (``"module:"`` for a module
    itself); ``public`` is the module's ``__all__``, which ``dir()`` lists.
    """
    namespace = vars(sys.modules[module])

    def __getattr__(name: str) -> object:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, attribute = target.partition(":")
        value: object = import_module(where)
        if attribute:
            value = getattr(value, attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return list(public)

    return __getattr__, __dir__
