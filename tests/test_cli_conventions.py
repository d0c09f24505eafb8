"""Command-line conventions: version, help, verbosity, colour, completion, what is missing.

Every test runs the real ``pysb`` console script (completion included: click's
``_PYSB_COMPLETE`` protocol is exercised as a shell would), except the two that need a
core-only installation, which replace the metadata lookup (the fresh-venv packaging test
runs the real thing on a core-only install).
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

from pysb_core.cli.commands import cli
from pysb_core.launch import catalog
from pysb_core.launch.drivers import load_provider_class, provider_names
from pysb_core.testing import BASE_ENV, pysb_command, run_pysb, trust_profile

VERSION = version("pysb-core")


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag: str, tmp_path: Path) -> None:
    r = run_pysb(flag, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, f"pysb {VERSION}\n")


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_run_help_is_pysbs_and_starts_nothing(flag: str, tmp_path: Path) -> None:
    r = run_pysb("run", flag, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "--provider NAME" in r.stdout and "--learn" in r.stdout
    assert "pysb run -- -h" in r.stdout  # how to get CPython's own
    assert list(tmp_path.iterdir()) == []  # no learning run wrote a profile


def test_run_double_dash_h_is_cpythons_help_without_a_sandbox(tmp_path: Path) -> None:
    r = run_pysb("run", "--", "-h", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout and "-c cmd" in r.stdout and "--provider" not in r.stdout
    assert list(tmp_path.iterdir()) == []


def test_after_the_program_dash_h_is_the_programs(tmp_path: Path) -> None:
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    trust_profile(tmp_path / ".pysb.yaml")  # found, not named: used once trusted
    r = run_pysb("run", "-c", "import sys; print(sys.argv)", "-h", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "['-c', '-h']\n"), r.stderr


@pytest.mark.parametrize("command", sorted(set(cli.commands) - {"run"}))
def test_every_click_command_takes_verbose_and_quiet(command: str, tmp_path: Path) -> None:
    r = run_pysb(command, "--help", cwd=tmp_path)
    assert "--verbose" in r.stdout and "--quiet" in r.stdout
    needs = ["x"] if command == "import-profile" else []  # its PATH argument
    both = run_pysb(command, "--verbose", "--quiet", *needs, cwd=tmp_path)
    assert both.returncode == 2 and "cannot be used together" in both.stderr


def test_run_lists_verbose_and_quiet(tmp_path: Path) -> None:
    assert "--verbose / --quiet" in run_pysb("run", "--help", cwd=tmp_path).stdout


def test_providers_quiet_is_one_line_per_provider_and_verbose_adds_details(
    tmp_path: Path,
) -> None:
    quiet = run_pysb("providers", "--quiet", cwd=tmp_path).stdout.splitlines()
    assert [line.split()[0] for line in quiet] == sorted(provider_names())
    normal = run_pysb("providers", cwd=tmp_path).stdout
    verbose = run_pysb("providers", "--verbose", cwd=tmp_path).stdout
    assert len(verbose.splitlines()) > len(normal.splitlines()) > len(quiet)


def test_plugins_quiet_and_verbose(tmp_path: Path) -> None:
    quiet = run_pysb("plugins", "-q", cwd=tmp_path).stdout
    verbose = run_pysb("plugins", "-v", cwd=tmp_path).stdout
    assert "hooks:" not in quiet and "module: pysb_core.builtin.dns" in verbose


def test_check_quiet_prints_only_the_verdict(tmp_path: Path) -> None:
    (tmp_path / ".pysb.yaml").write_text("version: 1\nimports: [json]\n")
    r = run_pysb("check", "--quiet", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "valid\n"), r.stderr
    (tmp_path / "bad.yaml").write_text("version: 1\nfiels: {}\n")
    bad = run_pysb("check", "-q", "--profile", "bad.yaml", cwd=tmp_path)
    assert bad.returncode == 125 and "bad.yaml:2:" in bad.stderr and bad.stdout == ""


def _on_a_terminal(args: list[str], env: dict[str, str], cwd: Path) -> bytes:
    """Run ``pysb ARGS`` with its stdout on a pseudo-terminal; return what it printed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*pysb_command(), *args], stdout=follower, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    os.close(follower)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 30)
            if not ready:
                break
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
        proc.wait(timeout=30)
    return out


def test_colour_on_a_terminal_unless_no_color(tmp_path: Path) -> None:
    env = {**BASE_ENV, "TERM": "xterm-256color"}
    assert b"\x1b[" in _on_a_terminal(["providers"], env, tmp_path)
    assert b"\x1b[" not in _on_a_terminal(["providers"], {**env, "NO_COLOR": "1"}, tmp_path)
    assert b"\x1b[" not in _on_a_terminal(["providers"], {**env, "TERM": "dumb"}, tmp_path)
    piped = run_pysb("providers", cwd=tmp_path, env={"TERM": "xterm-256color"})
    assert "\x1b[" not in piped.stdout


def _complete(words: str, cword: int, tmp_path: Path) -> list[str]:
    r = subprocess.run(
        pysb_command(),
        env={
            **BASE_ENV,
            "_PYSB_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(cword),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line.split(",", 1)[1] for line in r.stdout.splitlines()]


def test_completion_of_commands_options_and_provider_names(tmp_path: Path) -> None:
    assert {"run", "check", "providers", "plugins"} <= set(_complete("pysb ", 1, tmp_path))
    assert _complete("pysb run --prov", 2, tmp_path) == ["--provider"]
    assert _complete("pysb run --ex", 2, tmp_path) == ["--expose-ro", "--expose-rw"]
    assert _complete("pysb run --provider ", 3, tmp_path) == sorted(provider_names())
    assert _complete("pysb check --provider l", 3, tmp_path) == ["landlock"] * (
        "landlock" in provider_names()
    )
    assert "--verbose" in _complete("pysb providers --", 2, tmp_path)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_for_each_documented_shell(shell: str, tmp_path: Path) -> None:
    r = subprocess.run(
        pysb_command(),
        env={**BASE_ENV, "_PYSB_COMPLETE": f"{shell}_source"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "_PYSB_COMPLETE" in r.stdout
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"_PYSB_COMPLETE={shell}_source pysb" in readme


@pytest.mark.parametrize("package", [p for p in catalog.FIRST_PARTY if p.provider])
def test_catalog_says_what_the_provider_class_says(package: catalog.FirstParty) -> None:
    assert package.provider is not None
    if package.provider not in provider_names():
        pytest.skip(f"{package.distribution} is not installed here")
    cls = load_provider_class(package.provider)
    assert package.description == cls.description
    assert package.capabilities == tuple(sorted(str(c) for c in cls.capabilities))


def test_providers_names_what_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "installed_distributions", lambda: {"pysb-bwrap"})
    out = CliRunner().invoke(cli, ["providers"]).output
    assert "Not installed (first-party packages):" in out
    for package in catalog.FIRST_PARTY:
        said = f"pip install {package.distribution}" in out
        assert said == (package.distribution != "pysb-bwrap")
    assert "provider 'landlock' would enforce: env, files, files-write" in out


def test_providers_says_nothing_more_when_everything_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    every = {p.distribution for p in catalog.FIRST_PARTY}
    monkeypatch.setattr(catalog, "installed_distributions", lambda: every)
    assert "Not installed" not in CliRunner().invoke(cli, ["providers"]).output
