"""Inside the sandbox: the proxy's refusal becomes the ``NetworkDeniedError`` it stands for.

Why: the proxy refuses on the host with a 403 whose status line and ``X-Pysb-Refusal``
header say why and which profile line would allow the request (issue 31, item 4), but a
program sees an HTTP status -- ``urllib`` an ``HTTPError``, ``requests``, ``httpx`` and
``aiohttp`` a 403 response, or their tunnel/proxy error for a refused ``CONNECT``. pysb's
other refusals are ``DeniedError``s that ``except NetworkDeniedError``,
``sandbox_denials()`` and partial mode's caller recognise; this child set-up makes the
proxy's the same, with the same text.

A refusal counts only when it is the proxy's:

- a 403 response carries the refusal header *and this run's token*
  (``X-Pysb-Refusal-Token``). The proxy strips both headers from every server's response
  it reads; the token keeps a server behind a tunnel the proxy cannot read (HTTPS not
  intercepted) from forging a refusal. Where the library says cheaply which proxy the
  connection went to (``http.client``, ``httpcore``), it must be this one too;
- a refused ``CONNECT`` (only the proxy answers a ``CONNECT``): a 403 whose reason phrase
  is a refusal, on a connection to this proxy, or with the token in its headers where the
  library keeps them (``aiohttp``).

What is patched, each when the program first imports it (the set-up imports none of
them: a run that never speaks HTTP pays nothing):

- ``http.client`` (``urllib``, ``urllib3``/``requests``): ``HTTPConnection.getresponse``
  and ``HTTPConnection._tunnel``;
- ``httpcore`` (``httpx``, sync and async): ``HTTPProxy.handle_request`` and
  ``AsyncHTTPProxy.handle_async_request``, the pools ``httpx`` builds for a proxy (the
  ``ProxyError`` of a ``CONNECT``, a 403 response);
- ``aiohttp``: ``ClientSession._request``, under every ``get``/``request``/``ws_connect``
  (the ``ClientHttpProxyError`` of a ``CONNECT``, a 403 response);
- ``certifi``, for a run whose proxy decrypts: ``where()`` and ``contents()`` give the
  bundle the sandbox trusts (:func:`trust_bundle`).

Libraries wrap what they see: ``urllib`` raises the denial itself for a plain request and
a ``URLError`` whose ``reason`` is it for a refused tunnel, ``requests`` a
``ConnectionError``/``ProxyError`` whose cause chain holds it (``sandbox_denials()`` finds
it); ``httpx`` and ``aiohttp`` raise it as is. The import hook is the import guard's
(``on_import``, which patches every instance of a module as its loader finishes) when the
run has the Python guards, else :mod:`pysb_proxy.onimport`'s meta-path finder. The module
is loaded only for a run with a proxy.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # runs in the sandbox: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: What every refusal of the proxy starts with (server.refusal_text).
PREFIX = "pysb: egress refused"
_TUNNEL = "Tunnel connection failed: 403 "
_RULE = "add to the profile: "
REFUSAL = "x-pysb-refusal"
TOKEN = "x-pysb-refusal-token"

#: The import guard, when this run has one: the bootstrap imports the guards before the
#: child set-ups' modules, and the guard takes its own modules out of ``sys.modules`` when
#: it installs, so it is found now or never.
_IMPORT_GUARD = sys.modules.get("pysb_guards.imports.guard")


def denial(text: str) -> Exception:
    """The ``NetworkDeniedError`` of one refusal text (target and suggested rule parsed)."""
    from pysb_core import NetworkDeniedError

    text = text[:4096]
    target = text[len(PREFIX) :].lstrip(": ").split(": ", 1)[0] if text.startswith(PREFIX) else ""
    rule = text.rsplit(_RULE, 1)[1] if _RULE in text else ""
    return NetworkDeniedError(text, target=target, suggested_rule=rule)


def install_refusals(host: str, port: int, token: str) -> None:
    """Have ``http.client``, ``httpcore`` and ``aiohttp`` patched when they are imported
    (see the module docstring); ``host:port`` is the proxy, ``token`` its refusals'."""
    when_imported("http.client", lambda module: _patch_http_client(module, host, port, token))
    when_imported("httpcore", lambda module: _patch_httpcore(module, host, port, token))
    when_imported("aiohttp", lambda module: _patch_aiohttp(module, token))


def trust_bundle(bundle: str) -> None:
    """Have ``certifi`` name the run's bundle (the host's CAs and the run's CA) when the
    program imports it (issue 31 item 3: the certifi bundle seen by the child).

    Why: ``SSL_CERT_FILE`` and ``REQUESTS_CA_BUNDLE`` reach OpenSSL's defaults and
    ``requests``, but code that builds its context from ``certifi.where()`` itself
    (``ssl.create_default_context(cafile=certifi.where())``, common with ``aiohttp`` and
    ``websockets``) would read certifi's own file, which lacks the run's CA, and fail the
    proxy's decrypted connections. The bundle is a file pysb exposes read-only."""
    when_imported("certifi", lambda module: _patch_certifi(module, bundle))


