"""Inside the sandbox: the proxy's refusal becomes the ``NetworkDeniedError`` it stands for.

Why: the proxy refuses on the host with a 403 whose status line and ``X-Pysb-Refusal``
header say why and which profile line would allow the request (issue 31, item 4), but a
program sees an HTTP status -- ``urllib`` an ``HTTPError``, ``requests`` a 403 response,
``http.client`` a ``Tunnel connection failed`` ``OSError``. pysb's other refusals are
``DeniedError``s that ``except NetworkDeniedError``, ``sandbox_denials()`` and partial mode's
caller recognise; this child set-up makes the proxy's the same, with the same text.

What it patches is ``http.client``, which ``urllib`` and ``urllib3`` (``requests``) build on:

- ``HTTPConnection.getresponse``: a 403 on a connection to the proxy that carries the
  proxy's refusal header *and this run's token* (a plain-HTTP request, or HTTPS the proxy
  decrypts for path/method rules) raises ``NetworkDeniedError``. The proxy strips both
  headers from every server's response; the token keeps a server behind a tunnel the
  proxy cannot read from forging a refusal;
- ``HTTPConnection._tunnel``: a CONNECT the proxy answered with 403 (only the proxy
  answers a CONNECT) raises ``NetworkDeniedError`` instead of ``OSError``.

Libraries wrap what they see: ``urllib`` raises the denial itself for a plain request and
a ``URLError`` whose ``reason`` is it for a refused tunnel, ``requests`` a
``ConnectionError``/``ProxyError`` whose cause chain holds it (``sandbox_denials()`` finds
it). ``httpx`` and ``aiohttp`` do not use ``http.client``: they keep the proxy's reason on
their own errors and responses. The module is loaded only for a run with a proxy.
"""

from __future__ import annotations

TYPE_CHECKING = False  # runs in the sandbox: no typing at run time
if TYPE_CHECKING:
    from typing import Any

#: What every refusal of the proxy starts with (server.refusal_text).
PREFIX = "pysb: egress refused"
_TUNNEL = "Tunnel connection failed: 403 "
_RULE = "add to the profile: "


def denial(text: str) -> Exception:
    """The ``NetworkDeniedError`` of one refusal text (target and suggested rule parsed)."""
    from pysb_core import NetworkDeniedError

    text = text[:4096]
    target = text[len(PREFIX) :].lstrip(": ").split(": ", 1)[0] if text.startswith(PREFIX) else ""
    rule = text.rsplit(_RULE, 1)[1] if _RULE in text else ""
    return NetworkDeniedError(text, target=target, suggested_rule=rule)


def install_refusals(host: str, port: int, token: str) -> None:
    """Patch ``http.client`` (see the module docstring); ``host:port`` is the proxy."""
    import http.client

    connection = http.client.HTTPConnection
    getresponse = connection.getresponse
    tunnel = connection._tunnel  # type: ignore[attr-defined]

    def via_proxy(conn: Any) -> bool:
        return bool(conn.host == host and conn.port == port)

    def pysb_getresponse(self: Any) -> Any:
        response = getresponse(self)
        if response.status == 403 and via_proxy(self):
            text = response.getheader("X-Pysb-Refusal") or ""
            if response.getheader("X-Pysb-Refusal-Token") == token and text.startswith(PREFIX):
                response.close()
                raise denial(text)
        return response

    def pysb_tunnel(self: Any) -> Any:
        try:
            return tunnel(self)
        except OSError as exc:
            message = str(exc)
            if message.startswith(_TUNNEL + PREFIX) and via_proxy(self):
                raise denial(message[len(_TUNNEL) :]) from None
            raise

    connection.getresponse = pysb_getresponse  # type: ignore[method-assign]
    connection._tunnel = pysb_tunnel  # type: ignore[attr-defined]
