"""pysb provider ``landlock``: the sandboxed interpreter restricts itself with Landlock.

No wrapper process, no namespace, no root: the launch is the plain interpreter command,
and a child set-up makes the bootstrap call :func:`pysb_landlock.child.restrict` before
user code. See ``provider.py`` (parent side), ``compiler.py`` (plan -> ruleset data),
``child.py`` and ``ruleset.py`` (inside the sandbox, through the kit's C calls).

:class:`LandlockProvider` is exported lazily: the sandboxed interpreter imports
``pysb_landlock.child`` only, and must not pay for the provider machinery (``subprocess``,
``dataclasses``...).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not ``typing``: the sandboxed interpreter imports this package
if TYPE_CHECKING:
    from typing import Any

    from pysb_landlock.provider import LandlockProvider

__all__ = ["LandlockProvider"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "LandlockProvider":
        from pysb_landlock.provider import LandlockProvider

        return LandlockProvider
    raise AttributeError(f"module 'pysb_landlock' has no attribute {name!r}")
