"""Benchmark pysb against plain Python and pysandboxes 0.7.0: ``make bench``.

``benchmarks/run.py [--quick] [--only startup,partial,guards,memory,learning,ray] [--providers a,b]
[--no-reference] [--json PATH] [--markdown PATH] [--report-only]``

A full run (all sections) writes ``benchmarks/results/latest.json`` and regenerates
``docs/performance.md`` below its hand-written header. A partial or ``--quick`` run
writes ``benchmarks/results/latest.json`` and ``benchmarks/results/latest.md`` unless told
otherwise, so that a smoke run never replaces the published figures. Exit status: 0 when
everything was measured (timings are never judged), 1 when pysb failed a measurement or
the harness hit an error (listed under "errors"), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import guards
import learning_corpus
import memory
import partial
import profiles
import ray_calls
import reference
import report
import startup

SECTIONS = {
    "startup": startup.run,
    "partial": partial.run,
    "guards": guards.run,
    "memory": memory.run,
    "learning": learning_corpus.run,
    "ray": ray_calls.run,
}


def machine() -> dict[str, Any]:
    """What the figures were measured on (CPU, cores, memory, kernel, Python)."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = "unknown memory"
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal:")))
        mem = f"{kib / (1 << 20):.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    os_name = platform.platform()
    try:
        release = platform.freedesktop_os_release()
        os_name = release.get("PRETTY_NAME", os_name)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "kernel": platform.release(),
        "os": os_name,
        "python": platform.python_version(),
        "python_path": sys.executable,
        "hyperfine": shutil.which("hyperfine") is not None,
    }


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def pysb_providers(pysb: str) -> dict[str, dict[str, Any]]:
    proc = subprocess.run(
        [pysb, "providers", "--json"], capture_output=True, text=True, timeout=120, check=True
    )
    return {p["name"]: p for p in json.loads(proc.stdout)}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="few repetitions: a smoke run")
    parser.add_argument("--only", help=f"comma-separated sections of: {', '.join(SECTIONS)}")
    parser.add_argument("--providers", help="comma-separated providers to measure (default: all)")
    parser.add_argument("--no-reference", action="store_true", help="skip pysandboxes 0.7.0")
    parser.add_argument("--json", type=Path, help="where the JSON goes")
    parser.add_argument("--markdown", type=Path, help="where the Markdown report goes")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing: rewrite the Markdown report from the JSON file (--json)",
    )
    ns = parser.parse_args(argv)
    ns.sections = list(SECTIONS) if not ns.only else [s.strip() for s in ns.only.split(",")]
    unknown = [s for s in ns.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    ns.provider_list = [p.strip() for p in ns.providers.split(",")] if ns.providers else None
    complete = ns.report_only or (not ns.quick and not ns.only and not ns.providers)
    results_dir = common.HERE / "results"
    ns.json = ns.json or results_dir / "latest.json"
    ns.markdown = ns.markdown or (
        common.ROOT / "docs" / "performance.md" if complete else results_dir / "latest.md"
    )
    return ns


def compile_sources() -> None:
    """Write the .pyc files of pysb's own sources before anything is timed.

    Editable installs are not byte-compiled by pip, and an environment with
    PYTHONDONTWRITEBYTECODE=1 (or a read-only checkout) would otherwise make every measured
    start recompile pysb from source, while the reference, installed from a wheel, has its
    .pyc files: the comparison would not be like for like.
    """
    import compileall

    root = Path(__file__).resolve().parent.parent
    dirs = [root / "pysb_core", *sorted((root / "plugins").glob("pysb-*/src"))]
    for d in dirs:
        compileall.compile_dir(str(d), quiet=1)


def main(argv: list[str] | None = None) -> int:
    ns = parse(argv)
    if ns.report_only:
        try:
            report.write(ns.markdown, json.loads(ns.json.read_text()))
        except (OSError, ValueError, KeyError) as exc:
            print(f"bench: cannot render {ns.json}: {exc}", file=sys.stderr)
            return 1
        print(f"bench: wrote {ns.markdown} from {ns.json}", file=sys.stderr)
        return 0
    bindir = Path(sys.executable).parent
    pysb = shutil.which("pysb", path=str(bindir)) or shutil.which("pysb")
    if pysb is None:
        print(
            "bench: no `pysb` next to this interpreter nor on PATH: run `make dev`", file=sys.stderr
        )
        return 1
    started = time.monotonic()
    compile_sources()
    from pysb_core import __version__

    results: dict[str, Any] = {
        "meta": {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "quick": ns.quick,
            "sections": ns.sections,
            "machine": machine(),
            "load_before": load(),
            "pysb_version": __version__,
        },
        "targets": {
            "startup_ratio": common_targets("STARTUP_RATIO"),
            "partial": common_targets("PARTIAL"),
            "guards": common_targets("GUARDS"),
        },
        "providers": {},
        "sections": {},
    }
    workdir = common.make_workdir()
    ctx = common.Context(
        quick=ns.quick,
        python=sys.executable,
        pysb=pysb,
        workdir=workdir,
        only_providers=ns.provider_list,
    )
    try:
        ctx.pysb_providers = pysb_providers(pysb)
    except (subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
        ctx.errors.append(f"`pysb providers --json` failed: {exc}")
    results["providers"]["pysb"] = {
        n: {"available": i.get("available"), "reason": i.get("reason")}
        for n, i in ctx.pysb_providers.items()
        if ns.provider_list is None or n in ns.provider_list
    }
    if ns.no_reference:
        results["reference_install"] = {"installed": False, "error": "--no-reference"}
    else:
        results["reference_install"] = reference.ensure(ctx)
        if ctx.ref_python_sb is not None:
            ctx.log("probing the reference's providers")
            _, ref_profile = profiles.startup(workdir)
            ctx.ref_providers = reference.probe_providers(ctx, ref_profile)
            results["providers"]["reference"] = ctx.ref_providers
    try:
        durations = results["meta"]["section_durations_s"] = {}
        for name in ns.sections:
            began = time.monotonic()
            try:
                results["sections"][name] = SECTIONS[name](ctx)
            except Exception:
                ctx.errors.append(f"{name}: harness error: {traceback.format_exc(limit=3)}")
            durations[name] = round(time.monotonic() - began, 1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["meta"]["load_after"] = load()
    results["meta"]["duration_s"] = time.monotonic() - started
    results["errors"] = ctx.errors
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps(results, indent=2) + "\n")
    report.write(ns.markdown, results)
    if "learning" in results["sections"] and ns.markdown == common.ROOT / "docs" / "performance.md":
        # A complete run also refreshes the corpus table of docs/learning.md.
        learning_corpus.write_docs(
            common.ROOT / "docs" / "learning.md", results["sections"]["learning"], results["meta"]
        )
    ctx.log(f"wrote {ns.json} and {ns.markdown} in {results['meta']['duration_s']:.0f} s")
    for error in ctx.errors:
        ctx.log(f"error: {error}")
    return 1 if ctx.errors else 0


def common_targets(name: str) -> dict[str, Any]:
    import targets

    return {k: list(v) for k, v in getattr(targets, name).items()}


if __name__ == "__main__":
    sys.exit(main())
