"""Packaging: pysb-core works alone, and a third-party provider plugs in by entry point.

A fresh virtual environment is built from wheels (offline, from the wheelhouse that
``make dev`` fills), so these tests see what a user's ``pip install`` gives: no editable
paths, no plugin that happens to sit in the repository.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pysb_core.testing import offline_pip, offline_venv

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def core_only_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return offline_venv(tmp_path_factory.mktemp("core-only") / "venv", str(ROOT))


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


def test_core_alone_refuses_the_implicit_python_rules_unless_opted_out(
    core_only_env: Path, tmp_path: Path
) -> None:
    """An empty profile denies every import and sensitive call; with no Python layer
    installed nobody enforces that, so the run refuses -- until the user opts out."""
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    r = _run(core_only_env, "run", "-c", "open('RAN', 'w')", cwd=tmp_path)
    assert r.returncode == 125, r.stderr
    assert not (tmp_path / "RAN").exists()
    assert "imports: (none" in r.stderr and "api: (none" in r.stderr
    assert "pip install pysb-guards" in r.stderr and "--no-python-guards" in r.stderr
    assert "Traceback" not in r.stderr
    r = _run(core_only_env, "run", "--no-python-guards", "-c", "print(1)", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1\n"
    assert "pysb-guards" in r.stderr and "not installed" in r.stderr
    r = _run(core_only_env, "providers", "--json", cwd=tmp_path)
    names = [p["name"] for p in json.loads(r.stdout)]
    assert names == ["subprocess"]


def test_third_party_provider_installs_and_runs(core_only_env: Path, tmp_path: Path) -> None:
    offline_pip(core_only_env, str(ROOT / "docs" / "examples" / "pysb-nnp"))
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
        "--no-python-guards",
        "-c",
        "print([l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].split()[1])",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"  # the provider's own mechanism really ran
    r = _run(core_only_env, "plugins", "--json", cwd=tmp_path)
    assert any(p["name"] == "nnp" and p["kind"] == "provider" for p in json.loads(r.stdout))
