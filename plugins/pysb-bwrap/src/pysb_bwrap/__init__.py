"""pysb provider ``bwrap``: the interpreter runs under bubblewrap's namespaces.

The sandbox is a fresh mount namespace whose root holds only what the plan exposes (plus
read-only system trees and a handful of /etc files), and fresh user, pid, ipc, uts, cgroup
and network namespaces. Capabilities are dropped and the sandbox dies with pysb. See
docs/providers.md#bwrap for the exact view and the residual weaknesses.

The class is exported lazily: :mod:`pysb_bwrap.child` runs inside the sandboxed
interpreter, and importing it must not pull in the provider (subprocess, pysb_core.net.netns).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not ``typing``: the sandboxed interpreter imports this package
if TYPE_CHECKING:
    from typing import Any

    from pysb_bwrap.provider import BwrapProvider

__all__ = ["BwrapProvider"]


def __getattr__(name: str) -> Any:
    if name == "BwrapProvider":
        from pysb_bwrap.provider import BwrapProvider

        return BwrapProvider
    raise AttributeError(f"module 'pysb_bwrap' has no attribute {name!r}")
