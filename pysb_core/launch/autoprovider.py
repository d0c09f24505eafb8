"""The provider ``auto`` (the default): the strongest OS sandbox that can run this profile here.

``auto`` is not a provider of its own: it names, in a fixed order of strength, the first
first-party provider that is installed, can run on this machine and enforces every rule
of the profile (with the Python layer's help where it is on, as for a named provider).
The order and why (docs/providers.md#auto):

1. ``bwrap`` -- a root of its own built from nothing but the exposures, every namespace,
   capabilities dropped, a seccomp filter, the network rules in the kernel;
2. ``unshare`` -- the same namespaces and network filter, assembled by pysb from
   util-linux's ``unshare``;
3. ``landlock`` -- the interpreter restricts itself: files and TCP ports, but no
   ``ignore``, no host filter, no namespaces;
4. ``firejail`` -- a set-uid-root wrapper (the largest attack surface of the four: its
   escape history, docs/security.md), no network filter without a host bridge.

``qemu`` (seconds to start, a kernel image to install) runs only when named, and so do
third-party providers. ``subprocess`` (no OS boundary) is never chosen: when nothing
qualifies the run is refused (exit 125) with what to install, and ``--provider
subprocess`` is how a user accepts the Python guards alone.

Cheap when the first provider qualifies: providers are imported one at a time, in order,
and a provider's probe is usually a cache hit (:mod:`pysb_core.launch.probecache`).
"""

from __future__ import annotations

from pysb_core.errors import ProviderUnavailableError
from pysb_core.launch.drivers import (
    first_party_distribution,
    first_party_needs,
    load_provider_class,
    provider_names,
)

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from pysb_core.check import CheckReport
    from pysb_core.provider import Provider

#: Strongest first (the module docstring says why).
ORDER = ("bwrap", "unshare", "landlock", "firejail")
#: How the refusal names the explicit way to run without an OS boundary.
SUBPROCESS_HINT = (
    "to accept the Python guards alone, with no OS boundary, name the provider: "
    "--provider subprocess (provider='subprocess' in partial mode)"
)


class AutoChoice:
    """The provider ``auto`` chose, its check report, and the providers it passed over."""

    __slots__ = ("provider", "report", "skipped")

    def __init__(self, provider: Provider, report: CheckReport, skipped: list[str]) -> None:
        self.provider = provider
        self.report = report
        self.skipped = skipped

    def why(self) -> str:
        """One sentence: what was chosen, by which rule, and what was skipped and why."""
        text = (
            f"provider '{self.provider.name}' chosen by 'auto' (the first of "
            f"{', '.join(ORDER)} that is installed, runs here and enforces this profile)"
        )
        return text + (f"; skipped: {'; '.join(self.skipped)}" if self.skipped else "")


def _install_text(name: str) -> str:
    """``pip install pysb-bwrap (needs ...)``: what makes provider ``name`` installed."""
    needs = first_party_needs(name)
    package = first_party_distribution(name) or f"pysb-{name}"
    return f"pip install {package}" + (f" (it needs {needs})" if needs else "")


def _unenforced_text(report: CheckReport) -> str:
    missing = report.unenforced()
    first = missing[0]
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    return f"does not enforce '{first.rule}' ({first.source}){more}"


def choose(
    options: Mapping[str, Mapping[str, Any]],
    trial: Callable[[Provider], CheckReport],
) -> AutoChoice:
    """The first provider of :data:`ORDER` that qualifies; raise
    :class:`ProviderUnavailableError` (exit 125) naming every one and what to install.

    ``options``: the profile's ``providers:`` options by name (validated when loaded).
    ``trial(provider)``: the check report of the profile under ``provider`` (the same
    decision a named provider gets); a provider with an unenforced rule is passed over.
    A provider that is installed but broken (fails to load, registered twice, written for
    another provider kit) refuses the run: a broken install is fixed, not worked around.
    """
    skipped: list[str] = []
    fixes: list[str] = []
    installed = provider_names()
    for name in ORDER:
        if name not in installed:
            skipped.append(f"{name}: not installed")
            fixes.append(_install_text(name))
            continue
        cls = load_provider_class(name)
        try:
            provider = cls(options.get(name) or {})
            status = provider.probe()
        except Exception as exc:  # a provider's own bug: fail closed, name who to blame
            raise ProviderUnavailableError(
                f"provider '{name}' failed while checking this machine: "
                f"{type(exc).__name__}: {exc}",
                fix=f"report it to the maintainers of {first_party_distribution(name)}",
            ) from exc
        if not status.available:
            skipped.append(f"{name}: cannot run here: {status.reason}")
            if status.fix:
                fixes.append(status.fix)
            continue
        report = trial(provider)
        if report.unenforced():
            skipped.append(f"{name}: {_unenforced_text(report)}")
            continue
        return AutoChoice(provider, report, skipped)
    lines = [
        f"no OS sandbox can run this profile here (provider 'auto' tries {', '.join(ORDER)}):",
        *(f"  {s}" for s in skipped),
        SUBPROCESS_HINT,
    ]
    fix = "; or ".join(dict.fromkeys(fixes)) if fixes else "see pysb providers"
    raise ProviderUnavailableError("\n".join(lines), fix=fix)
