"""The profiles the benchmark runs under, written for both implementations.

Each profile grants what its benchmark loop needs and nothing else, the same rules in
pysb's YAML (``.pysb.yaml`` format, SPEC §4) and in pysandboxes' ``key=value`` lines, so
that both sides pay for the same guards. Both expose the run's working directory
read-only: it holds the sandboxed code and ``data.txt``, and qemu needs the cwd.
"""

from __future__ import annotations

from pathlib import Path

#: Modules the guard loops import (``_guard_loops.py``).
GUARD_IMPORTS = ["json", "os", "socket", "importlib", "threading", "time"]


def startup(workdir: Path) -> tuple[Path, Path]:
    """``-c pass`` profiles: one import (as in the reference's measurement), the cwd."""
    ours = workdir / "startup.pysb.yaml"
    ours.write_text(f"version: 1\nimports: [json]\nfiles:\n  expose-ro: [{workdir}]\n")
    ref = workdir / "startup.py-sandboxes"
    ref.write_text(f"python-import=json\nexpose-ro={workdir}\n")
    return ours, ref


def partial(workdir: Path) -> tuple[Path, Path]:
    """Partial-mode profiles: the functions' module is all the worker needs."""
    ours = workdir / "partial.pysb.yaml"
    ours.write_text(f"version: 1\nfiles:\n  expose-ro: [{workdir}]\n")
    ref = workdir / "partial.py-sandboxes"
    ref.write_text(f"python-import=_ref_funcs\nexpose-ro={workdir}\n")
    return ours, ref


def guards(workdir: Path, port: int) -> tuple[Path, Path]:
    """Guard-loop profiles: the loops' imports, threads, one variable, one loopback port.

    ``port`` 0: no network rule (for a provider that refuses loopback rules; the loops
    then leave ``connect`` out).
    """
    ours = workdir / f"guards-{port}.pysb.yaml"
    network = f"network:\n  - allow tcp 127.0.0.1 {port} in\n  - allow tcp 127.0.0.1 {port} out\n"
    ours.write_text(
        "version: 1\n"
        f"imports: [{', '.join(GUARD_IMPORTS)}]\n"
        "api: {allow: [threads]}\n"
        "env: {BENCH_VAR: x}\n"
        f"files:\n  expose-ro: [{workdir}]\n" + (network if port else "")
    )
    ref = workdir / f"guards-{port}.py-sandboxes"
    ref.write_text(
        f"python-import={', '.join(GUARD_IMPORTS)}\n"
        "python-api=ALLOW:threads\n"
        "env=BENCH_VAR=x\n"
        f"expose-ro={workdir}\n"
        f"net=ALLOW|TCP|127.0.0.1|{port}|IN\n"
        f"net=ALLOW|TCP|127.0.0.1|{port}|OUT\n"
    )
    return ours, ref


def guards_os_only(workdir: Path, port: int, host: str = "*") -> Path:
    """Guard loops with the Python guards off: only rules the OS layer enforces.

    No ``imports``/``api`` (the Python layer's alone). ``host``: ``*`` for Landlock, which
    filters TCP ports, not addresses; ``127.0.0.1`` for a namespace provider. ``port`` 0:
    no network rule.
    """
    name = "any" if host == "*" else host
    ours = workdir / f"guards-os-{name}-{port}.pysb.yaml"
    network = f"network:\n  - allow tcp {host} {port} in\n  - allow tcp {host} {port} out\n"
    ours.write_text(
        "version: 1\n"
        "env: {BENCH_VAR: x}\n"
        f"files:\n  expose-ro: [{workdir}]\n" + (network if port else "")
    )
    return ours
