"""Network rules: the grammar of one ``network:`` line and the decision it leads to.

One module serves three readers, so that they can never disagree about what a rule means:
the profile loader (:func:`parse_rule`), the Python network guard (:class:`NetworkMatcher`,
run on every ``connect``/``bind``) and the OS providers (which compile the same rules and the
same pins into their packet filters).

Semantics (SPEC §4): default deny; a matching ``deny`` beats any ``allow`` whatever the line
order; an IPv4 address written as IPv6 (``::ffff:a.b.c.d``) is judged as IPv4; a host-name rule
matches the addresses the name was pinned to before launch; a connection to a name is allowed
only if every address of the name is allowed.

The sandboxed interpreter does not import this module: its network guard decides with
:class:`pysb_core.policy.netmatch.Matcher`, which gives the same answers without :mod:`ipaddress`
(tests/test_netmatch.py compares the two). This module stays the reference; it still imports
nothing heavier than :mod:`ipaddress` at import time (not ``socket`` or ``re``) and never
touches the network itself.
"""

from __future__ import annotations

import ipaddress

from pysb_core.linux.sysfiles import hosts_file_text  # re-exported: it needs no ipaddress
from pysb_core.policy import NetworkRule, PortRange
from pysb_core.policy.hostnames import IPAddress, check_hostname, is_hostname, numeric_host
from pysb_core.policy.netmatch import Matcher, normalize_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

__all__ = [
    "NetworkMatcher",
    "canonical_ip",
    "hosts_file_text",
    "is_hostname",
    "normalize_host",
    "numeric_host",
    "parse_rule",
    "pin_hosts",
    "rule_networks",
]

ALL_PORTS = PortRange(0, 65535)
_PROTOCOLS = {
    "tcp": ("tcp",),
    "udp": ("udp",),
    "any": ("tcp", "udp"),
    "*": ("tcp", "udp"),
}
_DIRECTIONS = {"in": "in", "out": "out", "any": "any", "*": "any"}
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
# IPv6 forms that carry an IPv4 address but are not the kernel's mapped form: the IPv4-translated
# prefix, the NAT64 well-known prefix and the deprecated IPv4-compatible form.
_EMBEDDING = (
    ipaddress.ip_network("::ffff:0:0:0/96"),
    ipaddress.ip_network("64:ff9b::/96"),
    ipaddress.ip_network("::/96"),
)


# ---------------------------------------------------------------------------------------
# Names and addresses
# ---------------------------------------------------------------------------------------


