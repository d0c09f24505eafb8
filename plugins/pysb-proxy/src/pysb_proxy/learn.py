"""Learned egress rules: what a learning run's requests need, and nothing more.

Each request the proxy saw (scheme, host, port, path, method) is a ``learn`` event; the
rules group them by origin (scheme, host, port): the path pattern is the longest
directory prefix all of the origin's paths share (``/v1/*``; ``/*`` is written as no
path at all), the methods those requests used. A tunnel the proxy did not decrypt gives
the origin alone. The events come from the sandbox's traffic, hence hostile: a field of
the wrong type or shape is dropped, and a name is written only after the rule grammar
parsed what would be written, so that no learned text can mean more than was seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pysb_proxy.rules import SCHEMES, Request, RuleError, normalize_host, parse_rule

MAX_ORIGINS = 1000


def learned_rules(records: Sequence[Any]) -> list[str]:
    origins: dict[tuple[str, str, int], tuple[list[str], set[str]]] = {}
    for record in records:
        if getattr(record, "guard", None) != "egress" or getattr(record, "action", None) != "learn":
            continue
        seen = _request_of(getattr(record, "data", None))
        if seen is None:
            continue
        key = (seen.scheme, seen.host, seen.port)
        if key not in origins and len(origins) >= MAX_ORIGINS:
            continue
        paths, methods = origins.setdefault(key, ([], set()))
        if seen.method != "CONNECT":
            paths.append(seen.path)
            methods.add(seen.method)
        else:
            paths.append("")
    rules = []
    for (scheme, host, port), (paths, methods) in sorted(origins.items()):
        base = Request(scheme, host, port, "", "GET").url
        if "" in paths or not paths:
            text = f"allow {base}"
        else:
            prefix = _common_directory(paths)
            pattern = f"{base}{prefix}*" if prefix != "/" else base
            text = f"allow {pattern} {','.join(sorted(methods))}"
        try:
            parse_rule(text, "<learned>")
        except RuleError:
            continue
        rules.append(text)
    return rules


def _request_of(data: Any) -> Request | None:
    if not isinstance(data, dict):
        return None
    scheme, host, port = data.get("scheme"), data.get("host"), data.get("port")
    path, method = data.get("path"), data.get("method")
    if scheme not in SCHEMES or not isinstance(host, str) or not isinstance(port, int):
        return None
    if not isinstance(path, str) or not isinstance(method, str) or not 0 < port < 65536:
        return None
    if not method.isascii() or not method.isalpha() or len(method) > 32:
        return None
    if not path.startswith("/") or len(path) > 4096 or any(c in path for c in "*$ \t\r\n?#"):
        return None
    try:
        host = normalize_host(host)
    except RuleError:
        return None
    return Request(scheme, host, port, path, method.upper())


def _common_directory(paths: list[str]) -> str:
    """The longest ``/a/b/`` that every path starts with (at least ``/``)."""
    directories = [p.rsplit("/", 1)[0] + "/" for p in paths]
    prefix = directories[0]
    for directory in directories[1:]:
        while not directory.startswith(prefix):
            prefix = prefix.rstrip("/").rsplit("/", 1)[0] + "/"
    return prefix
