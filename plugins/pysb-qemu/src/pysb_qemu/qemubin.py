"""The QEMU binary's version, remembered across runs (``qemu --version`` took a few
milliseconds of every start): part of the probe's answer and of the snapshot's key."""

from __future__ import annotations

import subprocess

from pysb_core.providerkit import ProviderStatus


def qemu_version(qemu: str) -> str | None:
    """``qemu --version``'s number, remembered across runs for the same binary (path,
    size, mtime: :func:`pysb_core.providerkit.cached_probe`): running it took a few
    milliseconds of every start. A binary that names no version is asked again each time."""
    from pysb_core.providerkit import cached_probe

    def probe() -> ProviderStatus:
        version = _qemu_version(qemu)
        if version is None:  # not remembered: a failure is never cached
            return ProviderStatus.missing(f"{qemu} --version named no version")
        return ProviderStatus.ok(version)

    return cached_probe("qemu-version", [qemu], probe).version


def _qemu_version(qemu: str) -> str | None:
    try:
        out = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.splitlines()[0] if out.stdout else ""
    return first.split("version", 1)[-1].strip().split()[0] if "version" in first else None
