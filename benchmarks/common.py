"""What every benchmark section shares: paths, the run context, commands, profiles.

The sections (``startup``, ``partial``, ``guards``, ``memory``) each take a ``Context`` and
return plain JSON-able dicts. A measurement that cannot be made is recorded as
``{"error": reason}`` -- never raised -- so one broken provider never stops the run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Files copied into each run's working directory: the sandboxed code must be readable there.
SUPPORT_FILES = (
    "_funcs.py",
    "_ref_funcs.py",
    "_procs.py",
    "_partial_worker.py",
    "_floor.py",
    "_spawn_floor.py",
    "_guard_loops.py",
    "_ray_worker.py",
)
#: Every provider either implementation knows, in the order the tables show them.
PROVIDER_ORDER = ("subprocess", "landlock", "bwrap", "unshare", "firejail", "qemu")
#: The name of a variant measured without the Python guards (the report keys on "/").
NO_GUARDS = "{}/no-python-guards"
#: The name of a variant measured with a network allow rule (kernel packet filtering).
NET_FILTER = "{}/network-filtering"


def ordered(names: list[str] | set[str]) -> list[str]:
    """Providers in table order (known ones first, then any plugin's, alphabetically)."""
    known = [p for p in PROVIDER_ORDER if p in names]
    return known + sorted(set(names) - set(PROVIDER_ORDER))


@dataclass
class Context:
    """One benchmark run: where things are, how hard to try, what is available."""

    quick: bool
    python: str  # the dev venv's interpreter (the baseline and pysb's host)
    pysb: str  # the dev venv's `pysb` script
    workdir: Path  # the run's temporary working directory (sandboxed code + profiles)
    pysb_providers: dict[str, dict[str, Any]] = field(default_factory=dict)
    ref_python: str | None = None  # the reference venv's interpreter, when installed
    ref_python_sb: str | None = None
    ref_providers: dict[str, dict[str, Any]] = field(default_factory=dict)
    only_providers: list[str] | None = None
    errors: list[str] = field(default_factory=list)
    log_file: Path | None = None

    def usable(self, table: dict[str, dict[str, Any]]) -> list[str]:
        names = [n for n, info in table.items() if info.get("available")]
        if self.only_providers is not None:
            names = [n for n in names if n in self.only_providers]
        return ordered(names)

    def log(self, text: str) -> None:
        """Progress on stderr (the run takes minutes; say what it is doing)."""
        print(f"bench: {text}", file=sys.stderr, flush=True)


def make_workdir() -> Path:
    """A fresh temporary directory holding the sandboxed code and a data file."""
    workdir = Path(tempfile.mkdtemp(prefix="pysb-bench-")).resolve()
    for name in SUPPORT_FILES:
        shutil.copy2(HERE / name, workdir / name)
    (workdir / "data.txt").write_text("benchmark data\n")
    return workdir


def free_port() -> int:
    """A free TCP port on the loopback interface (the only address the benchmark uses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reason_from(stderr: str, rc: int | None, provider: str = "") -> str:
    """One line saying why a command failed, from its stderr.

    pysb's first ``pysb: error:`` line states the refusal (later lines add details and
    the fix). Otherwise the last line (a traceback's names the exception), preceded by a
    line starting with the launcher's own name (``bwrap: Unknown option --argv0``), which
    usually names the cause.
    """
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    pysb_error = next((ln for ln in lines if ln.startswith("pysb: error:")), None)
    last = lines[-1] if lines else f"exit status {rc}, nothing on stderr"
    cause = next(
        (ln for ln in lines if provider and ln.startswith(f"{provider}:") and ln != last), None
    )
    text = f"{cause} ... {last}" if cause else last
    text = pysb_error or text
    if rc is not None and rc != 0:
        text = f"{text} (rc {rc})"
    return text[:400]


def run_json(
    argv: list[str],
    cwd: Path,
    timeout: float,
    env: dict[str, str] | None = None,
    provider: str = "",
) -> dict[str, Any]:
    """Run a worker command whose last stdout line is a JSON object; errors become data."""
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    except OSError as exc:
        return {"error": f"cannot start {argv[0]}: {exc}"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": reason_from(proc.stderr, proc.returncode, provider)}
    try:
        data = json.loads(lines[-1])
    except ValueError:
        return {"error": f"unreadable output: {lines[-1][:200]}"}
    return data if isinstance(data, dict) else {"error": "output is not a JSON object"}


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The host environment for benchmark commands, without the dev venv's activation."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSB_PROFILE", "PYSB_PROVIDER")}
    env.update(extra or {})
    return env


def median(values: list[float]) -> float:
    ordered_values = sorted(values)
    n = len(ordered_values)
    mid = n // 2
    return ordered_values[mid] if n % 2 else (ordered_values[mid - 1] + ordered_values[mid]) / 2
