"""Inside the sandbox: run a patch on a module when the program imports it, not before.

Why: the child set-up (:mod:`pysb_proxy.child`) adapts third-party clients (``httpx``) that
most programs never import; importing them at start would cost every run their import time
and load code the profile's ``imports:`` may not even allow. A meta-path finder sees the
import, lets the other finders find the module, and wraps the loader so that the patch runs
right after the module's code, before the importer gets it.

This is a convenience, not a guard: the proxy on the host enforces every rule whatever the
program does to this finder. It serves runs without the import guard (``--no-python-guards``):
with it, :func:`pysb_proxy.child.when_imported` registers the patches with the guard's own
``on_import`` instead, which also patches a module the guard set aside at its install.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # runs in the sandbox: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_SimpleNamespace = type(sys.implementation)  # types.SimpleNamespace, without importing types

#: What code run at import time may read from its own loader (resources, source, files).
_LOADER_ATTRIBUTES = (
    "name",
    "path",
    "archive",
    "prefix",
    "get_resource_reader",
    "get_data",
    "get_filename",
    "get_source",
    "get_code",
    "is_package",
    "files",
)


def after_import(name: str, patch: Callable[[Any], None]) -> None:
    """Call ``patch(module)`` each time module ``name`` is executed (now if it is loaded)."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
    sys.meta_path.insert(0, _Finder(name, patch))


class _Finder:
    """The finder for one module name; any other name is not its business (None)."""

    def __init__(self, name: str, patch: Callable[[Any], None]) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        meta_path = list(sys.meta_path)
        later = meta_path[meta_path.index(self) + 1 :] if self in meta_path else meta_path
        for finder in later:  # only those after this one: a finder before it already declined
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _patching_loader(spec.loader, self.patch)
                return spec
        return None


def _patching_loader(loader: Any, patch: Callable[[Any], None]) -> Any:
    """A loader that runs ``loader``, then ``patch``; once the module has run, its
    ``__loader__`` and ``__spec__.loader`` are the real loader again (what ``inspect``,
    ``linecache`` and ``importlib.resources`` read later)."""
    real_create = getattr(loader, "create_module", None)
    real_exec = loader.exec_module

    def create_module(spec: Any) -> Any:
        return None if real_create is None else real_create(spec)

    def exec_module(module: Any) -> None:
        try:
            real_exec(module)
        finally:
            if getattr(module, "__loader__", None) is wrapper:
                module.__loader__ = loader
            spec = getattr(module, "__spec__", None)
            if getattr(spec, "loader", None) is wrapper:
                spec.loader = loader
        patch(module)

    wrapper = _SimpleNamespace(create_module=create_module, exec_module=exec_module)
    for attr in _LOADER_ATTRIBUTES:
        value = getattr(loader, attr, None)
        if value is not None:
            setattr(wrapper, attr, value)
    return wrapper
