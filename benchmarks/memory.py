"""Memory: peak RSS of the parent and of the child, for ``-c pass`` and an idle sandbox.

For a command, the benchmark polls ``/proc`` (every 2 ms) while it runs and keeps the
last ``VmHWM`` (peak RSS, monotonic) seen for the launched process (the parent: ``pysb``
or ``python-sb``) and the largest seen among its descendants (the child: the sandboxed
interpreter, or qemu's VM process). A process that lives less than a poll interval can
be missed; ``-c pass`` lives tens of milliseconds. For an idle ``sandboxes()`` the host
process reads its own peak and its worker's after one call and 0.3 s of idling.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import _procs
import profiles
from common import Context, clean_env, median, reason_from, run_json
from partial import worker_argv


def _one(argv: list[str], ctx: Context) -> dict[str, Any]:
    err_path = ctx.workdir / "memory-stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=ctx.workdir,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    parent = 0
    # Last VmHWM seen per descendant: a forked child shows its parent's pages until it
    # execs (then its high-water mark starts again), so only the last reading counts.
    last: dict[int, tuple[int, str]] = {}
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        parent = max(parent, _procs.peak_rss_kib(proc.pid) or 0)
        for pid in _procs.descendants(proc.pid):
            rss = _procs.peak_rss_kib(pid)
            if rss is not None:
                last[pid] = (rss, _procs.process_name(pid))
        time.sleep(0.002)
    child = max(last.values()) if last else None
    if proc.poll() is None:
        proc.kill()  # our own child, by PID
        proc.wait()
        return {"error": "did not exit within 300 s"}
    if proc.returncode != 0:
        return {"error": reason_from(err_path.read_text(errors="replace"), proc.returncode)}
    return {
        "parent_kib": parent or None,
        "child_kib": child[0] if child else None,
        "child_name": child[1] if child else None,
    }


def measure_command(argv: list[str], ctx: Context, reps: int) -> dict[str, Any]:
    """Median over ``reps`` runs of the peak RSS of the parent and of its largest child."""
    runs = [_one(argv, ctx) for _ in range(reps)]
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[0]["error"]}
    out: dict[str, Any] = {"runs": len(ok)}
    for key in ("parent_kib", "child_kib"):
        values = [r[key] for r in ok if r[key] is not None]
        out[key] = int(median(values)) if values else None
    out["child_name"] = ok[-1]["child_name"]
    return out


def run(ctx: Context) -> dict[str, Any]:
    ours_startup, ref_startup = profiles.startup(ctx.workdir)
    ours_partial, ref_partial = profiles.partial(ctx.workdir)
    reps = 1 if ctx.quick else 3
    result: dict[str, Any] = {"run_c_pass": {"pysb": {}, "reference": {}}}
    result["idle_sandboxes"] = {"pysb": {}, "reference": {}}
    ctx.log("memory: python -c pass")
    result["python_c_pass"] = measure_command([ctx.python, "-c", "pass"], ctx, reps)
    for name in ctx.usable(ctx.pysb_providers):
        ctx.log(f"memory: pysb under {name}")
        argv = [ctx.pysb, "run", "--profile", str(ours_startup), "--provider", name]
        entry = measure_command([*argv, "-c", "pass"], ctx, 1 if name == "qemu" else reps)
        result["run_c_pass"]["pysb"][name] = entry
        idle = run_json(
            [*worker_argv(ctx, "pysb", name, str(ours_partial)), "--idle-rss"],
            ctx.workdir,
            timeout=300,
            env=clean_env(),
            provider=name,
        )
        result["idle_sandboxes"]["pysb"][name] = idle
        for what, got in (("pysb run -c pass", entry), ("idle sandboxes()", idle)):
            if "error" in got:
                ctx.errors.append(f"memory: {what} under {name} failed: {got['error']}")
    if ctx.ref_python_sb is not None:
        for name in ctx.usable(ctx.ref_providers):
            ctx.log(f"memory: pysandboxes under {name}")
            sb = [ctx.ref_python_sb, f"--pysandboxes-config={ref_startup}", f"--os-sandbox={name}"]
            result["run_c_pass"]["reference"][name] = measure_command(
                [*sb, "-c", "pass"], ctx, reps
            )
            result["idle_sandboxes"]["reference"][name] = run_json(
                [*worker_argv(ctx, "ref", name, str(ref_partial)), "--idle-rss"],
                ctx.workdir,
                timeout=300,
                env=clean_env(),
                provider=name,
            )
    return result
