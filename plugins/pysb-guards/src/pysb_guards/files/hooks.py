"""The file guard's parent-side hooks: the launch plan, ``pysb check``, learned exposures.

This module is the ``files`` entry point of the ``pysb.guards`` group. It is imported by
every ``pysb run`` on the host, so it stays light: the guard itself (faces on the path
functions, the audit hook) lives in :mod:`pysb_guards.files.guard`, which only the sandboxed
interpreter imports (``PYSB_CHILD_MODULE``).
"""

from __future__ import annotations

from pysb_core.guardkit import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds at every start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from pysb_core.guardkit import CheckReport, Event, LaunchPlan, Policy, Provider

GUARD = "files"
#: The module the sandboxed interpreter imports to install this family's guard.
PYSB_CHILD_MODULE = "pysb_guards.files.guard"
#: The guard kit this family is written against (:mod:`pysb_core.kitversion`).
PYSB_GUARDKIT = "1.2"


@hookimpl
def pysb_contribute(policy: Policy, plan: LaunchPlan) -> None:
    """Hand the child the implicit exposures the pipeline computed (no recomputation)."""
    payload = getattr(plan, "payload", None)
    if not isinstance(payload, dict) or not isinstance(payload.get("policy"), dict):
        return
    from pysb_core.guardkit import asdict

    known = {(e["path"], e["target"]) for e in payload["policy"].get("exposures", ())}
    extra = [asdict(e) for e in plan.exposures if e.implicit and (e.path, e.target) not in known]
    if extra:
        payload["policy"]["exposures"] = [*extra, *payload["policy"].get("exposures", ())]


@hookimpl
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """Each exposure and ignore rule: python, plus os when the provider enforces it."""
    from pysb_core.guardkit import Capability

    enforced = set(provider.enforced()) if provider is not None else set()
    for e in policy.exposures:
        if e.implicit:
            continue
        key = "expose-rw" if e.writable else "expose-ro"
        shown = e.path if not e.renamed else f"{e.path}:{e.target}"
        layers = ["python"]
        needs = {Capability.FILES} | ({Capability.FILES_WRITE} if e.writable else set())
        if e.renamed:
            needs.add(Capability.RENAME)
        if needs <= enforced:
            layers.append("os")
        report.add(f"files: {key}: {shown}", e.source, layers, family=GUARD)
    for rule in policy.ignore:
        layers = ["python", *(["os"] if Capability.IGNORE in enforced else [])]
        report.add(f"files: ignore: {rule.pattern}", rule.source, layers, family=GUARD)
    # Profile files are protected implicitly, not by a rule the user wrote: a note, so that
    # an explicit opt-out of the Python layer under a provider without write confinement
    # is not refused for a rule nobody asked for.
    for path in policy.profile_files:
        layers = ["python", *(["os"] if Capability.FILES_WRITE in enforced else [])]
        report.note(f"profile file {path} is never writable inside (by: {', '.join(layers)})")


@hookimpl
def pysb_learned(records: Sequence[Event], profile: Any) -> None:
    """Files as their directories: ``expose-rw`` if written, else ``expose-ro``; a record
    naming no file the program could have used is dropped (:mod:`pysb_guards.learned_fields`)."""
    drop = getattr(profile, "drop", None)
    for key, path in learned_exposures(records, drop):
        form = profile.path_form(path) if hasattr(profile, "path_form") else path
        profile.add("files", key, form)


