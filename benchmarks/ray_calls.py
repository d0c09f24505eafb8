"""Ray: 2,000 trivial sandboxed calls through a local Ray cluster (pysb-ray), against the
same calls through local partial mode and against plain Ray tasks.

Named ``ray_calls`` (not ``ray``) because this directory is on ``sys.path`` first and a
``ray.py`` here would hide the Ray package. One fresh interpreter per provider
(``_ray_worker.py``); every Ray service binds 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from common import Context, clean_env, run_json

#: Measured in this order, the first available only: landlock is what an unprivileged
#: Kubernetes pod gets (docs/scaling.md); the others follow when it is missing.
PREFERRED = ("landlock", "bwrap", "unshare", "subprocess")


def run(ctx: Context) -> dict[str, Any]:
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("pysb_ray") is None:
        ctx.errors.append("ray: Ray or pysb-ray is not installed (make dev installs both)")
        return {}
    usable = ctx.usable(ctx.pysb_providers)
    provider = next((p for p in PREFERRED if p in usable), None)
    if provider is None:
        ctx.errors.append("ray: no provider available")
        return {}
    calls = 500 if ctx.quick else 2000
    ctx.log(f"ray: {calls} calls under {provider} (local, 1 node, 2 nodes)")
    argv = [ctx.python, "_ray_worker.py", "--provider", provider, "--calls", str(calls)]
    entry = run_json(argv, ctx.workdir, timeout=900, env=clean_env(), provider=provider)
    if "error" in entry:
        ctx.errors.append(f"ray: {entry['error']}")
    return {provider: entry}


ROWS = (
    ("local_1", "local `with sandboxes()`, 1 thread", None),
    ("local_8", "local `with sandboxes()`, 8 threads", None),
    ("ray_plain_1", "plain Ray tasks (no sandbox), 1 node", None),
    ("ray_sandboxed_1", "`@pysb_ray.sandboxed` tasks, 1 node", "ray_plain_1"),
    ("ray_plain_2", "plain Ray tasks (no sandbox), 2 nodes", None),
    ("ray_sandboxed_2", "`@pysb_ray.sandboxed` tasks, 2 nodes", "ray_plain_2"),
    ("pool_2", "`SandboxPool(2).map`, 2 nodes", "ray_plain_2"),
)


def markdown(section: dict[str, Any]) -> list[str]:
    """The report's table (``report.render`` calls it)."""
    lines: list[str] = []
    for provider, entry in section.items():
        lines += [f"## Ray: trivial sandboxed calls through a local cluster ({provider})", ""]
        if "error" in entry:
            lines += [f"failed: {entry['error']}", ""]
            continue
        lines += [
            f"{entry.get('calls')} calls of `noop(i) -> i`, Ray {entry.get('ray_version')}, "
            f"nodes of {entry.get('node', {}).get('num_cpus')} logical CPUs each on this "
            "one machine (two nodes share its two cores: the 2-node figures show the cost "
            "of a second raylet, not a gain). Ray figures: submit every call, then "
            "`ray.get` the list, after a warm-up round that starts the Ray workers and "
            "their sandboxes.",
            "",
            "| what | calls/s | per call | time ÷ plain Ray, same nodes |",
            "| --- | --- | --- | --- |",
        ]
        for key, what, base in ROWS:
            value = entry.get(key)
            if not isinstance(value, dict):
                continue
            per = 1e6 / value["calls_per_s"]
            ratio = ""
            base_value = entry.get(base) if base else None
            if isinstance(base_value, dict):
                ratio = f"{base_value['calls_per_s'] / value['calls_per_s']:.2f}x"
            lines.append(f"| {what} | {value['calls_per_s']:,.0f} | {per:,.0f} µs | {ratio} |")
        lines.append("")
    return lines
