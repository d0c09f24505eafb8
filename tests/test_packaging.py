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
        "--no-python-guards",
        "-c",
        "print([l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].split()[1])",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"  # the provider's own mechanism really ran
    r = _run(core_only_env, "plugins", "--json", cwd=tmp_path)
    assert any(p["name"] == "nnp" and p["kind"] == "provider" for p in json.loads(r.stdout))


@pytest.fixture(scope="module")
def core_and_bwrap_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pysb-core and pysb-bwrap, nothing else: no Python layer."""
    if not WHEELHOUSE.is_dir():
        pytest.skip("no wheelhouse: run `make dev` (it builds one for offline installs)")
    env_dir = tmp_path_factory.mktemp("core-bwrap") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    _pip(env_dir, str(ROOT), str(ROOT / "plugins" / "pysb-bwrap"))
    return env_dir


def test_without_the_python_layer_an_imports_rule_is_refused(
    core_and_bwrap_env: Path, tmp_path: Path
) -> None:
    from pysb_core.testing import require_provider

    require_provider("bwrap")
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pysb.yaml").write_text("version: 1\nimports: [json]\nfiles:\n  expose-rw: [.]\n")
    program = "import os; open('RAN', 'w'); print(len(os.listdir('/')))"
    r = _run(core_and_bwrap_env, "run", "--provider", "bwrap", "-c", program, cwd=project)
    assert r.returncode == 125, r.stderr
    assert not (project / "RAN").exists()
    assert ".pysb.yaml:2: 'imports: json' is not enforced" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = _run(core_and_bwrap_env, "check", "--provider", "bwrap", cwd=project)
    assert r.returncode == 125, r.stdout + r.stderr
    assert "imports: json" in r.stdout and "[NONE]" in r.stdout
    r = _run(core_and_bwrap_env, "check", "--provider", "bwrap", "--no-python-guards", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run(
        core_and_bwrap_env,
        "run",
        "--provider",
        "bwrap",
        "--no-python-guards",
        "-c",
        program,
        cwd=project,
    )
    assert r.returncode == 0, r.stderr
    assert (project / "RAN").exists()  # the exposure is the kernel's: bwrap mounted it rw
