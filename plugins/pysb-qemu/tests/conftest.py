"""Fixtures for the qemu provider's tests: hand-built launch plans booted in a real VM (TCG).

Plans are built directly, as the pipeline builds them, so each test controls exactly what
is exposed. Every VM test is marked ``slow`` (about 3 s each) but runs by default.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from pysb_qemu import QemuProvider

from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, Limits, NetworkRule, Policy
from pysb_core.testing import require_provider

BOOT_STUB = (
    "import sys;sys.path[0:0]=[p for p in {paths!r} if p not in sys.path];"
    "from pysb_core.child.bootstrap import main;main(sys.argv[1])"
)
CORE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__import__("pysb_core").__file__)))


def interpreter_exposures(python: str) -> list[Exposure]:
    real = os.path.realpath(python)
    prefix = os.path.dirname(os.path.dirname(real))
    return [Exposure(path=prefix, target=prefix, writable=False, implicit=True)]


@pytest.fixture
def qemu_provider() -> QemuProvider:
    require_provider("qemu")  # skip, or fail when PYSB_REQUIRE_PROVIDERS names qemu
    return QemuProvider({"accel": "auto"})


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    plan: LaunchPlan


RunVm = Callable[..., Result]


@pytest.fixture
def run_vm(qemu_provider: QemuProvider) -> RunVm:
    """Run ``argv`` (a list, or Python code for ``python -c``) in a VM; return its result."""

    def run(
        program: str | list[str],
        *,
        exposures: list[Exposure] = (),
        env: dict[str, str] | None = None,
        network: tuple[NetworkRule, ...] = (),
        hidden: list[str] = (),
        protected: list[str] = (),
        pass_fds: list[int] = (),
        cwd: str = "/",
        stdin: bytes = b"",
        limits: Limits | None = None,
        bootstrap: bool = False,
        timeout: float = 120,
        after_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
        hosts_file: str | None = None,
    ) -> Result:
        python = sys.executable
        env = {"LANG": "C.UTF-8"} if env is None else env
        policy = Policy(
            provider="qemu", env=env, network=network, limits=limits or Limits(), cwd=cwd
        )
        payload_fd = None
        if bootstrap:
            payload_fd = os.memfd_create("pysb-payload", 0)
            argv = [python, "-c", BOOT_STUB.format(paths=[CORE_ROOT]), str(payload_fd)]
        elif isinstance(program, str):
            argv = [python, "-c", program]
        else:
            argv = list(program)
        exps = [*interpreter_exposures(python), *exposures]
        if bootstrap:
            exps.append(Exposure(CORE_ROOT, CORE_ROOT, False, implicit=True))
        plan = LaunchPlan(
            policy=policy,
            python=python,
            argv=argv,
            env=env,
            cwd=cwd,
            exposures=exps,
            hidden=list(hidden),
            protected=list(protected),
            pass_fds=[*([payload_fd] if payload_fd is not None else []), *pass_fds],
            hosts_file=hosts_file,
        )
        if bootstrap:
            plan.payload_fd = payload_fd
            plan.payload = {
                "policy": json.loads(policy.to_json()),
                "program": {"mode": "code", "argv": ["-c"], "code": program},
                "guards": [],
                "report_fd": None,
                "sys_path": [CORE_ROOT],
            }
        proc = qemu_provider.launch(
            plan, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        if payload_fd is not None:
            os.close(payload_fd)
        try:
            if after_start is not None:
                after_start(proc)
            out, err = proc.communicate(stdin, timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for fn in plan.cleanups:
                fn()
        return Result(
            proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), plan
        )

    return run
