"""Finding and loading providers: stevedore drivers in the ``pysb.providers`` group.

Only the provider the user names is imported, so an installed-but-broken backend cannot
break the others. Listing names uses entry-point metadata alone (no plugin import).
"""

from __future__ import annotations

from pysb_core.entrypoints import entry_points
from pysb_core.errors import ProviderUnavailableError
from pysb_core.provider import Provider, ProviderStatus
from pysb_core.records import Record, record

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

GROUP = "pysb.providers"


@record
class ProviderInfo(Record):
    """A provider as ``pysb providers`` shows it."""

    name: str
    distribution: str
    version: str
    status: ProviderStatus
    enforces: tuple[str, ...]
    description: str = ""


def provider_names() -> list[str]:
    """Installed provider names, from metadata only."""
    return sorted({ep.name for ep in entry_points(GROUP)})


def _distribution(name: str) -> tuple[str, str]:
    for ep in entry_points(GROUP):
        if ep.name == name:
            return ep.dist_name, ep.dist_version
    return "?", "?"


def load_provider_class(name: str) -> type[Provider]:
    """Import the one provider class registered as ``name``."""
    names = provider_names()
    if name not in names:
        raise ProviderUnavailableError(
            f"unknown provider '{name}' (installed: {', '.join(names) or 'none'})",
            fix=f"pip install pysb-{name}",
        )
    ep = next(e for e in entry_points(GROUP) if e.name == name)
    try:
        cls = ep.load()
    except Exception as exc:
        raise ProviderUnavailableError(
            f"provider '{name}' ({ep.dist_name} {ep.dist_version}) failed to load: "
            f"{type(exc).__name__}: {exc}",
            fix=f"pip install --force-reinstall {ep.dist_name}",
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ProviderUnavailableError(
            f"entry point '{name}' in {GROUP} is not a pysb Provider class: {cls!r}"
        )
    if cls.name != name:
        raise ProviderUnavailableError(
            f"provider class {cls.__module__}.{cls.__qualname__} is named '{cls.name}' "
            f"but registered as '{name}'; the two must be equal"
        )
    return cls


def load_provider(name: str, options: Mapping[str, Any] | None = None) -> Provider:
    """Load and instantiate ``name``; raise ProviderUnavailableError if it cannot run here."""
    provider = load_provider_class(name)(options)
    status = provider.probe()
    if not status.available:
        raise ProviderUnavailableError(
            f"provider '{name}' cannot run on this machine: {status.reason}", fix=status.fix
        )
    return provider


def describe_providers() -> list[ProviderInfo]:
    """Every installed provider with its availability probe.

    Loaded through a stevedore ExtensionManager: each driver is imported in isolation and
    a broken one is reported (with its error) instead of breaking the listing.
    """
    from stevedore import ExtensionManager

    failures: dict[str, BaseException] = {}

    def failed(_manager: Any, ep: Any, exc: BaseException) -> None:
        failures[ep.name] = exc

    manager = ExtensionManager(GROUP, invoke_on_load=False, on_load_failure_callback=failed)
    loaded = {ext.name: ext.plugin for ext in manager}
    out = []
    for name in sorted({*loaded, *failures, *provider_names()}):
        dist, version = _distribution(name)
        cls = loaded.get(name)
        enforces: tuple[str, ...] = ()
        desc = ""
        if cls is None or not (isinstance(cls, type) and issubclass(cls, Provider)):
            exc = failures.get(name)
            reason = (
                f"failed to load: {type(exc).__name__}: {exc}" if exc else "not a Provider class"
            )
            status = ProviderStatus.missing(reason, fix=f"pip install --force-reinstall {dist}")
        else:
            desc = cls.description
            try:
                prov = cls({})
                status = prov.probe()
                caps = prov.enforced() if status.available else cls.capabilities
                enforces = tuple(sorted(str(c) for c in caps))
            except Exception as exc:  # a broken probe is reported, not fatal to the listing
                status = ProviderStatus.missing(f"probe failed: {type(exc).__name__}: {exc}")
        out.append(ProviderInfo(name, dist, version, status, enforces, desc))
    return out
