"""End to end through ``pysb run`` (subprocess provider): profile -> policy -> bootstrap ->
guards -> program, and a learning run that writes the guards' rules."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not {"imports", "files", "api", "env"} <= {ep.name for ep in entry_points(group="pysb.guards")},
    reason="pysb-guards is not installed (make dev)",
)


def pysb(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "pysb_core", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


APP = """\
import os, json
print(open("data/x.txt").read().strip())
with open("out/result.json", "w") as f:
    json.dump({"var": os.environ.get("PYSB_E2E")}, f)
for attempt in (lambda: open("secret/key"), lambda: os.system("true"),
                lambda: __import__("socket"), lambda: open("data/x.txt", "a")):
    try:
        attempt()
        print("allowed")
    except Exception as e:
        print(type(e).__name__)
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    for d in ("data", "out", "secret"):
        (tmp_path / d).mkdir()
    (tmp_path / "data" / "x.txt").write_text("hello")
    (tmp_path / "secret" / "key").write_text("k")
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


def test_profile_is_enforced_by_the_python_layer(app: Path) -> None:
    (app / ".pysb.yaml").write_text(
        "version: 1\nfiles:\n  expose-ro: [./data]\n  expose-rw: [./out]\n"
        "imports: [os, json]\nenv:\n  PYSB_E2E: ${PYSB_E2E}\n"
    )
    # The Python layer alone (subprocess, named): under a provider with a mount namespace
    # the secret below pytest's /tmp is inside the sandbox's own private /tmp, where it
    # does not exist at all (FileNotFoundError from the kernel, not the guard's refusal).
    res = pysb(
        "run",
        "--profile",
        ".pysb.yaml",
        "--provider",
        "subprocess",
        "app.py",
        cwd=app,
        env={"PYSB_E2E": "v", "OTHER": "x"},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [
        "hello",
        "FileDeniedError",
        "ApiDeniedError",
        "ImportDeniedError",
        "WriteDeniedError",
    ]
    assert (app / "out" / "result.json").read_text() == '{"var": "v"}'


def test_env_is_the_whitelist(app: Path) -> None:
    (app / ".pysb.yaml").write_text("version: 1\nimports: [os]\nenv:\n  A: ${SECRET}\n")
    res = pysb(
        "run",
        "--profile",
        ".pysb.yaml",
        "-c",
        "import os; print(os.environ.get('A'), 'SECRET' in os.environ)",
        cwd=app,
        env={"SECRET": "s"},
    )
    assert res.stdout.split() == ["s", "False"], res.stderr


def test_learning_run_writes_the_guards_rules_then_enforces_them(app: Path) -> None:
    res = pysb("run", "--learn", "app.py", cwd=app, env={"PYSB_E2E": "v"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[1:] == ["allowed"] * 4  # a learning run refuses nothing
    profile = (app / ".pysb.yaml").read_text()
    for line in ("./data", "./out", "./secret", "- json", "os.system", "PYSB_E2E", "socket"):
        assert line in profile, profile
    (app / "data" / "x.txt").write_text("hello")
    res = pysb("run", "app.py", cwd=app, env={"PYSB_E2E": "w"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["hello"] + ["allowed"] * 4


def test_api_typo_is_a_profile_error(app: Path) -> None:
    (app / ".pysb.yaml").write_text("version: 1\napi:\n  allow: [os.sytem]\n")
    res = pysb("run", "-c", "pass", cwd=app)
    assert res.returncode == 125
    assert ".pysb.yaml:3: api: unknown target 'os.sytem' (did you mean 'os.system'?)" in res.stderr
