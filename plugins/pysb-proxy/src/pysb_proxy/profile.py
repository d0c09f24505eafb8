"""From the profile's ``egress:`` and ``secrets:`` sections to a running proxy.

``secrets:`` is a list of ``{host, header, value}`` (``port`` optional): the proxy adds
the header to HTTPS requests for that host, in place of any header of that name the
sandbox sent. The section is host-only (the sandbox's policy lacks it), and every
variable of the sandbox's environment that holds the secret, or a part of it that a
profile would put there (``Bearer ${KEY}`` holds ``KEY``'s value), is removed from the
environment the sandbox starts with.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pysb_core.guardkit import Event, LaunchPlan, Located, Policy
from pysb_proxy.rules import EgressRule, EgressRules, RuleError, normalize_host, parse_rule
from pysb_proxy.server import Decided, EgressProxy, Secrets, refusal_text

_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
#: A shorter variable value is not taken for a part of a secret (``1``, ``yes``).
MIN_SECRET_PART = 6
MAX_RULES = 10_000


def _where(value: Any, location: str) -> str:
    return getattr(value, "location", None) or location


def validate_egress(value: Any, location: str) -> list[str]:
    if not isinstance(value, list):
        return [f"{location}: egress: a list of rules like 'allow https://api.example.com'"]
    problems = []
    if len(value) > MAX_RULES:
        problems.append(f"{location}: egress: at most {MAX_RULES} rules")
    for item in value:
        try:
            parse_rule(item, "")
        except RuleError as exc:
            problems.append(f"{_where(item, location)}: egress: {exc}")
    return problems


def validate_secrets(value: Any, location: str) -> list[str]:
    if not isinstance(value, list):
        return [f"{location}: secrets: a list of {{host, header, value}} entries"]
    problems = []
    for item in value:
        where = location
        if isinstance(item, dict):
            where = next((v.location for v in item.values() if isinstance(v, Located)), location)
        problems += [f"{where}: secrets: {p}" for p in _secret_problems(item)]
    return problems


def _secret_problems(item: Any) -> list[str]:
    if not isinstance(item, dict):
        return ["each entry is a mapping with host, header and value"]
    unknown = set(item) - {"host", "header", "value", "port"}
    problems = [f"unknown key {k!r} (host, header, value, port)" for k in sorted(unknown)]
    host, header, value = item.get("host"), item.get("header"), item.get("value")
    if not isinstance(host, str):
        problems.append("host: a host name, like api.example.com")
    elif "*" in host:
        problems.append("host: one host, no wildcard")
    else:
        try:
            normalize_host(host)
        except RuleError as exc:
            problems.append(f"host: {exc}")
    if not isinstance(header, str) or not _HEADER_NAME.match(header):
        problems.append("header: an HTTP header name, like Authorization")
    if not isinstance(value, str) or not value:
        problems.append('value: the header\'s value (from a variable: value: "Bearer ${KEY}")')
    elif any(c in value for c in "\r\n\x00") or not value.isascii():
        problems.append("value: printable ASCII on one line")
    port = item.get("port")
    if port is not None and _port(port) is None:
        problems.append("port: 1-65535")
    return problems


def _port(value: Any) -> int | None:
    text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def egress_rules(policy: Policy) -> list[EgressRule]:
    texts = policy.extra.get("egress") or []
    sources = policy.extra_sources.get("egress", ())
    return [
        parse_rule(text, sources[i] if i < len(sources) else "<profile>")
        for i, text in enumerate(texts)
    ]


def secret_entries(policy: Policy) -> list[tuple[str, int | None, str, str]]:
    out = []
    for item in policy.extra.get("secrets") or []:
        port = _port(item["port"]) if item.get("port") is not None else None
        out.append((normalize_host(item["host"]), port, item["header"], item["value"]))
    return out


def build_proxy(policy: Policy, emit: Callable[[Event], None]) -> EgressProxy:
    """The run's proxy, bound (not serving yet)."""

    def report(decided: Decided) -> None:
        request = decided.request
        rule = decided.rule
        emit(
            Event(
                layer="os",
                guard="egress",
                action="learn" if decided.kind == "learn" else "deny",
                target=request.url,
                # the refusal's own text: the method, the URL and the rule (or why), which
                # --events keeps (its lines carry no ``data``; SPEC §7)
                detail=decided.reason
                if decided.kind == "learn"
                else refusal_text(request, decided.reason),
                suggested_rule="" if decided.kind == "learn" else _suggestion(decided),
                data={
                    "method": request.method,
                    "scheme": request.scheme,
                    "host": request.host,
                    "port": request.port,
                    "path": request.path,
                    "rule": rule.source if rule is not None else "",
                },
            )
        )

    interceptor = None
    entries = secret_entries(policy)
    rules = egress_rules(policy)
    if entries or any(r.inspects_requests for r in rules) or policy.learn:
        from pysb_proxy.tls import Interceptor, interception_available

        if interception_available():
            interceptor = Interceptor()
    return EgressProxy(
        EgressRules(rules),
        report=report,
        learning=policy.learn,
        secrets=Secrets(entries),
        interceptor=interceptor,
    )


def _suggestion(decided: Decided) -> str:
    if decided.rule is not None:
        return ""
    return EgressRules.suggest(decided.request).removeprefix("add to the profile: ")


def child_environment(policy: Policy, proxy: EgressProxy, plan: LaunchPlan) -> dict[str, str]:
    """The proxy variables every common client reads, and the secrets' variables gone."""
    url = f"http://127.0.0.1:{proxy.port}"
    env = {}
    # WS_PROXY/WSS_PROXY: aiohttp's ws_connect to a ws:// or wss:// URL reads only them
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY"):
        env[name] = env[name.lower()] = url
    # Everything goes through the proxy, loopback included (it refuses what no rule names).
    env["NO_PROXY"] = env["no_proxy"] = ""
    if proxy.interceptor is not None:
        env.update(proxy.interceptor.child_trust(plan))
    for name in secret_holders(plan.env, [value for *_, value in secret_entries(policy)]):
        plan.env.pop(name, None)
    return env


def secret_holders(environ: dict[str, str], secrets: list[str]) -> list[str]:
    """The variables whose value is a secret, or holds one, or is a part of one."""
    names = []
    for name, value in environ.items():
        for secret in secrets:
            part = len(value) >= MIN_SECRET_PART and value in secret
            if part or (secret and secret in value):
                names.append(name)
                break
    return names


def check_lines(policy: Policy) -> list[tuple[str, str]]:
    """``pysb check``'s lines: every egress rule, and each secret without its value."""
    lines = [(f"egress: {r.text}", r.source) for r in egress_rules(policy)]
    sources = policy.extra_sources.get("secrets", ())
    for i, (host, port, header, _value) in enumerate(secret_entries(policy)):
        where = f"{host}:{port}" if port else host
        lines.append((f"secrets: {header} for {where}", sources[i] if i < len(sources) else ""))
    return lines