def canonical_ip(address: str | IPAddress) -> IPAddress:
    """Parse ``address`` and turn an IPv4-mapped IPv6 address into the IPv4 one."""
    ip = address if not isinstance(address, str) else numeric_host(address)
    if ip is None:
        raise ValueError(f"'{address}' is not an IP address")
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _embedded_v4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address hidden in a translated, NAT64 or compatible IPv6 address."""
    if ip.version != 6:
        return None
    for net in _EMBEDDING:
        if ip in net:
            low = int(ip) & 0xFFFFFFFF
            if net.prefixlen == 96 and int(net.network_address) == 0 and low <= 1:
                return None  # :: and ::1 are not IPv4-compatible addresses
            return ipaddress.IPv4Address(low)
    return None


# ---------------------------------------------------------------------------------------
# Grammar
# ---------------------------------------------------------------------------------------

_USAGE = "expected 'ACTION PROTO NETWORK PORTS DIRECTION', e.g. 'allow tcp api.example.com 443 out'"


def _parse_protocols(text: str) -> tuple[str, ...]:
    t = text.lower()
    if t in _PROTOCOLS:
        return _PROTOCOLS[t]
    parts = t.split(",")
    if not all(p in ("tcp", "udp") for p in parts):
        raise ValueError(f"unknown protocol '{text}': use tcp, udp, tcp,udp or any")
    return tuple(p for p in ("tcp", "udp") if p in parts)


def _parse_port(text: str, whole: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"invalid port '{text}' in '{whole}': ports are numbers 0-65535")
    port = int(text)
    if port > 65535:
        raise ValueError(f"port {port} is out of range 0-65535")
    return port


def _parse_ports(text: str) -> tuple[PortRange, ...]:
    if text == "*":
        return (ALL_PORTS,)
    out: list[PortRange] = []
    for item in text.split(","):
        if item == "":
            raise ValueError(f"empty port in '{text}': use *, N, N-M, N- or a comma list")
        if "-" in item:
            low_text, _, high_text = item.partition("-")
            low = _parse_port(low_text, text)
            high = _parse_port(high_text, text) if high_text else 65535
            if high < low:
                raise ValueError(f"reversed port range '{item}' (write {high}-{low})")
            out.append(PortRange(low, high))
        else:
            port = _parse_port(item, text)
            out.append(PortRange(port, port))
    return tuple(out)


def _parse_network(text: str) -> str:
    if text == "*":
        return "*"
    if "%" in text:
        raise ValueError(f"'{text}': IPv6 scope ids are not supported in rules")
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if "/" in bare:
        try:
            net = ipaddress.ip_network(bare, strict=False)
        except ValueError:
            raise ValueError(f"'{text}' is not a valid CIDR network") from None
        if isinstance(net, ipaddress.IPv6Network) and net.subnet_of(_MAPPED):  # IPv4 as IPv6
            return str(_mapped_to_v4(net))
        return str(net)
    try:
        return str(canonical_ip(ipaddress.ip_address(bare)))
    except ValueError:
        pass
    if numeric_host(bare) is not None:
        raise ValueError(
            f"'{text}' is a numeric address in a legacy form: write it as {numeric_host(bare)}"
        )
    if ":" in bare:
        raise ValueError(f"'{text}' is not a valid IPv6 address")
    return check_hostname(bare)


def parse_rule(text: str, source: str = "<cli>") -> NetworkRule:
    """Parse one ``ACTION PROTO NETWORK PORTS DIRECTION`` line.

    Raises ``ValueError`` with a message meant for the user (the profile loader prefixes it
    with ``FILE:LINE:``). Keywords are case-insensitive; host names are stored in lower case.
    """
    if not isinstance(text, str):
        raise ValueError(f"a network rule must be a string, not {type(text).__name__}; {_USAGE}")
    fields = text.split()
    if len(fields) != 5:
        hint = ""
        if len(fields) > 5 and any(f.endswith(",") or f.startswith(",") for f in fields):
            hint = " (no spaces inside a comma list)"
        raise ValueError(
            f"invalid network rule '{text.strip()}': {len(fields)} fields{hint}; {_USAGE}"
        )
    action_text, proto_text, network_text, ports_text, direction_text = fields
    action = action_text.lower()
    if action not in ("allow", "deny"):
        raise ValueError(f"invalid action '{action_text}' in '{text.strip()}': use allow or deny")
    protocols = _parse_protocols(proto_text)
    network = _parse_network(network_text)
    ports = _parse_ports(ports_text)
    direction = _DIRECTIONS.get(direction_text.lower())
    if direction is None:
        raise ValueError(
            f"invalid direction '{direction_text}' in '{text.strip()}': use out, in or any"
        )
    canonical = " ".join((action, proto_text.lower(), network, ports_text, direction_text.lower()))
    return NetworkRule(
        action=action,  # type: ignore[arg-type]
        protocols=protocols,
        network=network,
        ports=ports,
        direction=direction,  # type: ignore[arg-type]
        source=source,
        text=canonical,
    )


# ---------------------------------------------------------------------------------------
# Decisions
# ---------------------------------------------------------------------------------------


def rule_networks(rule: NetworkRule, pins: Mapping[str, Sequence[str]]) -> tuple[IPNetwork, ...]:
    """The address sets a rule covers, IPv4-mapped IPv6 networks turned into IPv4 ones.

    ``*`` is every IPv4 and IPv6 address; a host name is its pinned addresses (none when
    it did not resolve). The packet filters compile from this too (:mod:`pysb_core.net.netfilter`).
    """
    if rule.network == "*":
        return (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
    if "/" in rule.network or numeric_host(rule.network) is not None:
        nets = [ipaddress.ip_network(rule.network, strict=False)]
    else:  # a host name: the pinned addresses, nothing when it did not resolve
        nets = [
            ipaddress.ip_network(canonical_ip(a))
            for a in pins.get(normalize_host(rule.network), ())
        ]
    return tuple(
        _mapped_to_v4(n) if isinstance(n, ipaddress.IPv6Network) and n.subnet_of(_MAPPED) else n
        for n in nets
    )


def _mapped_to_v4(net: ipaddress.IPv6Network) -> ipaddress.IPv4Network:
    """``::ffff:a.b.c.d/N`` (N >= 96) as the IPv4 network it means."""
    return ipaddress.IPv4Network((int(net.network_address) & 0xFFFFFFFF, net.prefixlen - 96))


def _matches(nets: tuple[IPNetwork, ...], ip: IPAddress) -> bool:
    return any(ip in n for n in nets if n.version == ip.version)


def _text(address: Any) -> str:
    return str(canonical_ip(address))


def reference_algebra() -> dict[str, Any]:
    """:func:`pysb_core.policy.netmatch.compile_matcher`'s algebra with :mod:`ipaddress` objects."""
    return {
        "ip": canonical_ip,
        "text": _text,
        "literal": numeric_host,
        "literal_text": str,
        "embedded": _embedded_v4,
        "wide": _is_wide,
        "networks": rule_networks,
        "matches": _matches,
    }


