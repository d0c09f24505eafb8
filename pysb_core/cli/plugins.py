"""Data behind ``pysb plugins``: every guard, provider and plugin with its hooks."""

from __future__ import annotations

import importlib
from typing import Any

from pysb_core.launch.drivers import provider_names
from pysb_core.launch.plugins import get_plugin_manager

HOOK_PREFIX = "pysb_"


def _hooks_of(obj: Any) -> list[str]:
    names = {n for n in dir(obj) if n.startswith(HOOK_PREFIX) and callable(getattr(obj, n, None))}
    child = getattr(obj, "PYSB_CHILD_MODULE", None)
    if isinstance(child, str) and child:
        # A guard family whose in-sandbox hooks live in a module of their own.
        try:
            module = importlib.import_module(child)
        except Exception:  # listed anyway; `pysb check` / `pysb run` fail closed on it
            module = None
        names.update(
            n for n in dir(module) if n.startswith(HOOK_PREFIX) and callable(getattr(module, n))
        )
    return sorted(names)


def list_plugins() -> list[dict[str, Any]]:
    from importlib.metadata import entry_points

    from pysb_core.launch.plugins import Hooks

    pm, loaded = get_plugin_manager()
    children = Hooks(pm).guard_children()
    rows: list[dict[str, Any]] = []
    for p in loaded:
        plugin = pm.get_plugin(f"{p.kind}:{p.name}") or pm.get_plugin(p.module)
        row = {
            "name": p.name,
            "kind": "plugin" if p.kind == "builtin" else p.kind,
            "distribution": p.distribution,
            "version": p.version or _core_version(),
            "hooks": _hooks_of(plugin) if plugin is not None else [],
            "module": p.module,
        }
        if p.kind == "guard":
            # The family this distribution provides, and the module that arms it in the
            # sandbox (None: nothing to arm, so the family counts as not installed).
            row["family"] = p.name
            row["arms"] = children.get(p.name)
        rows.append(row)
    names = set(provider_names())
    for ep in sorted(entry_points(group="pysb.providers"), key=lambda e: e.name):
        if ep.name not in names:
            continue
        hooks: list[str] = []
        try:
            hooks = _hooks_of(ep.load())
        except Exception:  # listed even when it does not import; `pysb providers` says why
            hooks = []
        rows.append(
            {
                "name": ep.name,
                "kind": "provider",
                "distribution": ep.dist.name if ep.dist else "?",
                "version": ep.dist.version if ep.dist else "?",
                "hooks": hooks,
                "module": ep.value,
            }
        )
    return rows


def _core_version() -> str:
    from pysb_core import __version__

    return __version__
