"""Installed-looking distributions for tests: a ``*.dist-info`` with METADATA and
``entry_points.txt`` and the modules it names, in a directory put on ``PYTHONPATH``.

This is what ``pip install`` leaves on disk, so both of pysb's entry-point readers
(``pysb_core._startup.entrypoints`` and ``importlib.metadata``/stevedore) see it as installed.
"""

from __future__ import annotations

from pathlib import Path


def fake_dist(
    site: Path,
    name: str,
    version: str = "1.0",
    *,
    entry_points: dict[str, dict[str, str]],
    modules: dict[str, str] | None = None,
) -> Path:
    """Create distribution ``name`` in ``site``; return ``site`` (for PYTHONPATH)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(f"{ep} = {value}" for ep, value in eps.items())
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for rel, text in (modules or {}).items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return site


#: A provider that is the subprocess provider under another name.
FAKE_PROVIDER = (
    "from pysb_core.builtin.subprocess_provider import SubprocessProvider\n"
    "class Fake(SubprocessProvider):\n"
    "    name = 'fake'\n"
    "    description = 'the subprocess provider, renamed (a test)'\n"
)
