"""The documentation keeps up with the code it describes."""

from __future__ import annotations

import inspect
from pathlib import Path

from pysb_core import hookspecs
from pysb_core.provider import Provider

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_hook_is_documented_with_its_signature() -> None:
    page = (DOCS / "plugin-hooks.md").read_text()
    hooks = [
        n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("pysb_")
    ]
    assert len(hooks) >= 10
    for name in hooks:
        sig = str(inspect.signature(getattr(hookspecs, name))).replace("'", "")
        assert f"`{name}{sig}`" in page, f"{name} is missing or outdated in docs/plugin-hooks.md"


def test_every_provider_method_is_documented() -> None:
    page = (DOCS / "writing-providers.md").read_text()
    public = [n for n, _ in inspect.getmembers(Provider) if not n.startswith("_")]
    for name in public:
        assert f"`{name}" in page, f"Provider.{name} is not documented in docs/writing-providers.md"
