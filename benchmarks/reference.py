"""The reference implementation, pysandboxes 0.7.0, in its own venv (``benchmarks/.venv-ref``).

It is installed from PyPI with pip the first time, then reused. Which of its providers
work here is found by running ``python-sb -c pass`` under each one: its own availability
probe says bwrap is available even where Debian's bubblewrap 0.8 lacks ``--argv0``.
Its qemu provider is never started: at first use it downloads a cloud image from the
internet, and the benchmark sends nothing beyond the loopback interface.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from common import HERE, PROVIDER_ORDER, Context, clean_env, reason_from

VERSION = "0.7.0"
REQUIREMENT = f"pysandboxes=={VERSION}"
VENV = HERE / ".venv-ref"
SKIPPED = {
    "qemu": "not run: python-sb's qemu provider downloads an Ubuntu cloud image from the "
    "internet at first use; the benchmark sends nothing off this machine",
}


def _installed(python: Path) -> bool:
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('pysandboxes'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return probe.returncode == 0 and probe.stdout.strip() == VERSION


def ensure(ctx: Context) -> dict[str, Any]:
    """Install (or reuse) the reference venv; return its status for the report."""
    python = VENV / "bin" / "python"
    python_sb = VENV / "bin" / "python-sb"
    try:
        if not (python.exists() and python_sb.exists() and _installed(python)):
            ctx.log(f"installing {REQUIREMENT} into {VENV} ...")
            base = Path(sys.base_prefix) / "bin" / "python3"
            subprocess.run(
                [str(base), "-m", "venv", "--clear", str(VENV)],
                check=True,
                capture_output=True,
                text=True,
                timeout=120,
            )
            pip = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", REQUIREMENT],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if pip.returncode != 0 or not _installed(python):
                return {
                    "installed": False,
                    "error": "pip: " + reason_from(pip.stderr, pip.returncode),
                }
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", "") or ""
        return {"installed": False, "error": f"{exc} {stderr}".strip()[:400]}
    ctx.ref_python = str(python)
    ctx.ref_python_sb = str(python_sb)
    return {"installed": True, "version": VERSION, "venv": str(VENV.relative_to(HERE.parent))}


def probe_providers(ctx: Context, profile: Path) -> dict[str, dict[str, Any]]:
    """Which reference providers run ``-c pass`` here (a failure's reason is kept)."""
    table: dict[str, dict[str, Any]] = {}
    assert ctx.ref_python_sb is not None
    for name in PROVIDER_ORDER:
        if name in SKIPPED:
            table[name] = {"available": False, "reason": SKIPPED[name]}
            continue
        if ctx.only_providers is not None and name not in ctx.only_providers:
            continue
        argv = [ctx.ref_python_sb, f"--pysandboxes-config={profile}", f"--os-sandbox={name}"]
        try:
            proc = subprocess.run(
                [*argv, "-c", "pass"],
                cwd=ctx.workdir,
                env=clean_env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            table[name] = {"available": False, "reason": "python-sb -c pass timed out (60 s)"}
            continue
        if proc.returncode == 0:
            table[name] = {"available": True, "reason": None}
        else:
            table[name] = {
                "available": False,
                "reason": reason_from(proc.stderr, proc.returncode, name),
            }
    return table
