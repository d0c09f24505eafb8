"""Network rule grammar and decisions (pysb_core.policy.netrules), including property tests that
compare the matcher with a deliberately naive reference evaluator written here.

Pure computation: nothing here opens a socket. Addresses are drawn from 127.0.0.0/8, the
slirp range 10.0.2.0/24 and the IPv6 documentation prefix 2001:db8::/32.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pysb_core.policy import NetworkRule, Policy, PortRange
from pysb_core.policy.netmatch import ephemeral_ports
from pysb_core.policy.netrules import (
    NetworkMatcher,
    canonical_ip,
    hosts_file_text,
    is_hostname,
    numeric_host,
    parse_rule,
    pin_hosts,
)

# ---------------------------------------------------------------------------------------
# Grammar
# ---------------------------------------------------------------------------------------


def test_parse_full_rule() -> None:
    r = parse_rule("allow tcp api.example.com 443 out", source="p.yaml:3")
    assert r.action == "allow"
    assert r.protocols == ("tcp",)
    assert r.network == "api.example.com"
    assert r.ports == (PortRange(443, 443),)
    assert r.direction == "out"
    assert r.source == "p.yaml:3"
    assert r.is_host
    assert str(r) == "allow tcp api.example.com 443 out"


@pytest.mark.parametrize(
    ("proto", "expected"),
    [("tcp", ("tcp",)), ("udp", ("udp",)), ("tcp,udp", ("tcp", "udp")), ("udp,tcp", ("tcp", "udp")),
     ("any", ("tcp", "udp")), ("ANY", ("tcp", "udp"))],
)  # fmt: skip
def test_protocols(proto: str, expected: tuple[str, ...]) -> None:
    assert parse_rule(f"deny {proto} * * any").protocols == expected


@pytest.mark.parametrize(
    ("ports", "expected"),
    [
        ("*", [(0, 65535)]),
        ("0", [(0, 0)]),
        ("80", [(80, 80)]),
        ("8000-8080", [(8000, 8080)]),
        ("1024-", [(1024, 65535)]),
        ("80,443,8000-8100", [(80, 80), (443, 443), (8000, 8100)]),
    ],
)
def test_ports(ports: str, expected: list[tuple[int, int]]) -> None:
    rule = parse_rule(f"allow tcp 127.0.0.1 {ports} in")
    assert [(p.low, p.high) for p in rule.ports] == expected


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ("*", "*"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.0/8", "127.0.0.0/8"),
        ("127.0.0.9/8", "127.0.0.0/8"),  # host bits are ignored, as with ip_network(strict=False)
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("2001:db8::/32", "2001:db8::/32"),
        ("LocalHost.", "localhost"),
        ("::ffff:127.0.0.1", "127.0.0.1"),  # IPv4 written as IPv6 is IPv4
        ("::ffff:127.0.0.0/104", "127.0.0.0/8"),
        ("::ffff:0:0/96", "0.0.0.0/0"),
    ],
)
def test_networks(network: str, expected: str) -> None:
    assert parse_rule(f"allow any {network} * out").network == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("allow tcp 127.0.0.1 80", "4 fields"),
        ("allow tcp 127.0.0.1 80, 443 out", "no spaces inside a comma list"),
        ("permit tcp 127.0.0.1 80 out", "invalid action 'permit'"),
        ("allow icmp 127.0.0.1 80 out", "unknown protocol 'icmp'"),
        ("allow tcp 127.0.0.1 80 sideways", "invalid direction 'sideways'"),
        ("allow tcp 127.0.0.1 65536 out", "out of range"),
        ("allow tcp 127.0.0.1 90-80 out", "reversed port range"),
        ("allow tcp 127.0.0.1 80,,443 out", "empty port"),
        ("allow tcp 127.0.0.1 http out", "invalid port 'http'"),
        ("allow tcp 127.0.0.1 -80 out", "invalid port"),
        ("allow tcp 127.0.0.1 \u0663 out", "invalid port"),  # a non-ASCII digit
        ("allow tcp 127.0.0.1/33 80 out", "not a valid CIDR"),
        ("allow tcp 127.1 80 out", "write it as 127.0.0.1"),
        ("allow tcp 2130706433 80 out", "write it as 127.0.0.1"),
        ("allow tcp 0x7f000001 80 out", "write it as 127.0.0.1"),
        ("allow tcp 1.2.3.400 80 out", "neither a valid IP address nor a valid host name"),
        ("allow tcp *.example.com 443 out", "wildcard host names"),
        ("allow tcp bad_-.-name 443 out", "not a valid host name"),
        ("allow tcp ex\u00e4mple.com 443 out", "IDNA"),
        ("allow tcp fe80::1%lo 443 out", "scope"),
        ("allow tcp ::g 443 out", "not a valid IPv6 address"),
    ],
)
def test_errors_are_clear(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_rule(text)
    assert fragment in str(info.value)


def test_non_string_rule() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        parse_rule(443)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("api.example.com", True),
        ("localhost", True),
        ("*", False),
        ("127.0.0.1", False),
        ("127.0.0.0/8", False),
        ("::1", False),
        ("127.1", False),
        ("", False),
        ("-bad.example.com", False),
    ],
)
def test_is_hostname(text: str, expected: bool) -> None:
    assert is_hostname(text) is expected


def test_numeric_host_reads_legacy_ipv4_forms() -> None:
    for spelling in ("127.0.0.1", "127.1", "0x7f000001", "2130706433", "0177.0.0.1"):
        assert numeric_host(spelling) == ipaddress.ip_address("127.0.0.1"), spelling
    assert numeric_host("127.0.0.1 trailing") is None
    assert numeric_host("example.com") is None
    assert canonical_ip("::ffff:127.0.0.1") == ipaddress.ip_address("127.0.0.1")


def test_policy_json_round_trip_keeps_rules() -> None:
    rules = (parse_rule("deny udp 127.0.0.0/8 53,1000- any", "f:1"),)
    policy = Policy(network=rules, pins={"h": ("127.0.0.2",)})
    again = Policy.from_json(policy.to_json())
    assert again.network == rules
    assert again.pins == {"h": ("127.0.0.2",)}


# ---------------------------------------------------------------------------------------
# Decisions
# ---------------------------------------------------------------------------------------


def matcher(*lines: str, pins: dict[str, tuple[str, ...]] | None = None) -> NetworkMatcher:
    return NetworkMatcher([parse_rule(x, f"t:{i}") for i, x in enumerate(lines, 1)], pins or {})


def test_default_deny() -> None:
    assert matcher().check("tcp", "127.0.0.1", 80, "out") == (False, None)


def test_allow_matches_proto_port_direction() -> None:
    m = matcher("allow tcp 127.0.0.1 8000 out")
    allowed, rule = m.check("tcp", "127.0.0.1", 8000, "out")
    assert allowed and rule is not None and rule.source == "t:1"
    assert not m.check("udp", "127.0.0.1", 8000, "out")[0]
    assert not m.check("tcp", "127.0.0.1", 8001, "out")[0]
    assert not m.check("tcp", "127.0.0.1", 8000, "in")[0]
    assert not m.check("tcp", "127.0.0.2", 8000, "out")[0]


def test_deny_beats_allow_whatever_the_order() -> None:
    for lines in (
        ("allow tcp 127.0.0.1 8000 out", "deny tcp 127.0.0.0/8 * out"),
        ("deny tcp 127.0.0.0/8 * out", "allow tcp 127.0.0.1 8000 out"),
    ):
        allowed, rule = matcher(*lines).check("tcp", "127.0.0.1", 8000, "out")
        assert not allowed
        assert rule is not None and rule.action == "deny"


def test_mapped_ipv6_is_judged_as_ipv4() -> None:
    m = matcher("allow tcp 127.0.0.1 80 out", "deny any ::/0 * out")
    assert m.check("tcp", "::ffff:127.0.0.1", 80, "out")[0]
    m = matcher("allow tcp * 80 out", "deny tcp 127.0.0.0/8 * out")
    assert not m.check("tcp", "::ffff:127.0.0.1", 80, "out")[0]
    # A rule written in the mapped form covers the IPv4 address.
    m = matcher("allow tcp ::ffff:127.0.0.0/104 80 out")
    assert m.check("tcp", "127.0.0.9", 80, "out")[0]


def test_nat64_form_cannot_dodge_an_ipv4_deny() -> None:
    m = matcher("allow tcp * 80 out", "deny tcp 127.0.0.0/8 * out")
    assert not m.check("tcp", "64:ff9b::127.0.0.1", 80, "out")[0]
    assert m.check("tcp", "64:ff9b::10.0.2.2", 80, "out")[0]


def test_any_direction_and_star_network() -> None:
    m = matcher("allow udp * 53 any")
    assert m.check("udp", "127.0.0.53", 53, "out")[0]
    assert m.check("udp", "::1", 53, "in")[0]
    assert not m.check("tcp", "127.0.0.53", 53, "out")[0]


def test_host_rules_match_pinned_addresses() -> None:
    m = matcher("allow tcp svc.test 443 out", pins={"svc.test": ("127.0.0.7", "::1")})
    assert m.check("tcp", "127.0.0.7", 443, "out")[0]
    assert m.check("tcp", "::1", 443, "out")[0]
    assert not m.check("tcp", "127.0.0.8", 443, "out")[0]
    assert m.check_host("tcp", "svc.test", 443, "out")[0]
    assert m.check_host("tcp", "SVC.test.", 443, "out")[0]
    assert m.name_of("127.0.0.7") == "svc.test"


def test_unpinned_host_rule_allows_nothing() -> None:
    m = matcher("allow tcp gone.test 443 out")
    assert m.check_host("tcp", "gone.test", 443, "out") == (False, None)


def test_every_address_of_a_name_must_be_allowed() -> None:
    pins = {"svc.test": ("127.0.0.7", "127.0.1.1")}
    m = matcher("allow tcp svc.test 443 out", "deny tcp 127.0.1.0/24 * out", pins=pins)
    allowed, rule = m.check_host("tcp", "svc.test", 443, "out")
    assert not allowed and rule is not None and rule.network == "127.0.1.0/24"
    # The allowed address alone still passes when judged alone.
    assert m.check("tcp", "127.0.0.7", 443, "out")[0]


def test_resolution_of_unpinned_names_needs_a_wide_allow() -> None:
    assert not matcher("allow tcp 127.0.0.1 80 out").resolves_any_name
    assert not matcher("allow tcp 127.0.0.1/32 80 out").resolves_any_name
    assert not matcher("deny tcp * 80 out").resolves_any_name
    assert not matcher("allow tcp * 80 in").resolves_any_name
    assert matcher("allow tcp * 443 out").resolves_any_name
    assert matcher("allow udp 127.0.0.0/31 53 any").resolves_any_name


def test_suggest() -> None:
    m = matcher()
    assert m.suggest("tcp", "API.Example.com", 443, "out") == "allow tcp api.example.com 443 out"
    assert m.suggest("udp", "::ffff:127.0.0.1", 53, "out") == "allow udp 127.0.0.1 53 out"
    assert m.suggest("tcp", "127.1", 8000, "in") == "allow tcp 127.0.0.1 8000 in"
    # The suggestion parses and allows what was refused.
    line = m.suggest("tcp", "127.0.0.3", 8080, "out")
    assert matcher(line).check("tcp", "127.0.0.3", 8080, "out")[0]


def test_cache_does_not_change_answers() -> None:
    m = matcher("allow tcp 127.0.0.1 80 out")
    first = [m.check("tcp", "127.0.0.1", p, "out")[0] for p in (79, 80, 81)]
    second = [m.check("tcp", "127.0.0.1", p, "out")[0] for p in (79, 80, 81)]
    assert first == second == [False, True, False]


# ---------------------------------------------------------------------------------------
# Pinning helpers
# ---------------------------------------------------------------------------------------


def test_pin_hosts_keeps_warns_and_fails() -> None:
    rules = [
        parse_rule("allow tcp good.test 443 out", "p.yaml:2"),
        parse_rule("allow tcp gone.test 443 out", "p.yaml:3"),
        parse_rule("deny tcp evil.test * out", "p.yaml:4"),
        parse_rule("allow tcp 127.0.0.1 80 out", "p.yaml:5"),
    ]
    resolved = {"good.test": ["127.0.0.2", "::ffff:127.0.0.3", "127.0.0.2"], "gone.test": []}
    pins, warnings, errors = pin_hosts(rules, resolved)
    assert pins == {"good.test": ("127.0.0.2", "127.0.0.3")}
    assert len(warnings) == 1 and warnings[0].startswith("p.yaml:3: ")
    assert "gone.test" in warnings[0]
    assert len(errors) == 1 and errors[0].startswith("p.yaml:4: ") and "evil.test" in errors[0]


def test_hosts_file_text() -> None:
    text = hosts_file_text({"b.test": ("127.0.0.2", "::1"), "a.test": ("127.0.0.3",)})
    lines = [x for x in text.splitlines() if not x.startswith("#")]
    assert lines[0] == "127.0.0.1\tlocalhost"
    assert "127.0.0.3\ta.test" in lines
    assert "127.0.0.2\tb.test" in lines and "::1\tb.test" in lines
    assert lines.index("127.0.0.3\ta.test") < lines.index("127.0.0.2\tb.test")


# ---------------------------------------------------------------------------------------
# Property tests against a reference evaluator
# ---------------------------------------------------------------------------------------

V4_BASE = int(ipaddress.ip_address("127.0.0.0"))
V6_BASE = int(ipaddress.ip_address("2001:db8::"))
NAMES = ("a.test", "b.test", "c.test")

v4_addresses = st.integers(0, 1023).map(lambda n: str(ipaddress.IPv4Address(V4_BASE + n)))
v6_addresses = st.integers(0, 1023).map(lambda n: str(ipaddress.IPv6Address(V6_BASE + n)))
mapped_addresses = v4_addresses.map(lambda a: f"::ffff:{a}")
addresses = st.one_of(v4_addresses, v6_addresses)
checked_addresses = st.one_of(v4_addresses, v6_addresses, mapped_addresses)


@st.composite
def networks(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["star", "v4", "v4net", "v6", "v6net", "name"]))
    if kind == "star":
        return "*"
    if kind == "v4":
        return draw(v4_addresses)
    if kind == "v6":
        return draw(v6_addresses)
    if kind == "v4net":
        return str(ipaddress.ip_network(f"{draw(v4_addresses)}/{draw(st.integers(22, 32))}", False))
    if kind == "v6net":
        return str(
            ipaddress.ip_network(f"{draw(v6_addresses)}/{draw(st.integers(118, 128))}", False)
        )
    return draw(st.sampled_from(NAMES))


port_numbers = st.integers(0, 65535) | st.integers(75, 85)


@st.composite
def port_specs(draw: st.DrawFn) -> str:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["one", "range", "open"]))
        low = draw(port_numbers)
        if kind == "one":
            items.append(str(low))
        elif kind == "open":
            items.append(f"{low}-")
        else:
            items.append(f"{low}-{draw(st.integers(low, 65535))}")
    return draw(st.sampled_from(["*", ",".join(items)]))


@st.composite
def rule_texts(draw: st.DrawFn) -> str:
    return " ".join(
        (
            draw(st.sampled_from(["allow", "deny"])),
            draw(st.sampled_from(["tcp", "udp", "tcp,udp", "any"])),
            draw(networks()),
            draw(port_specs()),
            draw(st.sampled_from(["in", "out", "any"])),
        )
    )


pin_maps = st.fixed_dictionaries(
    {name: st.lists(addresses, max_size=3, unique=True) for name in NAMES}
)


def _item_covers(item: str, port: int) -> bool:
    if item.endswith("-"):
        return port >= int(item[:-1])
    if "-" in item:
        lo, hi = item.split("-")
        return int(lo) <= port <= int(hi)
    return port == int(item)


def _one_item_covers(ports: str, low: int, high: int) -> bool:
    """One item of the list covers the whole range (the matcher looks at rules' ranges one
    by one)."""
    return any(_item_covers(i, low) and _item_covers(i, high) for i in ports.split(","))


def reference_decision(rules: list[str], pins: dict[str, list[str]], proto: str, ip: str,
                       port: int, direction: str) -> tuple[bool, str | None]:  # fmt: skip
    """The spec read literally, with no precomputation: default deny, any matching deny wins,
    IPv4 written as IPv6 is IPv4."""
    addr = ipaddress.ip_address(ip)
    if addr.version == 6 and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    matched_allow = False
    for text in rules:
        action, protos, network, ports, rdir = text.split()
        protos_set = {"tcp", "udp"} if protos == "any" else set(protos.split(","))
        if proto not in protos_set or rdir not in (direction, "any"):
            continue
        port_ok = ports == "*"
        for item in [] if ports == "*" else ports.split(","):
            if item.endswith("-"):
                port_ok |= port >= int(item[:-1])
            elif "-" in item:
                lo, hi = item.split("-")
                port_ok |= int(lo) <= port <= int(hi)
            else:
                port_ok |= port == int(item)
        if port == 0 and direction == "in" and action == "allow" and ports != "*":
            # a bind to port 0 lands in the ephemeral range: a rule covering all of it
            # allows it (docs/network.md)
            port_ok |= _one_item_covers(ports, *ephemeral_ports())
        if not port_ok:
            continue
        if network == "*":
            covered = True
        elif network in NAMES:
            covered = any(ipaddress.ip_address(a) == addr for a in pins[network])
        else:
            net = ipaddress.ip_network(network, strict=False)
            covered = net.version == addr.version and addr in net
        if not covered:
            continue
        if action == "deny":
            return (False, text)
        matched_allow = True
    return (matched_allow, None)


@settings(max_examples=400, deadline=None)
@given(
    rules=st.lists(rule_texts(), max_size=6),
    pins=pin_maps,
    proto=st.sampled_from(["tcp", "udp"]),
    ip=checked_addresses,
    port=port_numbers,
    direction=st.sampled_from(["in", "out"]),
)
def test_matcher_agrees_with_reference(rules, pins, proto, ip, port, direction) -> None:
    parsed = [parse_rule(t) for t in rules]
    m = NetworkMatcher(parsed, {k: tuple(v) for k, v in pins.items()})
    allowed, rule = m.check(proto, ip, port, direction)
    expected, deny_text = reference_decision(rules, pins, proto, ip, port, direction)
    assert allowed == expected
    if deny_text is not None:
        assert rule is not None and rule.action == "deny"
    if allowed:
        assert rule is not None and rule.action == "allow"
    if not allowed and deny_text is None:
        assert rule is None
    # Asking twice (cached) gives the same answer.
    assert m.check(proto, ip, port, direction) == (allowed, rule)


@settings(max_examples=200, deadline=None)
@given(
    rules=st.lists(rule_texts(), max_size=6),
    pins=pin_maps,
    name=st.sampled_from(NAMES),
    proto=st.sampled_from(["tcp", "udp"]),
    port=port_numbers,
)
def test_name_allowed_iff_every_address_allowed(rules, pins, name, proto, port) -> None:
    m = NetworkMatcher([parse_rule(t) for t in rules], {k: tuple(v) for k, v in pins.items()})
    allowed, _ = m.check_host(proto, name, port, "out")
    each = [reference_decision(rules, pins, proto, a, port, "out")[0] for a in pins[name]]
    assert allowed == (bool(each) and all(each))


@settings(max_examples=300, deadline=None)
@given(text=rule_texts())
def test_parse_round_trip(text: str) -> None:
    rule = parse_rule(text, "f:1")
    again = parse_rule(str(rule), "f:1")
    assert again == rule
    action, protos, network, _ports, direction = text.split()
    assert rule.action == action
    assert rule.direction == direction
    assert set(rule.protocols) == ({"tcp", "udp"} if protos == "any" else set(protos.split(",")))
    if network not in ("*", *NAMES):
        assert ipaddress.ip_network(rule.network, strict=False) == ipaddress.ip_network(
            network, strict=False
        )


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60))
def test_parse_never_fails_with_anything_but_value_error(text: str) -> None:
    try:
        rule = parse_rule(text)
    except ValueError as exc:
        assert str(exc)
    else:
        assert isinstance(rule, NetworkRule)


@settings(max_examples=200, deadline=None)
@given(
    fields=st.tuples(
        st.sampled_from(["allow", "deny", "ALLOW", "x"]),
        st.sampled_from(["tcp", "udp", "any", "icmp", "tcp,udp,"]),
        st.one_of(networks(), st.text(min_size=1, max_size=12).filter(lambda s: " " not in s)),
        st.one_of(port_specs(), st.text(min_size=1, max_size=8).filter(lambda s: " " not in s)),
        st.sampled_from(["in", "out", "any", "up"]),
    )
)
def test_parse_fuzzed_fields(fields: tuple[str, ...]) -> None:
    assume(all(f.split() == [f] for f in fields))
    try:
        rule = parse_rule(" ".join(fields))
    except ValueError:
        return
    assert rule.action in ("allow", "deny")
    assert rule.direction in ("in", "out", "any")
    assert all(0 <= p.low <= p.high <= 65535 for p in rule.ports)


@settings(max_examples=500, deadline=None)
@given(
    text=st.one_of(
        st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=18),
        st.text(alphabet="0123456789abcdef:.", min_size=2, max_size=24),
        st.builds(str, st.integers(0, 2**32 + 5)),
        st.builds(hex, st.integers(0, 2**32 + 5)),
    )
)
def test_numeric_host_agrees_with_the_c_library(text: str) -> None:
    """What the guard takes for an address is what getaddrinfo(AI_NUMERICHOST) -- which never
    queries DNS -- reads, so a spelling is never judged as one thing and used as another."""
    import socket

    ours = numeric_host(text)
    try:
        infos = socket.getaddrinfo(text, None, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        theirs = None
    else:
        theirs = ipaddress.ip_address(infos[0][4][0])
    assert ours == theirs, (text, ours, theirs)