def _patch_certifi(module: Any, bundle: str) -> None:
    def where() -> str:
        return bundle

    def contents() -> str:
        with open(bundle, encoding="ascii") as f:
            return f.read()

    for holder in (module, getattr(module, "core", None)):
        if holder is not None:
            holder.where = _wraps(holder.where, where)
            holder.contents = _wraps(holder.contents, contents)


def refusal_of(status: int, header: Callable[[str], Any], token: str) -> str | None:
    """The proxy's refusal text of a response, or None for any other response.

    ``header(name)`` is the response's value of a header (str or bytes, None when absent).
    """
    if status != 403:
        return None
    text, sent = _text(header(REFUSAL)), _text(header(TOKEN))
    if sent == token and text.startswith(PREFIX):
        return text
    return None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("ascii", "replace")
    return value if isinstance(value, str) else ""


def _byte_header(headers: Any, name: str) -> bytes | None:
    """A header's value in ``httpcore``'s list of ``(bytes, bytes)`` (names in any case)."""
    wanted = name.encode("ascii")
    for key, value in headers:
        if key.lower() == wanted:
            return bytes(value)
    return None


def _wraps(original: Any, replacement: Any) -> Any:
    import functools

    return functools.wraps(original)(replacement)


# -- http.client: urllib, urllib3 / requests --


def _patch_http_client(module: Any, host: str, port: int, token: str) -> None:
    connection = module.HTTPConnection
    getresponse = connection.getresponse
    tunnel = connection._tunnel

    def via_proxy(conn: Any) -> bool:
        return bool(conn.host == host and conn.port == port)

    def pysb_getresponse(self: Any) -> Any:
        response = getresponse(self)
        if via_proxy(self):
            text = refusal_of(response.status, response.getheader, token)
            if text is not None:
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

    connection.getresponse = _wraps(getresponse, pysb_getresponse)
    connection._tunnel = _wraps(tunnel, pysb_tunnel)


# -- httpcore: httpx, sync and async --


def _patch_httpcore(module: Any, host: str, port: int, token: str) -> None:
    proxy_error = module.ProxyError
    proxy_host = host.encode("ascii")
    tunnel_refused = "403 " + PREFIX

    def via_proxy(pool: Any) -> bool:
        url = getattr(pool, "_proxy_url", None)
        return url is not None and url.host == proxy_host and url.port == port

    def refused_connect(pool: Any, exc: Exception) -> str | None:
        # httpcore's message for a CONNECT answered non-2xx: "STATUS REASON-PHRASE"
        message = str(exc)
        if message.startswith(tunnel_refused) and via_proxy(pool):
            return message[len("403 ") :]
        return None

    def refused(pool: Any, response: Any) -> str | None:
        if not via_proxy(pool):
            return None
        return refusal_of(response.status, lambda name: _byte_header(response.headers, name), token)

    sync_pool = module.HTTPProxy
    handle = sync_pool.handle_request

    def handle_request(self: Any, request: Any) -> Any:
        try:
            response = handle(self, request)
        except proxy_error as exc:
            text = refused_connect(self, exc)
            if text is None:
                raise
            raise denial(text) from None
        text = refused(self, response)
        if text is not None:
            response.close()
            raise denial(text)
        return response

    async_pool = module.AsyncHTTPProxy
    handle_async = async_pool.handle_async_request

    async def handle_async_request(self: Any, request: Any) -> Any:
        try:
            response = await handle_async(self, request)
        except proxy_error as exc:
            text = refused_connect(self, exc)
            if text is None:
                raise
            raise denial(text) from None
        text = refused(self, response)
        if text is not None:
            await response.aclose()
            raise denial(text)
        return response

    sync_pool.handle_request = _wraps(handle, handle_request)
    async_pool.handle_async_request = _wraps(handle_async, handle_async_request)


# -- aiohttp --


def _patch_aiohttp(module: Any, token: str) -> None:
    proxy_error = module.ClientHttpProxyError
    session = module.ClientSession
    request = session._request

    async def pysb_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            response = await request(self, *args, **kwargs)
        except proxy_error as exc:  # a CONNECT answered non-200, its headers kept
            headers = exc.headers
            text = refusal_of(exc.status, lambda name: headers and headers.get(name), token)
            if text is None:
                raise
            raise denial(text) from None
        text = refusal_of(response.status, response.headers.get, token)
        if text is not None:
            response.close()
            raise denial(text)
        return response

    session._request = _wraps(request, pysb_request)


# -- the import hook --


def when_imported(name: str, patch: Callable[[Any], None]) -> None:
    """Run ``patch(module)`` when module ``name`` has been executed (now if it is loaded):
    through the import guard, which also patches a module set aside at its install, else
    through :mod:`pysb_proxy.onimport`'s finder (a run without the Python guards)."""
    guard = _IMPORT_GUARD
    if guard is not None:
        try:
            guard.on_import(name, patch)
            return
        except RuntimeError:  # the guards are there, the import guard is not installed
            pass
    from pysb_proxy.onimport import after_import

    after_import(name, patch)