Decision = tuple[bool, "NetworkRule | None"]


class NetworkMatcher(Matcher):
    """The reference matcher: :mod:`pysb_core.policy.netmatch`'s decisions, with addresses and
    networks as :mod:`ipaddress` objects.

    The OS providers compile their packet filters from the same rules, and a differential
    test holds the sandbox's integer matcher to this one (tests/test_netmatch.py).
    """

    _algebra = staticmethod(reference_algebra)


def _is_wide(network: str) -> bool:
    """A network that covers more than one address (so names outside the pins may resolve)."""
    if network == "*":
        return True
    if "/" in network:
        return ipaddress.ip_network(network, strict=False).num_addresses > 1
    return False


# ---------------------------------------------------------------------------------------
# Pinning (parent side) and hosts files (providers with their own /etc)
# ---------------------------------------------------------------------------------------


def pin_hosts(
    rules: Iterable[NetworkRule], resolved: Mapping[str, Sequence[str]] | None
) -> tuple[dict[str, tuple[str, ...]], list[str], list[str]]:
    """Turn resolver answers into pins: ``(pins, warnings, errors)``.

    An ``allow`` host that did not resolve is dropped with a warning (its rule then allows
    nothing); a ``deny`` host that did not resolve is an error, because a deny rule must never
    vanish silently (the pipeline exits 125). Messages start with the rule's ``FILE:LINE``.
    """
    answers = {normalize_host(k): v for k, v in (resolved or {}).items()}
    pins: dict[str, tuple[str, ...]] = {}
    warnings: list[str] = []
    errors: list[str] = []
    for rule in rules:
        if not rule.is_host:
            continue
        name = normalize_host(rule.network)
        addresses: list[str] = []
        for a in answers.get(name) or ():
            try:
                text = str(canonical_ip(str(a)))
            except ValueError:
                continue
            if text not in addresses:
                addresses.append(text)
        if addresses:
            pins[name] = tuple(addresses)
        elif rule.action == "deny":
            errors.append(
                f"{rule.source}: host '{name}' of deny rule '{rule}' does not resolve; "
                "refusing to start rather than dropping a deny rule (use an address or CIDR)"
            )
        else:
            warnings.append(
                f"{rule.source}: host '{name}' does not resolve; rule '{rule}' allows nothing"
            )
    return pins, warnings, errors
