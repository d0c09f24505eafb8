"""pysb-qemu: run the sandboxed interpreter in a QEMU micro-VM (see docs/qemu.md).

The class is exported lazily: :mod:`pysb_qemu.started` runs inside the guest's
interpreter, where every import is paid for under emulation, and importing it must not
pull in the provider.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing import at run time: the guest's interpreter loads this package
if TYPE_CHECKING:
    from typing import Any

    from pysb_qemu.provider import QemuProvider

__all__ = ["QemuProvider"]


def __getattr__(name: str) -> Any:
    if name == "QemuProvider":
        from pysb_qemu.provider import QemuProvider

        return QemuProvider
    raise AttributeError(f"module 'pysb_qemu' has no attribute {name!r}")
