"""Startup: ``python -c pass`` against ``pysb run -c pass`` and ``python-sb -c pass``.

Whole-process wall time, per provider. The machine is shared, so each command's ratio is
taken against a ``python -c pass`` baseline timed just before it (the run-wide baseline
is reported too). hyperfine (``-N``: no shell in between) runs each
command after warm-up runs that fill the profile caches; without hyperfine a
perf_counter loop around ``subprocess.run`` does the same. Each command is run once
first: a command that fails is recorded with its reason instead of being timed.
"""

from __future__ import annotations

import json
import resource
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import profiles
from common import NET_FILTER, NO_GUARDS, Context, clean_env, median, reason_from


def _runs(ctx: Context, kind: str, provider: str) -> tuple[int, int]:
    """(warm-up runs, counted runs): bounded so that the whole run takes minutes."""
    if provider == "qemu":
        return (0, 1) if ctx.quick else (0, 3)  # the probe run boots it once already
    if ctx.quick:
        return (1, 3)
    return {"python": (3, 20), "local": (2, 10), "pysb": (2, 10), "ref": (1, 5)}[kind]


def _probe(argv: list[str], cwd: Path, provider: str) -> str | None:
    """Run the command once; its failure reason, or None when it worked."""
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        return "timed out (300 s)"
    except OSError as exc:
        return f"cannot start: {exc}"
    return None if proc.returncode == 0 else reason_from(proc.stderr, proc.returncode, provider)


def _hyperfine(argv: list[str], cwd: Path, warmup: int, runs: int) -> tuple[list[float], float]:
    """Wall times of the counted runs, and the mean CPU time (user + system) per run."""
    out = cwd / "hyperfine.json"
    subprocess.run(
        [
            "hyperfine",
            "-N",
            "--style",
            "none",
            "--warmup",
            str(warmup),
            "--runs",
            str(runs),
            "--export-json",
            str(out),
            shlex.join(argv),
        ],
        cwd=cwd,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=True,
        timeout=900,
    )
    data = json.loads(out.read_text())["results"][0]
    cpu = float(data.get("user", 0.0)) + float(data.get("system", 0.0))
    return [float(t) for t in data["times"]], cpu


