"""The egress rule grammar and decisions, without a proxy."""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pysb_proxy.rules import EgressRules, Request, RuleError, normal_path, parse_rule


def rules(*lines: str) -> EgressRules:
    return EgressRules([parse_rule(line, f"p.yaml:{i + 1}") for i, line in enumerate(lines)])


@pytest.mark.parametrize(
    ("text", "host", "port", "path", "methods"),
    [
        ("allow https://api.example.com", "api.example.com", 443, None, None),
        (
            "allow http://API.Example.com.:8080/v1/* GET,POST",
            "api.example.com",
            8080,
            "/v1/*",
            {"GET", "POST"},
        ),
        ("allow https://*.example.org/*", "*.example.org", 443, None, None),
        ("deny https://[::ffff:10.0.0.1]:8443", "10.0.0.1", 8443, None, None),
        ("allow https://[::1]/x", "::1", 443, "/x", None),
    ],
)
def test_rules_parse(
    text: str, host: str, port: int, path: str | None, methods: set[str] | None
) -> None:
    rule = parse_rule(text, "p.yaml:1")
    assert (rule.host, rule.port, rule.path) == (host, port, path)
    assert rule.methods == (frozenset(methods) if methods else None)


@pytest.mark.parametrize(
    "text",
    [
        "allow",
        "allow https://x.example.com GET extra",
        "grant https://x.example.com",
        "allow ftp://x.example.com",
        "allow https://",
        "allow https://user:pw@x.example.com",
        "allow https://x.*.example.com",
        "allow https://*.10.0.0.1",
        "allow https://x.example.com:0",
        "allow https://x.example.com:99999",
        "allow https://x.example.com/a?b",
        "allow https://x.example.com get",
        "allow https://x.example.com/a/../b",
        "allow https://x.example.com/%2e%2e/b",
        "allow https://exa mple.com",
        "allow https://-bad-.example.com",
        "allow https://" + "a" * 3000,
    ],
)
def test_bad_rules_say_why(text: str) -> None:
    with pytest.raises(RuleError):
        parse_rule(text, "p.yaml:1")


def test_wildcard_is_below_the_name_only() -> None:
    r = rules("allow https://*.example.org")
    assert r.tunnel("a.example.org", 443).allowed  # type: ignore[union-attr]
    assert r.tunnel("a.b.example.org", 443).allowed  # type: ignore[union-attr]
    assert not r.tunnel("example.org", 443).allowed  # type: ignore[union-attr]
    assert not r.tunnel("badexample.org", 443).allowed  # type: ignore[union-attr]
    assert not r.tunnel("a.example.org", 8443).allowed  # type: ignore[union-attr]


def test_a_path_rule_on_a_host_needs_decryption() -> None:
    r = rules("allow https://api.example.com/v1/*", "allow https://cdn.example.com")
    assert r.tunnel("api.example.com", 443) is None
    assert r.tunnel("cdn.example.com", 443).allowed  # type: ignore[union-attr]


def test_deny_beats_allow_in_any_order() -> None:
    for lines in (
        ("deny http://a.example.com/x/*", "allow http://a.example.com/*"),
        ("allow http://a.example.com/*", "deny http://a.example.com/x/*"),
    ):
        decision = rules(*lines).decide(Request("http", "a.example.com", 80, "/x/y", "GET"))
        assert not decision.allowed and "deny" in decision.reason


SEGMENTS = st.lists(
    st.sampled_from(["v1", "admin", "..", ".", "%2e%2e", "%2E", "a%2fb", "x", "%61dmin", ""]),
    max_size=6,
)


@settings(max_examples=500, deadline=None)
@given(SEGMENTS)
def test_an_allowed_path_is_below_the_rule_as_the_server_reads_it(segments: list[str]) -> None:
    """Whatever a client sends, a path the rule allows is, after the server's own
    decoding and dot-segment removal, below the rule's directory."""
    raw = "/v1/" + "/".join(segments)
    try:
        path = normal_path(raw)
    except (RuleError, UnicodeDecodeError):
        return  # refused outright
    decision = rules(
        "allow http://a.example.com/v1/*", "deny http://a.example.com/v1/admin*"
    ).decide(Request("http", "a.example.com", 80, path, "GET"))
    served = posixpath.normpath(unquote(raw))
    if decision.allowed:
        assert served.startswith("/v1") and not served.startswith("/v1/admin")


def test_suggestions_name_the_directory_and_method() -> None:
    decision = rules().decide(Request("https", "api.example.com", 8443, "/v2/models/x", "POST"))
    assert "egress: ['allow https://api.example.com:8443/v2/models/* POST']" in decision.reason
