"""Finding and loading providers: stevedore drivers in the ``pysb.providers`` group.

Only the provider the user names is imported, so an installed-but-broken backend cannot
break the others. Listing names uses entry-point metadata alone (no plugin import).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from pysb_core.errors import ProviderUnavailableError
from pysb_core.provider import Provider, ProviderStatus

GROUP = "pysb.providers"


@dataclass(frozen=True)
class ProviderInfo:
    """A provider as ``pysb providers`` shows it."""

    name: str
    distribution: str
    version: str
    status: ProviderStatus
    enforces: tuple[str, ...]
    description: str = ""


def provider_names() -> list[str]:
    """Installed provider names, from metadata only."""
    return sorted({ep.name for ep in entry_points(group=GROUP)})


def _distribution(name: str) -> tuple[str, str]:
    for ep in entry_points(group=GROUP):
        if ep.name == name and ep.dist is not None:
            return ep.dist.name, ep.dist.version
    return "?", "?"


def load_provider_class(name: str) -> type[Provider]:
    """Import the one provider class registered as ``name``."""
    names = provider_names()
    if name not in names:
        raise ProviderUnavailableError(
            f"unknown provider '{name}' (installed: {', '.join(names) or 'none'})",
            fix=f"pip install pysb-{name}",
        )
    from stevedore import driver  # imported lazily: only `run`/`providers` need it

    try:
        manager = driver.DriverManager(GROUP, name, invoke_on_load=False, on_load_failure_callback=None)
    except Exception as exc:
        dist, version = _distribution(name)
        cause = exc.__cause__ or exc
        raise ProviderUnavailableError(
            f"provider '{name}' ({dist} {version}) failed to load: {type(cause).__name__}: {cause}",
            fix=f"pip install --force-reinstall {dist}",
        ) from exc
    cls = manager.driver
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
    """Every installed provider with its availability probe (imports each one)."""
    out = []
    for name in provider_names():
        dist, version = _distribution(name)
        try:
            cls = load_provider_class(name)
            prov = cls({})
            status = prov.probe()
            enforces = tuple(sorted(str(c) for c in (prov.enforced() if status.available else cls.capabilities)))
            desc = cls.description
        except ProviderUnavailableError as exc:
            status = ProviderStatus.missing(exc.reason, fix=exc.fix)
            enforces, desc = (), ""
        except Exception as exc:  # a broken provider is reported, not fatal to the listing
            status = ProviderStatus.missing(f"probe failed: {type(exc).__name__}: {exc}")
            enforces, desc = (), ""
        out.append(ProviderInfo(name, dist, version, status, enforces, desc))
    return out
