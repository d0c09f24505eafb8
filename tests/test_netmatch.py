"""Differential tests: the sandbox's matcher (:mod:`pysb_core.policy.netmatch`, no ``ipaddress``)
answers exactly as the reference :class:`pysb_core.policy.netrules.NetworkMatcher` does.

Random rule sets (IPv4/IPv6 CIDRs and addresses, IPv4-mapped and IPv4-embedding IPv6 forms,
host names with pins, ports, protocols, directions, allow/deny mixes) are parsed by the real
grammar, then both matchers judge random addresses written in every spelling the guard may
meet (dotted, legacy ``inet_aton`` forms, compressed/exploded IPv6, mapped, translated, NAT64,
compatible, bracketed, scoped, names). Pure computation: nothing here opens a socket.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pysb_core.policy import NetworkRule, PortRange, netmatch, netrules
from pysb_core.policy.netrules import NetworkMatcher, parse_rule
from pysb_core.testing import Project

# A few small neighbourhoods, so that random rules and random addresses often meet.
V4_BASES = [0x7F000000, 0x0A000200, 0xC0000200, 0x00000000, 0xFFFFFF00]
V6_BASES = [
    0x20010DB8 << 96,
    0,
    0xFFFF << 32,  # ::ffff:0:0/96 (mapped)
    0xFFFF << 48,  # ::ffff:0:0:0/96 (translated)
    0x64FF9B << 96,  # 64:ff9b::/96 (NAT64)
    0xFE80 << 112,
]
NAMES = ["a.test", "b.test", "c.test"]

v4_int = st.builds(lambda b, low: b | low, st.sampled_from(V4_BASES), st.integers(0, 255))
v6_int = st.one_of(
    st.builds(lambda b, low: b | low, st.sampled_from(V6_BASES), st.integers(0, 2**32 - 1)),
    st.builds(lambda b, v4: b | v4, st.sampled_from(V6_BASES), v4_int),
    st.integers(0, 2**128 - 1),
)


def v4_spellings(value: int) -> list[str]:
    a, b, c, d = value.to_bytes(4, "big")
    return [
        f"{a}.{b}.{c}.{d}",
        f"{value:#x}",
        str(value),
        f"{a}.{value & 0xFFFFFF}",
        f"{a}.{b}.{value & 0xFFFF}",
        f"{a:#o}.{b}.{c}.{d}",
        f"{a:#x}.{b:#X}.{c}.{d}",
        f"0{a}.{b}.{c}.{d}",
        f"{a}.{b}.{c}.{d}\n",
        f" {a}.{b}.{c}.{d}",
    ]


def v6_spellings(value: int) -> list[str]:
    ip = ipaddress.IPv6Address(value)
    low = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    groups = ip.exploded.split(":")
    return [
        ip.compressed,
        ip.exploded,
        ":".join(g.lstrip("0") or "0" for g in groups),
        ip.compressed.upper(),
        ":".join(groups[:6]) + f":{low}",
        f"[{ip.compressed}]",
        f"{ip.compressed}%eth0",
        f"[{ip.compressed}%1]",
        f"{ip.compressed}%",
        f"{ip.compressed}%a%b",
        f"::ffff:{low}",
        f"::{low}",
        f"64:ff9b::{low}",
        f"::ffff:0:{low}",
    ]


address_text = st.one_of(
    v4_int.flatmap(lambda v: st.sampled_from(v4_spellings(v))),
    v6_int.flatmap(lambda v: st.sampled_from(v6_spellings(v))),
    st.sampled_from([*NAMES, "A.TEST.", "", "1::2::3", "1.2.3", "1.2.3.4.5", "0x", "::1.2.3.04"]),
    st.text(alphabet="0123456789abcdefxX.:%[] \n", max_size=20),
)


def network_text(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["*", "v4", "v6", "mapped", "name"]))
    if kind == "*":
        return "*"
    if kind == "name":
        return draw(st.sampled_from(NAMES))
    if kind == "v4":
        value, bits = draw(v4_int), 32
        text = str(ipaddress.IPv4Address(value))
    elif kind == "v6":
        value, bits = draw(v6_int), 128
        text = ipaddress.IPv6Address(value).compressed
    else:
        value, bits = draw(v4_int), 128
        text = f"::ffff:{ipaddress.IPv4Address(value)}"
    if draw(st.booleans()):
        return text
    low = 96 if kind == "mapped" and draw(st.booleans()) else 0
    edges = sorted(p for p in {0, 1, 8, 24, 31, 32, 95, 96, 97, 120, 127, 128} if low <= p <= bits)
    return f"{text}/{draw(st.one_of(st.sampled_from(edges), st.integers(low, bits)))}"


@st.composite
def rule_line(draw: st.DrawFn) -> str:
    action = draw(st.sampled_from(["allow", "allow", "deny"]))
    proto = draw(st.sampled_from(["tcp", "udp", "any", "tcp,udp"]))
    ports = draw(st.sampled_from(["*", "80", "80-90", "443,80", "1000-", "0"]))
    direction = draw(st.sampled_from(["out", "in", "any"]))
    return f"{action} {proto} {network_text(draw)} {ports} {direction}"


pins_strategy = st.dictionaries(
    st.sampled_from([*NAMES, "A.Test."]),
    st.lists(
        st.one_of(
            v4_int.map(lambda v: str(ipaddress.IPv4Address(v))),
            v6_int.map(lambda v: ipaddress.IPv6Address(v).compressed),
            v4_int.map(lambda v: f"::ffff:{ipaddress.IPv4Address(v)}"),
        ),
        min_size=1,
        max_size=3,
    ),
)


def same(a: object, b: object) -> None:
    assert a == b, (a, b)


@settings(max_examples=300, deadline=None)
@given(st.lists(address_text, min_size=1, max_size=8))
def test_numeric_host_and_canonical_text_agree(texts: list[str]) -> None:
    for text in texts:
        ref, new = netrules.numeric_host(text), netmatch.numeric_host(text)
        assert (ref is None) == (new is None), text
        if ref is None or new is None:
            with pytest.raises(ValueError):
                netmatch.canonical_text(text)
            continue
        assert (ref.version, int(ref)) == (new[0], new[1]), text
        assert getattr(ref, "scope_id", None) == new[2], text
        if ref.version == 4 or ref.ipv4_mapped is None:  # 3.13 spells mapped ones dotted
            same(str(ref), netmatch.ip_text(new))
        same(str(netrules.canonical_ip(text)), netmatch.canonical_text(text))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(rule_line(), min_size=0, max_size=6),
    st.booleans(),
    pins_strategy,
    st.lists(
        st.tuples(
            address_text,
            st.sampled_from(["tcp", "udp", "icmp"]),
            st.sampled_from([0, 80, 85, 443, 1000, 65535]),
            st.sampled_from(["out", "in", "any"]),
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_decisions_agree(
    lines: list[str],
    as_written: bool,
    pins: dict[str, list[str]],
    probes: list[tuple[str, str, int, str]],
) -> None:
    rules = [parse_rule(line, source=f"p:{i}") for i, line in enumerate(lines)]
    # Half of the time the networks as written (a mapped CIDR stays IPv6 text), as a rule
    # built without the grammar would carry them.
    if as_written:
        rules = [
            NetworkRule(r.action, r.protocols, line.split()[2], r.ports, r.direction, r.source)
            for r, line in zip(rules, lines, strict=True)
        ]
    ref = NetworkMatcher(rules, pins)
    new = netmatch.Matcher(rules, pins)
    same(ref.pins, new.pins)
    same(ref.resolves_any_name, new.resolves_any_name)
    for text, proto, port, direction in probes:
        literal = netrules.numeric_host(text) is not None
        if literal:
            same(ref.check(proto, text, port, direction), new.check(proto, text, port, direction))
            # twice: the second answer comes from the cache
            same(ref.check(proto, text, port, direction), new.check(proto, text, port, direction))
        else:
            with pytest.raises(ValueError):
                new.check(proto, text, port, direction)
        same(
            ref.check_host(proto, text, port, direction),
            new.check_host(proto, text, port, direction),
        )
        same(ref.suggest(proto, text, port, direction), new.suggest(proto, text, port, direction))
        same(ref.name_of(text), new.name_of(text))
        same(ref.pinned(text), new.pinned(text))
    for name, addresses in pins.items():
        every = [str(netrules.canonical_ip(a)) for a in addresses]
        for proto, port, direction in [("tcp", 80, "out"), ("udp", 443, "in")]:
            same(
                ref.check_host(proto, name, port, direction, every),
                new.check_host(proto, name, port, direction, every),
            )


@pytest.mark.parametrize(
    ("network", "address", "allowed"),
    [
        ("127.0.0.0/8", "127.1", True),
        ("127.0.0.0/8", "0x7f000001", True),
        ("127.0.0.0/8", "::ffff:127.0.0.1", True),
        ("10.0.0.0/8", "::ffff:0:10.1.2.3", False),  # translated: judged as IPv6, no v6 rule
        ("::ffff:10.0.0.0/104", "10.9.9.9", True),
        ("::ffff:10.0.0.0/104", "11.9.9.9", False),
        ("2001:db8::/32", "[2001:DB8::1]", True),
        ("2001:db8::/32", "2001:db8::1%eth0", True),
        ("::/0", "::ffff:10.0.0.1", False),  # mapped addresses are IPv4
        ("::ffff:0.0.0.0/96", "10.1.1.1", True),  # every IPv4 address
        ("::ffff:0.0.0.0/95", "10.1.1.1", False),  # not a mapped network: IPv6 only
    ],
)
def test_spellings(network: str, address: str, allowed: bool) -> None:
    parsed = parse_rule(f"allow tcp {network} * out")
    # As written too: parse_rule turns a mapped network into IPv4, a rule built otherwise not.
    raw = NetworkRule("allow", ("tcp",), network, parsed.ports, "out")
    for rules in ([parsed], [raw]):
        assert netmatch.Matcher(rules).check("tcp", address, 1, "out")[0] is allowed
        assert NetworkMatcher(rules).check("tcp", address, 1, "out")[0] is allowed


def test_embedded_ipv4_still_meets_an_explicit_deny() -> None:
    rules = [parse_rule("allow tcp * * out"), parse_rule("deny tcp 192.0.2.7 * out", "p:2")]
    m = netmatch.Matcher(rules)
    for spelling in ("64:ff9b::192.0.2.7", "::ffff:0:192.0.2.7", "::192.0.2.7"):
        allowed, rule = m.check("tcp", spelling, 80, "out")
        assert not allowed and rule is rules[1], spelling
    rules.append(parse_rule("deny tcp 0.0.0.0/8 * out", "p:3"))
    m = netmatch.Matcher(rules)
    for spelling in ("::1", "::"):  # loopback and unspecified: they embed nothing
        assert m.check("tcp", spelling, 80, "out") == (True, rules[0]), spelling
    assert m.check("tcp", "::2", 80, "out") == (False, rules[2])


@pytest.mark.parametrize("matcher", [netmatch.Matcher, NetworkMatcher])
def test_an_in_rule_on_the_wildcard_covers_every_local_address(matcher: type) -> None:
    """``in`` names the address a server binds; the wildcard is every local address of
    its family (``::`` is dual-stack: IPv4 too). ``out`` and a CIDR are unchanged."""
    v4 = matcher([parse_rule("allow tcp 0.0.0.0 8000 in")])
    for address in ("0.0.0.0", "127.0.0.1", "203.0.113.1", "::ffff:127.0.0.1"):
        assert v4.check("tcp", address, 8000, "in")[0], address
    assert not v4.check("tcp", "::1", 8000, "in")[0]
    assert not v4.check("tcp", "127.0.0.1", 8001, "in")[0]
    v6 = matcher([parse_rule("allow tcp :: 8000 in")])
    assert all(v6.check("tcp", a, 8000, "in")[0] for a in ("::", "::1", "127.0.0.1"))
    either = matcher([parse_rule("allow tcp 0.0.0.0 8000 any")])
    assert not either.check("tcp", "127.0.0.1", 8000, "out")[0]  # a connection: unchanged
    assert either.check("tcp", "0.0.0.0", 8000, "out")[0]
    cidr = matcher([parse_rule("allow tcp 0.0.0.0/32 8000 in")])
    assert not cidr.check("tcp", "127.0.0.1", 8000, "in")[0]
    denied = matcher([parse_rule("allow tcp 127.0.0.1 8000 in"), parse_rule("deny tcp :: 8000 in")])
    assert denied.check("tcp", "127.0.0.1", 8000, "in") == (False, denied.rules[1])


def test_non_canonical_rule_fails_closed() -> None:
    for network in ("10.0.0.0/255.0.0.0", "127.1", "10.0.0.0/33", "fe80::1%eth0"):
        rule = NetworkRule("allow", ("tcp",), network, (PortRange(0, 65535),), "out")
        with pytest.raises(ValueError):
            netmatch.Matcher([rule])


def test_the_sandbox_matcher_imports_no_ipaddress() -> None:
    """Nothing but the module itself is loaded by importing and using it (beyond the
    pysb_core package and pysb_core.policy, which the sandbox has loaded anyway)."""
    code = (
        "import sys; import pysb_core, pysb_core.policy; before = set(sys.modules); "
        "from pysb_core.policy import netmatch; from pysb_core.policy.netrules import parse_rule "
        "as p; "
        "rules = [p('allow tcp 10.0.0.0/8 * out'), p('deny tcp a.test 80 any')]; "
        "sys.modules.pop('ipaddress'); sys.modules.pop('pysb_core.policy.netrules'); "
        "before = set(sys.modules); "
        "m = netmatch.Matcher(rules, {'a.test': ['::ffff:1.2.3.4']}); "
        "m.check('tcp', '127.1', 1, 'out'); m.check_host('tcp', 'a.test', 80, 'out'); "
        "m.suggest('tcp', '::ffff:10.0.0.1', 80, 'out'); "
        "print(sorted(set(sys.modules) - before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = (
        "import sys; import pysb_core, pysb_core.policy; before = set(sys.modules); "
        "from pysb_core.policy import netmatch; print(sorted(set(sys.modules) - before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['_socket', 'pysb_core.policy.netmatch']"  # _socket: built in


def test_a_sandboxed_run_decides_without_ipaddress(project: Project) -> None:
    """The real child: the guard refuses by the rules, and neither ``ipaddress`` nor the
    reference module is loaded (at start or to explain a refusal)."""
    project.profile(
        "version: 1\nimports: [socket]\nenv: {PYTHONVERBOSE: '1'}\nnetwork:\n"
        "  - allow tcp 127.0.0.0/8 * out\n  - deny tcp ::ffff:127.0.0.5 * out\n"
    )
    code = (
        "import socket, sys\n"
        "for host in ('127.0.0.5', '127.5', '0x7f000005'):\n"
        "    try:\n"
        "        socket.socket().connect((host, 9))\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, e)\n"
    )
    # The program's sys.modules hides pysb's own modules: the interpreter's verbose import
    # log tells the truth, also for modules loaded with import_module (the kits' lazy
    # names), which -X importtime does not report.
    r = project.run("run", "-c", code)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3, r.stdout
    for line in lines:
        assert line.startswith("NetworkDeniedError network connect to 127.0.0.5:9"), line
        assert "network rule 'deny tcp 127.0.0.5 * out'" in line, line
    imported = {line.split("'")[1] for line in r.stderr.splitlines() if line.startswith("import '")}
    assert "pysb_core.policy.netmatch" in imported and "socket" in imported
    assert not {"ipaddress", "pysb_core.policy.netrules"} & imported