def learned_exposures(records: Sequence[Event], drop: Any = None) -> list[tuple[str, str]]:
    """``(expose-ro|expose-rw, directory)`` covering every learned file access (SPEC §4).

    Runs in the parent once the program has exited, on the same file system (a learning
    run uses the ``subprocess`` provider), so what still exists can be asked:

    - a file read is its directory; a directory listed, entered or read stays itself;
    - the bytecode cache is the source's directory, read-only: a compiled module read
      from ``__pycache__`` (the import system stats the ``.py`` with its own unguarded
      calls and then reads only the ``.pyc``, so the next run needs the source's
      directory), and the import system's own writes there (``mkdir __pycache__``, the
      ``.pyc`` and its temporary file): caching bytecode is no reason to make a project
      writable, and an import whose cache cannot be written goes on without it;
    - a write is the directory written *into*: a file's directory, a directory the
      program created (``mkdir``) or wrote through (``open(dir, "w+")`` with an opener,
      ``O_TMPFILE``, ``chmod``) that still exists is itself, never its parent; one that
      is gone (created then removed, renamed away) is its parent, where that happened;
    - a ``stat`` never widens a rule to a parent: a stat of an existing file counts as its
      directory, a stat of a directory or of a missing path counts for nothing (those are
      made while resolving paths, or by the import system scanning ``sys.path``);
    - a probe of a missing path (a config file looked for up the tree) counts for nothing;
    - never ``/``, and never a directory that no longer exists: an exposure must be an
      existing directory, or no provider can start the next run.

    Directories below another kept one with at least the same right are merged into it.
    A record whose target is no file name (``drop(family, what, why)`` is told) is skipped.
    """
    import os.path

    from pysb_guards.learned_fields import path_problem

    dirs: dict[str, bool] = {}
    for r in records:
        if r.guard != GUARD or r.action != "learn":
            continue
        problem = (
            path_problem(r.target)
            if r.detail != "exec"
            else (None if r.target and "\0" not in r.target else "not a program name")
        )
        if problem is not None:
            if drop is not None:
                drop(GUARD, r.target, problem)
            continue
        if r.detail == "exec":
            for directory in _exec_directories(r.target, r.data):
                dirs.setdefault(directory, False)
            continue
        path = r.target
        if not path.startswith("/") or path.startswith(("/proc/", "/sys/", "/dev/")):
            continue
        source = _bytecode_source(path)
        if source is not None:
            directory, write = source, False
        else:
            directory = _learned_directory(path, r.detail, r.data, os.path.isdir)
            write = bool(r.data.get("write"))
        if directory is None or directory == "/" or not os.path.isdir(directory):
            continue
        dirs[directory] = dirs.get(directory, False) or write
    kept: dict[str, bool] = {}
    for d in sorted(dirs, key=len):
        parent = next((k for k in kept if d == k or d.startswith(k.rstrip("/") + "/")), None)
        if parent is not None and (kept[parent] or not dirs[d]):
            continue
        kept[d] = dirs[d]
    return [("expose-rw" if w else "expose-ro", d) for d, w in sorted(kept.items())]


def _bytecode_source(path: str) -> str | None:
    """The source directory whose bytecode cache ``path`` is (a ``__pycache__``
    directory, or a ``.pyc`` or its temporary file in one), else None."""
    import os.path

    if os.path.basename(path) == "__pycache__":
        return os.path.dirname(path) or "/"
    cache = os.path.dirname(path)
    if os.path.basename(cache) == "__pycache__" and ".pyc" in os.path.basename(path):
        return os.path.dirname(cache) or "/"
    return None


def _exec_directories(name: str, data: dict) -> list[str]:
    """The directories holding what starting the executed program ``name`` needs: the
    binary, its ``#!`` or ELF interpreter and its shared libraries (``pysb_core.linux.execdeps``,
    resolved on ``PATH`` as the learning run had it)."""
    import os

    from pysb_core.guardkit import find_executable, needed_files

    cwd = str(data.get("cwd") or os.getcwd())
    found = find_executable(name, os.environ.get("PATH"), cwd)
    if found is None:
        return []
    out: list[str] = []
    for path in needed_files(found):
        directory = os.path.dirname(path) or "/"
        if directory != "/" and directory not in out:
            out.append(directory)
    return out


def _learned_directory(path: str, kind: str, data: dict, isdir: Any) -> str | None:
    """The directory one learned access needs, or None when it needs none."""
    import os.path

    write = bool(data.get("write"))
    existed = bool(data.get("exists", True))
    was_dir = bool(data.get("isdir"))
    parent = os.path.dirname(path) or "/"
    if not write:
        if not existed:
            return None  # a probe of a missing path: nothing to expose
        if kind == "stat":
            return None if was_dir else parent
        return path if was_dir else parent
    if kind == "mkdir" or was_dir:
        # The directory itself while it exists (it was created, or written through);
        # its parent when it is gone (made and removed, or renamed away: both wrote there).
        return path if isdir(path) else parent
    return parent
