"""The one lazy-export helper behind ``pysb_core`` and the kits (pysb_core._lazy)."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

import pysb_core
from pysb_core._lazy import lazy_exports


def test_a_name_is_imported_on_first_read_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    module = ModuleType("pysb_lazy_sample")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    public = ["is_within", "paths"]
    module.__getattr__, module.__dir__ = lazy_exports(  # type: ignore[attr-defined]
        module.__name__,
        {"is_within": "pysb_core.linux.paths:is_within", "paths": "pysb_core.linux.paths:"},
        public,
    )
    from pysb_core.linux import paths

    assert "is_within" not in vars(module)
    assert module.is_within is paths.is_within
    assert vars(module)["is_within"] is paths.is_within  # the next read is a plain attribute
    assert module.paths is paths  # "module:" names the module itself
    assert dir(module) == public
    with pytest.raises(AttributeError, match="module 'pysb_lazy_sample' has no attribute 'x'"):
        module.x  # noqa: B018


def test_pysb_core_itself_lists_and_resolves_its_public_names() -> None:
    assert dir(pysb_core) == sorted(pysb_core.__all__)
    for name in pysb_core.__all__:
        assert getattr(pysb_core, name) is not None, name
    with pytest.raises(AttributeError, match="module 'pysb_core' has no attribute 'nosuch'"):
        pysb_core.nosuch  # type: ignore[attr-defined]  # noqa: B018


def test_importing_pysb_core_loads_only_the_helper() -> None:
    code = "import sys, pysb_core; print(sorted(m for m in sys.modules if 'pysb' in m))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "['pysb_core', 'pysb_core._lazy']"
