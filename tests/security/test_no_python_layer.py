"""Security regression corpus: without the Python layer, its rules are not silently dropped.

A virtual environment with only ``pysb-core`` and ``pysb-bwrap`` (built offline from
wheels, as a user's ``pip install`` would): nothing enforces ``imports`` or ``api`` rules,
so a profile that has one is refused (125) by ``pysb run`` and ``pysb check``, and runs
only when the user opts out of the Python layer knowingly (``--no-python-guards``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pysb_core.testing import require_provider, trust_profile

ROOT = Path(__file__).resolve().parents[2]


# ``core_and_bwrap_env`` (tests/conftest.py): pysb-core and pysb-bwrap, nothing else.

#: This venv's pysb runs with no HOME (no trust store): the profile is named, not found.
NAMED = ("--profile", ".pysb.yaml")


def _pysb(
    env_dir: Path, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(env_dir / "bin" / "pysb"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **(env or {})},
        timeout=60,
        check=False,
    )


def test_without_the_python_layer_an_imports_rule_is_refused(
    core_and_bwrap_env: Path, tmp_path: Path
) -> None:
    require_provider("bwrap")
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pysb.yaml").write_text("version: 1\nimports: [json]\nfiles:\n  expose-rw: [.]\n")
    program = "import os; open('RAN', 'w'); print(len(os.listdir('/')))"
    r = _pysb(core_and_bwrap_env, "run", *NAMED, "--provider", "bwrap", "-c", program, cwd=project)
    assert r.returncode == 125, r.stderr
    assert not (project / "RAN").exists()
    assert ".pysb.yaml:2: 'imports: json' is not enforced" in r.stderr, r.stderr
    # The deny-by-default of api is no rule the user wrote: not listed as unenforced (SPEC §2).
    assert "api: (none" not in r.stderr
    assert "Traceback" not in r.stderr
    r = _pysb(core_and_bwrap_env, "check", "--provider", "bwrap", cwd=project)
    assert r.returncode == 125, r.stdout + r.stderr
    assert "imports: json" in r.stdout and "[NONE]" in r.stdout
    r = _pysb(core_and_bwrap_env, "check", "--provider", "bwrap", "--no-python-guards", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    opted_out = ("run", *NAMED, "--provider", "bwrap", "--no-python-guards", "-c", program)
    r = _pysb(core_and_bwrap_env, *opted_out, cwd=project)
    assert r.returncode == 0, r.stderr
    assert (project / "RAN").exists()  # the exposure is the kernel's: bwrap mounted it rw
    (project / "RAN").unlink()
    (project / ".pysb.yaml").write_text(
        "version: 1\npython-guards: false\nimports: [json]\nfiles:\n  expose-rw: [.]\n"
    )
    r = _pysb(core_and_bwrap_env, "run", *NAMED, "--provider", "bwrap", "-c", program, cwd=project)
    assert r.returncode == 0, r.stderr


# -- guards are trusted by what they do, not by their name --------------------------------

#: Under the subprocess provider nothing but the Python layer would stop the program's
#: write of RAN: the marker shows whether it ran.
PROFILE = "version: 1\nimports: [json]\n"
#: The provider these tests name: the default, auto, would refuse for its own reason.
SUBPROCESS = (*NAMED, "--provider", "subprocess")


def _fake_guards(site: Path, modules: dict[str, str]) -> Path:
    """A distribution ``pysb-lazy`` whose guard entry points are ``modules``' names."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from fakedist import fake_dist

    return fake_dist(
        site,
        "pysb-lazy",
        "1.0",
        entry_points={"pysb.guards": {name: f"pysb_lazy_{name}" for name in modules}},
        modules={f"pysb_lazy_{name}.py": text for name, text in modules.items()},
    )


def test_a_guard_named_imports_that_does_nothing_enforces_nothing(
    core_and_bwrap_env: Path, tmp_path: Path
) -> None:
    site = _fake_guards(tmp_path / "site", {"imports": "", "api": ""})
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pysb.yaml").write_text(PROFILE)
    env = {"PYTHONPATH": str(site)}
    r = _pysb(core_and_bwrap_env, "check", "--provider", "subprocess", cwd=project, env=env)
    assert r.returncode == 125, r.stdout + r.stderr
    assert "[NONE]" in r.stdout and "imports: json" in r.stdout
    r = _pysb(
        core_and_bwrap_env, "run", *SUBPROCESS, "-c", "open('RAN', 'w')", cwd=project, env=env
    )
    assert r.returncode == 125, r.stderr
    assert not (project / "RAN").exists()


ARMS = (
    "from pysb_core import hookimpl\n"
    "@hookimpl\n"
    "def pysb_child_install(policy, recorder):\n"
    "    return {families!r}\n"
)


def test_a_family_the_profile_needs_that_the_child_did_not_arm_refuses_the_run(
    core_and_bwrap_env: Path, tmp_path: Path
) -> None:
    """Both guards have a child side (so the host counts them), but the api one arms
    nothing: the child refuses before the program, naming the family and distribution."""
    site = _fake_guards(
        tmp_path / "site",
        {"imports": ARMS.format(families=("imports",)), "api": ARMS.format(families=())},
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pysb.yaml").write_text(PROFILE)
    env = {"PYTHONPATH": str(site)}
    r = _pysb(
        core_and_bwrap_env, "run", *SUBPROCESS, "-c", "open('RAN', 'w')", cwd=project, env=env
    )
    assert r.returncode == 125, r.stderr
    assert not (project / "RAN").exists()
    assert "'api'" in r.stderr and "pysb-lazy 1.0" in r.stderr and "not armed" in r.stderr
    assert "Traceback" not in r.stderr
    r = _pysb(
        core_and_bwrap_env, "run", *SUBPROCESS, "--verbose", "-c", "pass", cwd=project, env=env
    )
    assert "armed: imports (pysb-lazy 1.0)" in r.stderr, r.stderr
    # Partial mode: the worker refuses before serving a call; the caller gets an error.
    code = (
        "import pysb_core\n"
        "try:\n"
        "    with pysb_core.sandboxes(profile='.pysb.yaml', provider='subprocess',"
        " start_timeout=20):\n"
        "        print('STARTED')\n"
        "except pysb_core.SandboxError as exc:\n"
        "    print('REFUSED', type(exc).__name__)\n"
    )
    r = subprocess.run(
        [str(core_and_bwrap_env / "bin" / "python"), "-c", code],
        cwd=project,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "STARTED" not in r.stdout and "REFUSED" in r.stdout, (r.stdout, r.stderr)
    assert "'api'" in r.stderr and "not armed" in r.stderr, r.stderr


def test_partial_mode_without_the_python_layer_refuses_too(
    core_and_bwrap_env: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pysb.yaml").write_text(PROFILE)
    trust_profile(project / ".pysb.yaml")  # found by sandboxes(): used once trusted
    code = (
        "import pysb_core\n"
        "try:\n"
        "    with pysb_core.sandboxes(provider='subprocess'):\n"
        "        print('STARTED')\n"
        "except pysb_core.SandboxError as exc:\n"
        "    print('REFUSED', type(exc).__name__, exc)\n"
    )
    r = subprocess.run(
        [str(core_and_bwrap_env / "bin" / "python"), "-c", code],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "STARTED" not in r.stdout and "REFUSED UnenforceableRuleError" in r.stdout, r.stdout
    assert "imports: json" in r.stdout and "pysb-guards" in r.stdout
