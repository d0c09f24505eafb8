"""The import guard's ``_find_spec`` and loaders: the code it adds to the import system.

Named so on purpose: a code file name holding both ``importlib`` and ``_bootstrap`` is how
CPython's ``warnings`` (``Python/_warnings.c``'s ``is_internal_frame``, ``warnings.py``'s
``_is_internal_filename``, 3.11 to 3.13) knows the import system's frames, which it passes
over when it counts a warning's ``stacklevel``. These functions stand where the import
system's own code stands (``_find_spec`` asks the program's finders, the loader runs the
module's body), so a warning raised there with ``stacklevel=2`` names the importing line,
as without the guards, not this file (as the faces' and doors' code file names do:
``pysb_guards._seal.templates``' ``FACE_FILE``).

Plain code, not sealed: the program's finders, loaders and module bodies run below these
frames; the decisions they take are sealed (the faces handed to :func:`make_find_spec`).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def make_find_spec(
    decide: Callable[[str], Any],
    patch: Callable[[str, Any], None],
    taken: Callable[[str, Any], None],
    find: Callable[..., Any],
) -> Any:
    """The import guard's ``importlib._bootstrap._find_spec``: the import system calls it,
    by that global name, for every module it looks for (an ``import``, ``importlib``'s
    ``import_module``, ``util.find_spec`` and ``reload``, ``_gcd_import``).

    It decides first (``decide``, sealed: a refusal is raised, a module pysb set aside is
    handed back), then calls ``find``, CPython's own ``_find_spec``, which asks the finders
    of ``sys.meta_path`` in the program's order, and has the loader found run the patches
    registered for the module. The guard was a finder kept at the head of
    ``sys.meta_path``, put back there before every import: a program that inserted a
    finder of its own at index 0 and deleted index 0 afterwards (CPython's
    ``test_pkgutil``) deleted the guard's and kept its own. Now ``sys.meta_path`` is the
    program's alone, and its finders are asked only once the decision is taken.

    Plain code on purpose: the finders (or the path hooks behind them) may be the
    program's own objects, so no sealed frame may be below them.
    """
    import _frozen_importlib

    module_spec = _frozen_importlib.ModuleSpec

    def _find_spec(name: str, path: Any, target: Any = None) -> Any:
        action = decide(name)
        if action is not None:
            kind, module = action
            # importlib.reload(module) (a target): its code runs again, with its own loader
            # (a C module's exec does nothing a second time: _e_judge_exec)
            if kind == "stash" and target is None:
                return module_spec(name, _reinsert_loader(module, taken))  # type: ignore[arg-type]
        spec = find(name, path, target)
        if action is not None and spec is not None:
            # not the spec of a module already there (find gives its __spec__ back when
            # a parent's import loaded it meanwhile): that one has its patches
            loaded = sys.modules.get(name)
            if loaded is None or getattr(loaded, "__spec__", None) is not spec:
                loader = spec.loader
                if loader is not None and hasattr(loader, "exec_module"):
                    spec.loader = _patching_loader(loader, name, patch)
        return spec

    _find_spec.__module__ = "importlib._bootstrap"
    _find_spec.__doc__ = "Find a module's spec."
    return _find_spec


def _patching_loader(loader: Any, name: str, patch: Callable[[str, Any], None]) -> Any:
    """A loader that runs ``loader``, then the patches registered for the module (sealed).

    A ``SimpleNamespace``, not an instance of a class of ours: a class is reachable through
    the class graph, and a program that replaced its ``exec_module`` before importing
    ``socket`` would load the module without its patches. The namespace's type is built in
    (nothing to replace), its functions are closures over the real loader and the patch
    face, and once the module has run ``__loader__`` and ``__spec__.loader`` are the real
    loader again (what ``inspect``, ``linecache`` and ``importlib.resources`` read later).
    """
    real_create = getattr(loader, "create_module", None)
    real_exec = loader.exec_module

    def create_module(spec: Any) -> Any:
        return None if real_create is None else real_create(spec)

    def exec_module(module: Any) -> None:
        try:
            real_exec(module)
        finally:
            namespace = getattr(module, "__dict__", None)
            if type(namespace) is dict:
                if namespace.get("__loader__") is wrapper:
                    namespace["__loader__"] = loader
                spec = namespace.get("__spec__")
                if getattr(spec, "loader", None) is wrapper:
                    spec.loader = loader
        patch(name, module)

    wrapper = _SimpleNamespace(create_module=create_module, exec_module=exec_module)
    for attr in _LOADER_ATTRIBUTES:
        value = getattr(loader, attr, None)
        if value is not None:
            setattr(wrapper, attr, value)
    return wrapper


_SimpleNamespace = type(sys.implementation)  # types.SimpleNamespace, without importing types

#: What code run at import time may read from its own loader (resources, source, files).
_LOADER_ATTRIBUTES = (
    "name",
    "path",
    "get_filename",
    "get_data",
    "get_source",
    "get_code",
    "is_package",
    "get_resource_reader",
)


def _loader_codes() -> tuple[Any, ...]:
    sample = _patching_loader(_SimpleNamespace(exec_module=None), "", None)  # type: ignore[arg-type]
    return (sample.exec_module.__code__, sample.create_module.__code__)


PATCHING_LOADER_CODES = _loader_codes()


def _reinsert_loader(module: Any, taken: Callable[[str, Any], None]) -> Any:
    """The loader of a set-aside module's first import: ``create_module`` hands importlib
    the module itself and ``exec_module`` runs nothing, then gives the module back its own
    ``__spec__`` (importlib set this loader's there); ``__loader__`` stays the module's.
    With ``exec_module`` importlib warns of nothing (a loader without it is a legacy one:
    an ``ImportWarning``, which test suites turn into errors). Used once per module
    (``taken``): after that, the name is imported as CPython imports it.

    A ``SimpleNamespace`` of closures, as :func:`_patching_loader`: a class of ours would be
    reachable through the class graph, and its methods replaceable by the program."""
    own_spec = getattr(module, "__spec__", None)

    def create_module(spec: Any) -> Any:
        return module

    def exec_module(loaded: Any) -> None:
        namespace = getattr(loaded, "__dict__", None)
        if type(namespace) is dict and namespace.get("__spec__") is not own_spec:
            namespace["__spec__"] = own_spec
        name = getattr(own_spec, "name", None)
        taken(name if isinstance(name, str) else "", loaded)

    def load_module(fullname: str) -> Any:
        sys.modules[fullname] = module
        taken(fullname, module)
        return module

    return _SimpleNamespace(
        create_module=create_module, exec_module=exec_module, load_module=load_module
    )


def _reinsert_codes() -> tuple[Any, ...]:
    sample = _reinsert_loader(None, None)  # type: ignore[arg-type]
    return tuple(f.__code__ for f in (sample.create_module, sample.exec_module, sample.load_module))


REINSERT_LOADER_CODES = _reinsert_codes()