def _loop(argv: list[str], cwd: Path, warmup: int, runs: int) -> tuple[list[float], float]:
    """The same without hyperfine: perf_counter around subprocess.run, CPU from rusage."""
    times = []
    cpu = 0.0
    for i in range(warmup + runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(
            argv,
            cwd=cwd,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
        )
        if i >= warmup:
            times.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return times, cpu / runs


def time_command(ctx: Context, argv: list[str], kind: str, provider: str = "") -> dict[str, Any]:
    """Median, min and max wall seconds of ``argv``; or the reason it could not run."""
    failure = _probe(argv, ctx.workdir, provider)
    if failure is not None:
        return {"error": failure}
    warmup, runs = _runs(ctx, kind, provider)
    tool = "hyperfine" if shutil.which("hyperfine") else "perf_counter"
    try:
        if tool == "hyperfine":
            times, cpu = _hyperfine(argv, ctx.workdir, warmup, runs)
        else:
            times, cpu = _loop(argv, ctx.workdir, warmup, runs)
    except subprocess.CalledProcessError as exc:
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return {"error": "failed while timed: " + reason_from(stderr, exc.returncode, provider)}
    except subprocess.TimeoutExpired:
        return {"error": "timed runs took too long"}
    return {
        "median_s": median(times),
        "min_s": min(times),
        "max_s": max(times),
        "cpu_s": cpu,
        "runs": len(times),
        "tool": tool,
        "command": shlex.join(argv),
    }


def floor_argv(ctx: Context, provider: str) -> list[str] | None:
    """The floor of ``pysb run --provider P -c pass``: a Python launcher
    (``_spawn_floor.py``) starting the provider's own tool with the options pysb's
    provider uses for its namespaces (no root to build, no packet filter, no guards)
    around ``python -c pass``; None where there is no such tool here."""
    inner = [ctx.python, "-c", "pass"]
    tools: dict[str, list[str]] = {
        "subprocess": [],
        "landlock": [],  # landlock_restrict_self costs microseconds
        "bwrap": [
            "bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        ],
        "unshare": [
            "unshare", "--user", "--map-root-user", "--mount", "--propagation", "private",
            "--net", "--ipc", "--uts", "--cgroup", "--pid", "--fork", "--mount-proc",
        ],
        "firejail": [
            "firejail", "--noprofile", "--quiet", "--caps.drop=all", "--nonewprivs",
            "--seccomp", "--private-dev", "--ipc-namespace", "--net=none", "--private-tmp",
        ],
    }  # fmt: skip
    tool = tools.get(provider)
    if tool is None:
        return None
    if tool:
        found = shutil.which(tool[0])
        if found is None:
            return None
        tool = [found, *tool[1:]]
    return [ctx.python, str(ctx.workdir / "_spawn_floor.py"), *tool, *inner]


def run(ctx: Context) -> dict[str, Any]:
    ours_profile, ref_profile = profiles.startup(ctx.workdir)
    result: dict[str, Any] = {"pysb": {}, "reference": {}}
    ctx.log("startup: python -c pass")
    baseline = [ctx.python, "-c", "pass"]
    base = time_command(ctx, baseline, "python")
    result["python"] = base
    if "error" in base:
        ctx.errors.append(f"startup: the baseline `python -c pass` failed: {base['error']}")
        return result

    def measure(argv: list[str], kind: str, name: str) -> dict[str, Any]:
        local = time_command(ctx, baseline, "local")
        entry = time_command(ctx, argv, kind, name)
        if "median_s" in entry:
            entry["baseline_s"] = local.get("median_s", base["median_s"])
            entry["ratio"] = entry["median_s"] / entry["baseline_s"]
            entry["baseline_cpu_s"] = local.get("cpu_s", base["cpu_s"])
            if entry["baseline_cpu_s"]:
                entry["cpu_ratio"] = entry["cpu_s"] / entry["baseline_cpu_s"]
        return entry

    result["floor"] = {}
    for name in ctx.usable(ctx.pysb_providers):
        ctx.log(f"startup: pysb run --provider {name} -c pass")
        argv = [ctx.pysb, "run", "--profile", str(ours_profile), "--provider", name, "-c", "pass"]
        entry = measure(argv, "pysb", name)
        result["pysb"][name] = entry
        if "error" in entry:
            ctx.errors.append(f"startup: pysb run under {name} failed: {entry['error']}")
        floor = floor_argv(ctx, name)
        if floor is not None:
            ctx.log(f"startup: the floor under {name}: {shlex.join(floor[2:])}")
            result["floor"][name] = measure(floor, "pysb", name)
    if "landlock" in ctx.usable(ctx.pysb_providers):
        # Where the time goes: the same start without the Python guards (the profile then
        # grants no import: the import rule is the Python layer's alone).
        ctx.log("startup: pysb run --provider landlock --no-python-guards -c pass")
        bare = ctx.workdir / "startup-bare.pysb.yaml"
        bare.write_text(f"version: 1\nfiles:\n  expose-ro: [{ctx.workdir}]\n")
        argv = [ctx.pysb, "run", "--profile", str(bare), "--provider", "landlock"]
        entry = measure([*argv, "--no-python-guards", "-c", "pass"], "pysb", "landlock")
        result["pysb"][NO_GUARDS.format("landlock")] = entry
    # Kernel-enforced network filtering (a user-mode network and a packet filter loaded
    # before the program starts): the same start with one loopback allow rule. Nothing is
    # sent: `pass` opens no socket.
    filtering = ctx.workdir / "startup-net.pysb.yaml"
    filtering.write_text(ours_profile.read_text() + "network:\n  - allow tcp 127.0.0.1 9 out\n")
    for name in ("bwrap", "unshare"):
        if name not in ctx.usable(ctx.pysb_providers):
            continue
        ctx.log(f"startup: pysb run --provider {name} -c pass, with network filtering")
        argv = [ctx.pysb, "run", "--profile", str(filtering), "--provider", name, "-c", "pass"]
        entry = measure(argv, "pysb", name)
        result["pysb"][NET_FILTER.format(name)] = entry
        if "error" in entry:
            ctx.errors.append(
                f"startup: pysb run under {name} with filtering failed: {entry['error']}"
            )
    if ctx.ref_python_sb is not None:
        for name in ctx.usable(ctx.ref_providers):
            ctx.log(f"startup: python-sb --os-sandbox={name} -c pass")
            argv = [
                ctx.ref_python_sb,
                f"--pysandboxes-config={ref_profile}",
                f"--os-sandbox={name}",
                "-c",
                "pass",
            ]
            result["reference"][name] = measure(argv, "ref", name)
    return result
