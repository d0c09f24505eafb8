"""Guard overhead inside one sandboxed process, as a ratio to plain Python.

``_guard_loops.py`` times ``open().close()``, ``os.stat``, ``importlib.import_module`` of a
loaded module, ``socket.connect`` to a loopback listener of its own, and
``os.environ.get`` with perf_counter loops. It runs under plain python, ``pysb run`` and
``python-sb``, unchanged. The machine is shared, so plain python runs again between
sandboxed runs, and each ratio is taken against the median of three plain figures: the
run just before, the run just after, and the median of all plain runs.
"""

from __future__ import annotations

import statistics
from typing import Any

import profiles
from common import NO_GUARDS, Context, clean_env, free_port, run_json

OPS = ("open", "stat", "import_module", "connect", "environ")


def _skip_reason(ctx: Context, provider: str) -> str | None:
    details = ctx.pysb_providers.get(provider, {}).get("details") or {}
    if provider == "qemu" and details.get("accel") == "tcg":
        return (
            "not measured: qemu runs under TCG software emulation here, so the loops would "
            "time the emulator, not the guards"
        )
    return None


def _os_only_host(provider: str) -> str:
    """The host of the OS-only profile's network rules: any host under Landlock (it filters
    TCP ports, not addresses); the loopback address under a namespace provider, as in the
    guarded profile, so that the port stays on the sandbox's own loopback there too."""
    return "*" if provider == "landlock" else "127.0.0.1"


def run(ctx: Context) -> dict[str, Any]:
    port = free_port()
    ours, ref = profiles.guards(ctx.workdir, port)
    scale, reps = ("0.1", "3") if ctx.quick else ("1", "5")
    loop_args = ["_guard_loops.py", str(port), scale, reps]
    env = clean_env({"BENCH_VAR": "x"})

    def plain() -> dict[str, Any]:
        return run_json([ctx.python, *loop_args], ctx.workdir, timeout=300, env=env)

    jobs: list[tuple[str, str, list[str]]] = []
    skipped: dict[str, dict[str, Any]] = {}
    for name in ctx.usable(ctx.pysb_providers):
        why = _skip_reason(ctx, name)
        if why:
            skipped[name] = {"error": why}
            continue
        argv = [ctx.pysb, "run", "--profile", str(ours), "--provider", name, *loop_args]
        jobs.append(("pysb", name, argv))
        if name != "subprocess":
            # The OS layer alone: what the kernel's checks cost without the Python guards
            # (Landlock's rulesets; a namespace's loopback with its netfilter rules and
            # conntrack), the floor each guarded figure is read against.
            bare = profiles.guards_os_only(ctx.workdir, port, host=_os_only_host(name))
            argv = [ctx.pysb, "run", "--profile", str(bare), "--provider", name]
            argv += ["--no-python-guards", *loop_args]
            jobs.append(("pysb", NO_GUARDS.format(name), argv))
    if ctx.ref_python_sb is not None:
        for name in ctx.usable(ctx.ref_providers):
            sb = [ctx.ref_python_sb, f"--pysandboxes-config={ref}", f"--os-sandbox={name}"]
            jobs.append(("reference", name, [*sb, *loop_args]))

    ctx.log("guards: plain python")
    plains = [plain()]
    result: dict[str, Any] = {"pysb": dict(skipped), "reference": {}, "plain_runs": plains}
    neighbours: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
    if "error" in plains[0]:
        ctx.errors.append(f"guards: plain python failed: {plains[0]['error']}")
        return result
    for impl, name, argv in jobs:
        ctx.log(f"guards: {impl} under {name}")
        entry = run_json(argv, ctx.workdir, timeout=300, env=env, provider=name)
        if impl == "pysb" and "error" in entry and "network" in entry["error"]:
            # A provider that refuses loopback rules (firejail filters only on a bridge):
            # measure the rest without them, and say why connect is missing.
            ctx.log(f"guards: pysb under {name} again, without the network rule")
            if name.endswith(NO_GUARDS.format("")):
                provider = name[: -len(NO_GUARDS.format(""))]
                no_net = profiles.guards_os_only(ctx.workdir, 0)
                retry = [ctx.pysb, "run", "--profile", str(no_net), "--provider", provider]
                retry.append("--no-python-guards")
            else:
                no_net, _ = profiles.guards(ctx.workdir, 0)
                retry = [ctx.pysb, "run", "--profile", str(no_net), "--provider", name]
            got = run_json(
                [*retry, "_guard_loops.py", "0", scale, reps], ctx.workdir, 300, env, name
            )
            if "error" not in got:
                got["connect"] = {
                    "error": f"not measured: pysb refuses a loopback rule under {name}",
                    "reason": entry["error"],
                }
                entry = got
        after = plain()
        plains.append(after)
        if "error" in entry and impl == "pysb":
            ctx.errors.append(f"guards: pysb under {name} failed: {entry['error']}")
        result[impl][name] = entry
        neighbours[(impl, name)] = (plains[-2], after)
    ok = [p for p in plains if "error" not in p]
    overall = {op: statistics.median(p[op]["median_s"] for p in ok) for op in OPS}
    result["plain"] = {op: {"median_s": overall[op]} for op in OPS}
    for (impl, name), pair in neighbours.items():
        entry = result[impl][name]
        if "error" in entry:
            continue
        for op in OPS:
            if "error" in entry[op]:
                continue
            # The plain runs just before and after, and the run-wide median: the median
            # of the three follows the load's drift without trusting one spike.
            near = [p[op]["median_s"] for p in pair if "error" not in p]
            entry[op]["plain_s"] = statistics.median([*near, overall[op]])
            entry[op]["ratio"] = entry[op]["median_s"] / entry[op]["plain_s"]
    return result
