"""pysb provider ``firejail``: the interpreter runs inside a firejail sandbox.

The profile is compiled into firejail options (whitelists, read-only / read-write and
blacklists for the file system, ``--net=none``, rlimits, dropped capabilities, seccomp).
See docs/providers.md#firejail for the exact view and the residual weaknesses.

The class is exported lazily: :mod:`pysb_firejail.child` runs inside the sandboxed
interpreter, and importing it must not pull in the provider (subprocess, pysb_core).
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing import at run time: the sandboxed child loads this package
if TYPE_CHECKING:
    from typing import Any

    from pysb_firejail.provider import FirejailProvider

__all__ = ["FirejailProvider"]


def __getattr__(name: str) -> Any:
    if name == "FirejailProvider":
        from pysb_firejail.provider import FirejailProvider

        return FirejailProvider
    raise AttributeError(f"module 'pysb_firejail' has no attribute {name!r}")
