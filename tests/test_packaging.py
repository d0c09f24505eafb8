"""Packaging: pysb-core works alone, and a third-party provider plugs in by entry point.

A fresh virtual environment is built from wheels (offline, from the wheelhouse that
``make dev`` fills), so these tests see what a user's ``pip install`` gives: no editable
paths, no plugin that happens to sit in the repository.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"


def _pip(env_dir: Path, *args: str) -> None:
    cmd = [
        str(env_dir / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--find-links",
        str(WHEELHOUSE),
        *args,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def core_only_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not WHEELHOUSE.is_dir():
        pytest.skip("no wheelhouse: run `make dev` (it builds one for offline installs)")
    env_dir = tmp_path_factory.mktemp("core-only") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    _pip(env_dir, str(ROOT))
    return env_dir


def _run(env_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(env_dir / "bin" / "pysb"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        timeout=60,
        check=False,
    )


def test_core_alone_runs_with_a_warning(core_only_env: Path, tmp_path: Path) -> None:
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    r = _run(core_only_env, "run", "-c", "print(1)", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1\n"
    assert "pysb-guards" in r.stderr and "not installed" in r.stderr
    r = _run(core_only_env, "providers", "--json", cwd=tmp_path)
    names = [p["name"] for p in json.loads(r.stdout)]
    assert names == ["subprocess"]


def test_third_party_provider_installs_and_runs(core_only_env: Path, tmp_path: Path) -> None:
    _pip(core_only_env, str(ROOT / "docs" / "examples" / "pysb-nnp"))
    r = _run(core_only_env, "providers", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    nnp = next(p for p in json.loads(r.stdout) if p["name"] == "nnp")
    assert nnp["distribution"] == "pysb-nnp" and nnp["available"] is True
    assert sorted(nnp["enforces"]) == ["env", "limits"]
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    r = _run(
        core_only_env,
        "run",
        "--provider",
        "nnp",
        "-c",
        "print([l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].split()[1])",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"  # the provider's own mechanism really ran
    r = _run(core_only_env, "plugins", "--json", cwd=tmp_path)
    assert any(p["name"] == "nnp" and p["kind"] == "provider" for p in json.loads(r.stdout))
