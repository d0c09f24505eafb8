"""Partial mode: ``with sandboxes()`` start/stop, call latency, throughput, payloads.

Each provider is measured in a fresh interpreter (``_partial_worker.py``, run in the
run's working directory next to the functions' module and the profile), for pysb with
the dev venv's Python and for the reference with its own venv's. pysb runs with its
defaults, Python guards included when pysb-guards is installed, as a user meets it.
"""

from __future__ import annotations

from typing import Any

import profiles
from common import NO_GUARDS, Context, clean_env, run_json

#: A provider whose start takes seconds (a VM under software emulation): the quick counts.
SLOW = {"qemu"}


def worker_argv(ctx: Context, impl: str, provider: str, profile: str) -> list[str]:
    python = ctx.python if impl == "pysb" else ctx.ref_python
    assert python is not None
    argv = [python, "_partial_worker.py", "--impl", impl, "--provider", provider]
    return [*argv, "--profile", profile]


def run(ctx: Context) -> dict[str, Any]:
    ours, ref = profiles.partial(ctx.workdir)
    result: dict[str, Any] = {"pysb": {}, "reference": {}}
    for name in ctx.usable(ctx.pysb_providers):
        ctx.log(f"partial: pysb under {name}")
        argv = worker_argv(ctx, "pysb", name, str(ours))
        if ctx.quick or name in SLOW:
            argv.append("--quick")
        entry = run_json(argv, ctx.workdir, timeout=600, env=clean_env(), provider=name)
        result["pysb"][name] = entry
        failed = _failures(entry)
        if failed:
            ctx.errors.append(f"partial: pysb under {name}: {failed}")
    if "landlock" in ctx.usable(ctx.pysb_providers):
        # Where the time goes: the same without the Python guards in the worker.
        ctx.log("partial: pysb under landlock without the Python guards")
        argv = [*worker_argv(ctx, "pysb", "landlock", str(ours)), "--no-python-guards"]
        if ctx.quick:
            argv.append("--quick")
        entry = run_json(argv, ctx.workdir, timeout=600, env=clean_env(), provider="landlock")
        result["pysb"][NO_GUARDS.format("landlock")] = entry
        failed = _failures(entry)
        if failed:
            ctx.errors.append(f"partial: pysb under landlock without guards: {failed}")
    if ctx.ref_python is not None:
        for name in ctx.usable(ctx.ref_providers):
            ctx.log(f"partial: pysandboxes under {name}")
            # The reference needs about a second per start and 0.2 s per MiB: always
            # the reduced repetition counts, so that the run stays within minutes.
            argv = [*worker_argv(ctx, "ref", name, str(ref)), "--heavy"]
            if ctx.quick:
                argv.append("--quick")
            entry = run_json(argv, ctx.workdir, timeout=600, env=clean_env(), provider=name)
            result["reference"][name] = entry
    return result


def _failures(entry: dict[str, Any]) -> str:
    """The steps of a pysb run that failed (for pysb a failure is an error of the run)."""
    if "error" in entry:
        return str(entry["error"])
    bad = [f"{k}: {v['error']}" for k, v in entry.items() if isinstance(v, dict) and "error" in v]
    return "; ".join(bad)
