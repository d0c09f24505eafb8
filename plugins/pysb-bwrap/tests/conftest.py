"""Fixtures for the bwrap provider's tests: hand-built launch plans run under real bwrap.

Plans are built directly (not through the CLI) so that each test controls exactly what is
exposed; the interpreter's own prefix is the only implicit exposure they need.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pysb_bwrap import BwrapProvider
from pysb_bwrap.probe import probe_bwrap

from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, NetworkRule, Policy, PortRange
from pysb_core.testing import _note_provider, required_providers

PYTHONS = {
    # the running interpreter only when it is 3.11 (the suite also runs under 3.12, 3.13)
    "3.11": sys.executable
    if sys.version_info[:2] == (3, 11)
    else os.path.expanduser("~/.pyenv/versions/3.11.7/bin/python3"),
    "3.12": os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3"),
    "3.13": os.path.expanduser("~/.pyenv/versions/3.13.0/bin/python3"),
}


def interpreter_exposures(python: str) -> list[Exposure]:
    """The interpreter's installation, read-only (what the pipeline adds implicitly)."""
    real = os.path.realpath(python)
    prefix = os.path.dirname(os.path.dirname(real))
    return [Exposure(path=prefix, target=prefix, writable=False, implicit=True)]


@pytest.fixture
def bwrap_available() -> None:
    """Skip unless bwrap can run here (a failure when CI requires it: PYSB_REQUIRE_PROVIDERS)."""
    status = probe_bwrap()
    _note_provider("bwrap")
    if not status.available:
        message = f"provider bwrap unavailable: {status.reason} (fix: {status.fix})"
        if "bwrap" in required_providers():
            pytest.fail(message + " (required by PYSB_REQUIRE_PROVIDERS)")
        pytest.skip(message)


def make_plan(
    argv: list[str],
    *,
    cwd: str = "/",
    exposures: list[Exposure] | None = None,
    hidden: list[str] | None = None,
    protected: list[str] | None = None,
    env: dict[str, str] | None = None,
    network: tuple[NetworkRule, ...] = (),
    python: str = sys.executable,
    pass_fds: list[int] | None = None,
    interactive: bool = False,
    options: dict | None = None,
) -> LaunchPlan:
    exps = [*interpreter_exposures(python), *(exposures or [])]
    policy = Policy(
        exposures=tuple(exps),
        network=network,
        env=dict(env or {}),
        provider="bwrap",
        provider_options={"bwrap": options} if options is not None else {},
        cwd=cwd,
    )
    return LaunchPlan(
        policy=policy,
        python=python,
        argv=argv,
        env=dict(env or {}),
        cwd=cwd,
        exposures=exps,
        hidden=list(hidden or []),
        protected=list(protected or []),
        pass_fds=list(pass_fds or []),
        interactive=interactive,
    )


def allow_rule(network: str = "127.0.0.1", port: int = 8000) -> NetworkRule:
    return NetworkRule(
        action="allow",
        protocols=("tcp",),
        network=network,
        ports=(PortRange(port, port),),
        direction="out",
        source="test.yaml:3",
        text=f"allow tcp {network} {port} out",
    )


RunResult = subprocess.CompletedProcess


@pytest.fixture
def run_plan(bwrap_available: None) -> Callable[..., RunResult]:
    """Launch a plan under bwrap, wait, run the cleanups, return output and status."""

    def run(plan: LaunchPlan, timeout: float = 60) -> RunResult:
        provider = BwrapProvider(plan.provider_options)
        proc = provider.launch(plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for fn in plan.cleanups:
                fn()
        return subprocess.CompletedProcess(
            plan.argv, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        )

    return run


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A canonical temporary directory (exposures are canonical paths)."""
    return Path(os.path.realpath(tmp_path))


@pytest.fixture
def mkplan() -> Callable[..., LaunchPlan]:
    return make_plan


@pytest.fixture
def pythons() -> dict[str, str]:
    return PYTHONS


@pytest.fixture
def mkrule() -> Callable[..., NetworkRule]:
    return allow_rule
