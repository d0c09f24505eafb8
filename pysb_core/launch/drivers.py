"""Finding and loading providers: stevedore drivers in the ``pysb.providers`` group.

Only the provider the user names is imported, so an installed-but-broken backend cannot
break the others. Listing names uses entry-point metadata alone (no plugin import).
"""

from __future__ import annotations

from pysb_core._startup.entrypoints import EntryPoint
from pysb_core._startup.records import Record, record
from pysb_core.errors import ProviderUnavailableError
from pysb_core.launch.entrycache import entry_points
from pysb_core.provider import Provider, ProviderStatus

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


def _claims(name: str) -> list[EntryPoint]:
    """The entry points that register provider ``name`` (one per distribution)."""
    return [ep for ep in entry_points(GROUP) if ep.name == name]


def provider_distribution(name: str) -> tuple[str, str]:
    """``(distribution, version)`` that registers provider ``name`` (``?`` when none)."""
    for ep in _claims(name):
        return ep.dist_name, ep.dist_version
    return "?", "?"


def first_party_distribution(name: str) -> str | None:
    """``pysb-NAME`` when NAME is one of pysb's own providers (a name pysb can vouch for)."""
    from pysb_core.launch.catalog import FIRST_PARTY

    return next((p.distribution for p in FIRST_PARTY if p.provider == name), None)


def first_party_needs(name: str) -> str:
    """What pysb's own provider NAME needs from the machine besides its package ("" when
    NAME is not one of them)."""
    from pysb_core.launch.catalog import FIRST_PARTY

    return next((p.needs for p in FIRST_PARTY if p.provider == name), "")


def unknown_provider(name: str, installed: list[str]) -> ProviderUnavailableError:
    """The error for a provider name nothing installed registers.

    A close installed name is suggested. An install command is offered only for pysb's
    own provider packages: ``pip install pysb-<typo>`` would install whatever someone
    registered under the misspelt name.
    """
    import difflib

    close = difflib.get_close_matches(name, installed, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    package = first_party_distribution(name)
    return ProviderUnavailableError(
        f"unknown provider '{name}'{hint} (installed: {', '.join(installed) or 'none'}; "
        "see pysb providers)",
        fix=f"pip install {package}" if package else None,
    )


def _one_claim(name: str) -> EntryPoint:
    """The entry point of provider ``name``; refused when none or several claim it."""
    claims = _claims(name)
    if not claims:
        raise unknown_provider(name, provider_names())
    if len(claims) > 1:
        raise ProviderUnavailableError(
            f"provider '{name}' is registered by {len(claims)} distributions: "
            + ", ".join(f"{ep.dist_name} {ep.dist_version} ({ep.value})" for ep in claims)
            + "; pysb will not guess which one to trust",
            fix="uninstall the one you did not mean to install (pip uninstall DIST)",
        )
    return claims[0]


def provider_class(name: str, obj: object, dist: str) -> type[Provider]:
    """``obj`` (what entry point ``name`` loaded) if it is a Provider class named ``name``.

    The one check ``pysb run`` and ``pysb providers`` both apply to a loaded provider.
    """
    if not (isinstance(obj, type) and issubclass(obj, Provider)):
        raise ProviderUnavailableError(
            f"entry point '{name}' of {dist} in {GROUP} is not a pysb Provider class: {obj!r}"
        )
    if obj.name != name:
        raise ProviderUnavailableError(
            f"provider class {obj.__module__}.{obj.__qualname__} of {dist} is named "
            f"'{obj.name}' but registered as '{name}'; the two must be equal"
        )
    _refuse_other_kit(name, obj, dist)
    return obj


def _refuse_other_kit(name: str, cls: type[Provider], dist: str) -> None:
    """Refuse a provider written for a provider kit this pysb does not offer
    (``PYSB_PROVIDERKIT`` in the module that defines the class)."""
    import sys

    from pysb_core import kitversion, providerkit

    why = kitversion.refusal(
        sys.modules.get(cls.__module__),
        providerkit.DECLARATION,
        providerkit.KIT_VERSION,
        f"provider '{name}' ({dist})",
    )
    if why is not None:
        raise ProviderUnavailableError(why, fix=f"pip install --upgrade {dist.split()[0]}")


def load_provider_class(name: str) -> type[Provider]:
    """Import the one provider class registered as ``name``."""
    ep = _one_claim(name)
    dist = f"{ep.dist_name} {ep.dist_version}"
    try:
        obj = ep.load()
    except Exception as exc:
        raise ProviderUnavailableError(
            f"provider '{name}' ({dist}) failed to load: {type(exc).__name__}: {exc}",
            fix=f"pip install --force-reinstall {ep.dist_name}",
        ) from exc
    return provider_class(name, obj, dist)


def load_provider(name: str, options: Mapping[str, Any] | None = None) -> Provider:
    """Load and instantiate ``name``; raise ProviderUnavailableError if it cannot run here."""
    cls = load_provider_class(name)
    try:
        provider = cls(options)
        status = provider.probe()
    except Exception as exc:  # a provider's own bug: fail closed, name who to blame
        dist, version = provider_distribution(name)
        raise ProviderUnavailableError(
            f"provider '{name}' ({dist} {version}) failed while checking this machine: "
            f"{type(exc).__name__}: {exc}",
            fix=f"report it to the maintainers of {dist}; run with --debug for the traceback",
        ) from exc
    if not status.available:
        raise ProviderUnavailableError(
            f"provider '{name}' cannot run on this machine: {status.reason}", fix=status.fix
        )
    return provider


def describe_providers() -> list[ProviderInfo]:
    """Every installed provider with its availability probe.

    Loaded through a stevedore ExtensionManager: each driver is imported in isolation and
    a broken one is reported (with its error) instead of breaking the listing. A loaded
    driver passes the same checks as in ``pysb run`` (:func:`provider_class`, one
    distribution per name), so the two never disagree on what is available.
    """
    from stevedore import ExtensionManager

    failures: dict[str, BaseException] = {}

    def failed(_manager: Any, ep: Any, exc: BaseException) -> None:
        failures[ep.name] = exc

    manager = ExtensionManager(GROUP, invoke_on_load=False, on_load_failure_callback=failed)
    loaded: dict[str, list[Any]] = {}
    for ext in manager:
        loaded.setdefault(ext.name, []).append(ext)
    out = []
    for name in sorted({*loaded, *failures, *provider_names()}):
        dist, version = provider_distribution(name)
        enforces: tuple[str, ...] = ()
        desc = ""
        try:
            claim = _one_claim(name)
            exts = loaded.get(name, [])
            if name in failures or not exts:
                exc = failures.get(name)
                raise ProviderUnavailableError(
                    f"failed to load: {type(exc).__name__}: {exc}" if exc else "failed to load",
                    fix=f"pip install --force-reinstall {dist}",
                )
            cls = provider_class(name, exts[0].plugin, f"{claim.dist_name} {claim.dist_version}")
        except ProviderUnavailableError as exc:
            out.append(
                ProviderInfo(
                    name, dist, version, ProviderStatus.missing(exc.reason, fix=exc.fix), ()
                )
            )
            continue
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
