"""Helpers for the unshare tests: build LaunchPlans by hand and run them for real
(the same plans the pipeline builds, minus the bootstrap: the OS layer alone)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pytest

from pysb_core.launch.pyenv import implicit_exposures
from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, IgnoreRule, Policy
from pysb_core.policy.netrules import parse_rule


@pytest.fixture
def unshare_ok() -> None:
    """Skip (or fail under PYSB_REQUIRE_PROVIDERS) unless the unshare provider can run."""
    from pysb_core.testing import require_provider

    require_provider("unshare")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def make_plan(
    argv: Sequence[str],
    *,
    rules: Iterable[str] = (),
    pins: Mapping[str, Sequence[str]] | None = None,
    ro: Iterable[str] = (),
    rw: Iterable[str] = (),
    renames: Iterable[tuple[str, str, bool]] = (),
    hidden: Iterable[str] = (),
    ignore: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str = "/",
    pass_fds: Sequence[int] = (),
) -> LaunchPlan:
    """A plan as the pipeline would build it (implicit exposures + the given ones)."""
    exposures = [Exposure(os.path.realpath(p), os.path.realpath(p), False, "test:1") for p in ro]
    exposures += [Exposure(os.path.realpath(p), os.path.realpath(p), True, "test:2") for p in rw]
    exposures += [Exposure(os.path.realpath(s), t, w, "test:3") for s, t, w in renames]
    policy = Policy(
        exposures=tuple(exposures),
        ignore=tuple(IgnoreRule(g, "test:4") for g in ignore),
        network=tuple(parse_rule(r, f"test:{i + 10}") for i, r in enumerate(rules)),
        pins={k: tuple(v) for k, v in (pins or {}).items()},
        provider="unshare",
        python_guards=False,
        cwd=cwd,
    )
    return LaunchPlan(
        policy=policy,
        python=sys.executable,
        argv=list(argv),
        env=dict(env if env is not None else {"PATH": "/usr/bin:/bin"}),
        cwd=cwd,
        exposures=[*implicit_exposures(sys.executable), *exposures],
        hidden=list(hidden),
        pass_fds=list(pass_fds),
    )


def run_plan(plan: LaunchPlan, *, timeout: float = 60, provider=None) -> Result:
    from pysb_unshare import UnshareProvider

    provider = provider or UnshareProvider()
    proc = provider.launch(plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fn in reversed(plan.cleanups):
            fn()
    return Result(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


def sh(script: str, **kw) -> LaunchPlan:
    return make_plan(["/bin/bash", "-c", script], **kw)


def py(code: str, **kw) -> LaunchPlan:
    return make_plan([sys.executable, "-c", code], **kw)
