"""pysb-qemu: run the sandboxed interpreter in a QEMU micro-VM (see docs/qemu.md)."""

from pysb_qemu.provider import QemuProvider

__all__ = ["QemuProvider"]
