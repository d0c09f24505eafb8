"""Report which rules the chosen provider enforces at the OS level (``pysb check``).

Guard families add the ``python`` layer for their own rules; this plugin lists every
rule of the policy with ``os`` when the provider's enforced capabilities cover it, and
with nothing otherwise, so that a rule with no enforcing layer is never silently missed.
"""

from __future__ import annotations

from pysb_core._startup.markers import hookimpl
from pysb_core.check import DEFAULT_SOURCE
from pysb_core.provider import Capability as C

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from pysb_core.check import CheckReport
    from pysb_core.policy import NetworkRule, Policy
    from pysb_core.provider import Provider


def network_rule_enforced(rule: NetworkRule, caps: frozenset[C]) -> bool:
    """Whether an OS layer with ``caps`` can enforce ``rule`` exactly.

    A rule on every address needs port filtering (or host filtering, which implies it);
    a rule on specific addresses or names needs host filtering.
    """
    any_host = rule.network in ("*", "0.0.0.0/0", "::/0")
    for proto in rule.protocols:
        host_cap, port_cap = (
            (C.TCP_HOST, C.TCP_PORT) if proto == "tcp" else (C.UDP_HOST, C.UDP_PORT)
        )
        if host_cap in caps:
            continue
        if any_host and port_cap in caps:
            continue
        return False
    return True


def limit_text(key: str, value: float) -> str:
    """A limit as a person writes it: ``512M``, ``30s``."""
    if key in ("memory", "tmp"):
        for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
            if value % size == 0:
                return f"{int(value) // size}{unit}"
        return f"{int(value)}"
    if key in ("cpu_time", "wall_time"):
        return f"{value:g}s"
    return str(value)


@hookimpl(trylast=True)
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    caps = provider.enforced() if provider is not None else frozenset()

    def add(family: str, text: str, source: str, os_ok: bool) -> None:
        layers = ["python"] if family in report.python_families else []
        report.add(text, source, [*layers, "os"] if os_ok else layers, family)

    for e in policy.exposures:
        if e.implicit:
            continue
        kind = "expose-rw" if e.writable else "expose-ro"
        text = f"files: {kind}: {e.path}" + (f":{e.target}" if e.renamed else "")
        ok = C.FILES in caps and (not e.writable or C.FILES_WRITE in caps)
        add("files", text, e.source, ok and (not e.renamed or C.RENAME in caps))
    for ig in policy.ignore:
        add("files", f"files: ignore: {ig.pattern}", ig.source, C.IGNORE in caps)
    for rule in policy.network:
        add("network", f"network: {rule}", rule.source, network_rule_enforced(rule, caps))
    for name in sorted(policy.env):
        add("env", f"env: {name}", policy.env_sources.get(name, "<profile>"), C.ENV in caps)
    limits = policy.limits
    for key in ("memory", "processes", "open_files", "cpu_time", "wall_time", "tmp"):
        value = getattr(limits, key)
        if value is None:
            continue
        name = key.replace("_", "-")
        # wall-time is enforced by pysb's own parent process, outside the sandbox; tmp by
        # the provider's tmpfs size or by pysb's parent watching (pysb_core.launch.tmpwatch).
        add(
            "limits",
            f"limits: {name}: {limit_text(key, value)}",
            limits.sources.get(name, "<profile>"),
            key in ("wall_time", "tmp") or C.LIMITS in caps,
        )
    # imports and api are the Python layer's alone. Their deny-by-default is reported too
    # (with the text the guards use, so the rows merge when they are installed), from
    # DEFAULT_SOURCE: the user did not write it, so a run is not refused when nothing enforces it.
    if policy.imports is not None:
        add(
            "imports",
            f"imports: {', '.join(policy.imports)}",
            policy.imports_source or "<profile>",
            False,
        )
    else:
        add("imports", "imports: (none: only the interpreter's own modules)", DEFAULT_SOURCE, False)
    for api_rule in policy.api:
        add("api", f"api: {api_rule.action}: {api_rule.target}", api_rule.source, False)
    if not policy.api:
        add("api", "api: (none: every registered function denied)", DEFAULT_SOURCE, False)
