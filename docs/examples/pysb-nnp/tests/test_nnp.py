from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
from pysb_nnp import NoNewPrivsProvider

from pysb_core.testing import Project, require_provider

NO_NEW_PRIVS = "print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])"


@pytest.fixture(autouse=True)
def nnp_available() -> None:
    require_provider("nnp")  # a skip where setpriv is missing


def test_the_program_cannot_gain_privileges(
    launch_plan: Callable[..., Any], sandbox_runner: Callable[..., Any]
) -> None:
    plan = launch_plan([sys.executable, "-c", NO_NEW_PRIVS], provider="nnp")
    r = sandbox_runner(NoNewPrivsProvider(), plan)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1\n"


def test_the_exit_status_passes_through(
    launch_plan: Callable[..., Any], sandbox_runner: Callable[..., Any]
) -> None:
    plan = launch_plan([sys.executable, "-c", "raise SystemExit(7)"], provider="nnp")
    assert sandbox_runner(NoNewPrivsProvider(), plan).returncode == 7


def test_a_mistyped_option_is_refused_with_a_hint() -> None:
    assert NoNewPrivsProvider.validate_options({"core-dump": True}) == [
        "unknown option 'core-dump' (did you mean 'core-dumps'?)"
    ]
    assert NoNewPrivsProvider.validate_options({"core-dumps": "yes"}) == [
        "core-dumps: expected true or false, got 'yes'"
    ]


def test_pysb_runs_a_program_under_it(project: Project) -> None:
    project.profile("version: 1\n")
    program = "import resource; print(resource.getrlimit(resource.RLIMIT_CORE))"
    r = project.run("run", "--provider", "nnp", "--no-python-guards", "-c", program)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "(0, 0)\n"  # the child set-up ran inside the sandbox
    project.profile("version: 1\nproviders:\n  nnp:\n    core-dumps: true\n")
    r = project.run("run", "--provider", "nnp", "--no-python-guards", "-c", program)
    assert r.returncode == 0 and r.stdout != "(0, 0)\n", r.stderr


def test_pysb_check_shows_the_providers_note(project: Project) -> None:
    project.profile("version: 1\n")
    r = project.run("check", "--provider", "nnp", "--no-python-guards")
    assert r.returncode == 0, r.stdout + r.stderr  # a note is not an error
    assert "note: nnp: set-user-ID programs cannot raise privileges" in r.stdout
