"""pysb-proxy's hooks: the ``egress:`` and ``secrets:`` sections, the proxy's life, check.

This module is the ``proxy`` entry point of the ``pysb.plugins`` group, so every ``pysb
run`` on the host imports it: it imports nothing else until a profile has an ``egress:``
or ``secrets:`` section (then the rules, h11 and, for interception, cryptography).
"""

from __future__ import annotations

from pysb_core.guardkit import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds at every start
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from pysb_core.guardkit import (
        CheckReport,
        Event,
        HostService,
        LaunchPlan,
        LearnedProfile,
        Policy,
        ProfileSchema,
        Provider,
    )
    from pysb_proxy.server import EgressProxy

#: The guard kit this plugin is written against (kit 1.1: ``HostService``).
PYSB_GUARDKIT = "1.2"
SERVICE = "pysb-proxy"
GUARD = "egress"

#: Every proxy this process started, by the port its service rule names.
_PROXIES: dict[int, EgressProxy] = {}


@hookimpl
def pysb_add_profile_keys(schema: ProfileSchema) -> None:
    schema.add_section("egress")
    schema.add_validator("egress", _validate_egress)
    # The values are credentials: the sandboxed interpreter's policy never holds them.
    schema.add_section("secrets", host_only=True)
    schema.add_validator("secrets", _validate_secrets)


def _validate_egress(value: Any, location: str) -> list[str]:
    """Called only for a profile that has the section: the grammar loads then."""
    from pysb_proxy.profile import validate_egress

    return validate_egress(value, location)


def _validate_secrets(value: Any, location: str) -> list[str]:
    from pysb_proxy.profile import validate_secrets

    return validate_secrets(value, location)


def wanted(policy: Policy) -> bool:
    """A run has a proxy when its profile has an ``egress:`` or ``secrets:`` section."""
    return "egress" in policy.extra or "secrets" in policy.extra


@hookimpl
def pysb_host_services(policy: Policy, emit: Callable[[Event], None]) -> list[HostService] | None:
    if not wanted(policy):
        return None
    from pysb_core.guardkit import HostService
    from pysb_proxy.profile import build_proxy, secret_entries, secret_holders

    proxy = build_proxy(policy, emit)
    _PROXIES[proxy.port] = proxy
    secrets = [value for *_, value in secret_entries(policy)]
    return [
        HostService(
            SERVICE,
            proxy.port,
            "the egress proxy (egress: rules)",
            withhold_env=tuple(secret_holders(policy.env, secrets)),
        )
    ]


def proxy_of(policy: Policy) -> EgressProxy | None:
    """The proxy whose service rule the policy holds."""
    for rule in policy.network:
        if rule.source == f"<{SERVICE}>":
            return _PROXIES.get(rule.ports[0].low)
    return None


@hookimpl
def pysb_contribute(policy: Policy, plan: LaunchPlan) -> None:
    proxy = proxy_of(policy)
    if proxy is None:
        return
    from pysb_core.guardkit import ChildSetup
    from pysb_proxy.profile import child_environment
    from pysb_proxy.server import TOKEN

    proxy.acquire()
    plan.add_cleanup(proxy.release)
    env = child_environment(policy, proxy, plan)
    plan.env.update(env)
    # Inside, the proxy's 403 becomes a NetworkDeniedError (pysb_proxy.child).
    args = {"host": "127.0.0.1", "port": proxy.port, "token": TOKEN}
    plan.add_child_setup(ChildSetup("pysb_proxy.child", "install_refusals", args))
    if proxy.interceptor is not None:  # certifi.where() names the bundle with the run's CA
        bundle = {"bundle": env["SSL_CERT_FILE"]}
        plan.add_child_setup(ChildSetup("pysb_proxy.child", "trust_bundle", bundle))


@hookimpl
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    if not wanted(policy):
        return
    from pysb_proxy.profile import check_lines

    for text, source in check_lines(policy):
        report.add(text, source, ["proxy"], family=GUARD)
    report.note(route_note(provider, report))


def route_note(provider: Provider | None, report: CheckReport) -> str:
    """Which layers keep the sandbox on its one route out, to the proxy (issue 31: which
    layer enforces each egress rule): the proxy judges every URL, but a connection that
    goes around it meets only the layers that enforce the proxy's network rule."""
    from pysb_core import Capability

    caps = provider.enforced() if provider is not None else frozenset()
    layers = ["python"] if report.python_guards and "network" in report.python_families else []
    if Capability.TCP_HOST in caps:
        layers.append("os")
    name = provider.name if provider is not None else "none"
    head = (
        "egress: each rule is enforced by the proxy on the host (layer proxy); a connection "
        "around the proxy is refused by the layers of its network rule (sourced "
        f"<{SERVICE}>): "
    )
    if layers == ["python", "os"]:
        return head + "python and os"
    if layers == ["os"]:
        return head + "os alone (no Python layer)"
    if layers == ["python"]:
        return head + (
            f"python alone: the {name} provider does not filter connections by address, so "
            "the OS does not hold code that gets past the Python guards (native code, "
            "another program) to the proxy"
        )
    return head + "none: nothing keeps the sandbox from going around the proxy"


@hookimpl
def pysb_learned(records: Sequence[Event], profile: LearnedProfile) -> None:
    from pysb_proxy.learn import learned_rules

    for rule in learned_rules(records):
        profile.add("egress", None, rule)
