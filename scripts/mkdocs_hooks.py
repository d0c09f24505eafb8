"""mkdocs hooks: the parts of the site that are generated, not written.

- the home page is README.md, its links to the site turned into links between pages;
- docs/providers.md's capability matrix is regenerated from the provider classes'
  ``capabilities`` (scripts/gen_provider_matrix.py), and followed by a table built from
  ``pysb providers --json`` and pysb's catalog of first-party packages: package, what it
  needs, whether root is needed, and what it filters on the network;
- docs/plugin-hooks.md is regenerated from pysb_core/hookspecs.py
  (scripts/gen_hook_docs.py).

So the site can never show a matrix or a hook list older than the code it is built from.
tests/test_docs.py builds the site with --strict and checks each generated part.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SITE_URL = "https://pysb-sandbox.github.io/pysb/"
REQUIREMENTS_TITLE = "### Packages, privileges and network"


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def home_page(readme: str) -> str:
    """README.md as the site's home page: links to the site become links to the pages."""
    return re.sub(
        re.escape(SITE_URL) + r"([a-z0-9-]+)/(#[\w-]+)?",
        lambda m: f"{m.group(1)}.md{m.group(2) or ''}",
        readme,
    )


def providers_json() -> list[dict[str, Any]]:
    """``pysb providers --json`` of the interpreter building the site."""
    out = subprocess.run(
        [sys.executable, "-m", "pysb_core", "providers", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return json.loads(out)


def network_cell(capabilities: set[str]) -> str:
    """What the OS layer of a provider filters on the network, from its capabilities."""
    if {"tcp-host", "udp-host"} <= capabilities:
        return "hosts, ports and directions, TCP and UDP"
    if "tcp-port" in capabilities:
        return "TCP ports only (hosts: Python layer)"
    return "nothing (Python layer only)"


def requirements_table(providers: list[dict[str, Any]], declared: dict[str, set[str]]) -> str:
    """One row per provider: from ``pysb providers --json`` (name, package, what this
    machine gets), the provider classes' ``capabilities`` (``declared``: what it filters
    where its mechanism is fully available) and the catalog (what the machine needs)."""
    from pysb_core.launch.catalog import FIRST_PARTY

    needs = {p.provider: p.needs for p in FIRST_PARTY if p.provider}
    root = {p.provider: p.root for p in FIRST_PARTY if p.provider}
    lines = [
        REQUIREMENTS_TITLE,
        "",
        "Generated when the site is built, from `pysb providers --json`, the provider "
        "classes' `capabilities` and pysb's catalog of first-party packages "
        "(`pysb_core/launch/catalog.py`). *root*: when pysb must run as root for the "
        "provider to enforce everything it can (only firejail's network rules). The last "
        "column is what "
        "the machine that built this site got: `pysb providers` tells what yours gets.",
        "",
        "| provider | package | needs | root | OS-level network filtering | on the build machine |",
        "|---|---|---|---|---|---|",
    ]
    for info in providers:
        name = info["name"]
        machine = needs.get(name, "nothing (part of pysb-core)" if name == "subprocess" else "?")
        network = network_cell(declared.get(name, set(info["enforces"])))
        if info["available"]:
            here = f"available; network: {network_cell(set(info['enforces']))}"
        else:
            here = "unavailable"
        lines.append(
            f"| [`{name}`](#{name}) | `{info['distribution']}` | {machine} "
            f"| {root.get(name, 'no')} | {network} "
            f"| {here} |"
        )
    return "\n".join(lines) + "\n"


def providers_page(markdown: str) -> str:
    matrix = _script("gen_provider_matrix")
    page = matrix.render(markdown)
    end = matrix.END
    if end not in page:
        return page
    before, after = page.split(end, 1)
    classes, _ = matrix.load_provider_classes()
    declared = {name: {str(c) for c in cls.capabilities} for name, cls in classes.items()}
    return before + end + "\n\n" + requirements_table(providers_json(), declared) + after


def hooks_page() -> str:
    return _script("gen_hook_docs").render()


# -- mkdocs hook functions ---------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    readme = (ROOT / "README.md").read_text()
    files.append(File.generated(config, "index.md", content=home_page(readme)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    path = page.file.src_uri
    if path == "providers.md":
        return providers_page(markdown)
    if path == "plugin-hooks.md":
        return hooks_page()
    return markdown
