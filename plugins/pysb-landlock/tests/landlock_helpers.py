"""Helpers: run a real interpreter that restricts itself, exactly as the bootstrap does.

The child builds a real :class:`LaunchPlan` (implicit exposures of *its own* interpreter
plus the test's), compiles it with the provider, and calls ``pysb_landlock.child.restrict``
with the compiled arguments after a JSON round trip (the payload is JSON in pysb).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "plugins" / "pysb-landlock" / "src"

PRELUDE = r"""
import json, os, sys
spec = json.loads(sys.argv[1])
del sys.argv[1]
from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, Policy
from pysb_core.launch.pyenv import implicit_exposures
from pysb_core.policy.netrules import parse_rule
from pysb_landlock import LandlockProvider
import pysb_landlock.child as child
exposures = [Exposure(p, p, False, "<test>") for p in spec["ro"]]
exposures += [Exposure(p, p, True, "<test>") for p in spec["rw"]]
policy = Policy(exposures=tuple(exposures), network=tuple(parse_rule(r) for r in spec["net"]),
                provider="landlock")
plan = LaunchPlan(policy=policy, python=sys.executable, argv=[], env={}, cwd=os.getcwd(),
                  exposures=implicit_exposures() + exposures)
prov = LandlockProvider()
prov.prepare(plan)
args = json.loads(json.dumps(plan.child_setups[0].args))
args.update(spec.get("override", {}))
child.restrict(**args)
"""


def landlock_abi() -> int:
    sys.path.insert(0, str(SRC))
    try:
        from pysb_landlock import ruleset

        return ruleset.abi_version()
    except OSError:
        return 0
    finally:
        sys.path.remove(str(SRC))


ABI = landlock_abi()
needs_abi = {
    n: pytest.mark.skipif(n > ABI, reason=f"needs landlock ABI {n}, kernel has {ABI}")
    for n in range(1, 8)
}


def pythons() -> list[str]:
    """The interpreter running the tests, plus the other supported pyenv versions here."""
    found = [sys.executable]
    root = Path.home() / ".pyenv" / "versions"
    for minor in ("3.11", "3.12", "3.13"):
        for v in sorted(root.glob(f"{minor}.*")):
            exe = v / "bin" / "python3"
            if exe.exists() and os.path.realpath(exe) != os.path.realpath(sys.executable):
                found.append(str(exe))
                break
    return found


def run_sandboxed(
    code: str,
    *args: str,
    ro: list[str] | tuple[str, ...] = (),
    rw: list[str] | tuple[str, ...] = (),
    net: list[str] | tuple[str, ...] = (),
    python: str = sys.executable,
    override: dict | None = None,
    timeout: float = 60,
    stdin: int | None = None,
    prefix: list[str] | tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    spec = {"ro": list(ro), "rw": list(rw), "net": list(net), "override": override or {}}
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{SRC}",
        "LC_ALL": "C.UTF-8",
    }
    return subprocess.run(
        [*prefix, python, "-s", "-c", PRELUDE + "\n" + code, json.dumps(spec), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd="/",
        stdin=stdin,
    )
