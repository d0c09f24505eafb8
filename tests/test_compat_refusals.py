"""Refusals are the builtin exceptions they claim to be (issue 17, item 3): every one
carries the ``errno`` / ``strerror`` its base promises and its message as ``str()``, under
every provider, and keeps them when pickled (partial mode sends them back that way)."""

from __future__ import annotations

import errno
import json
import os
import pickle

import pytest

from pysb_core import errors
from pysb_core.testing import EVERY_PROVIDER, Project, require_provider

PROVIDERS = EVERY_PROVIDER

PROFILE = "version: 1\nimports: [os, json, socket, pickle]\nfiles:\n  expose-ro: [.]\n"

PROGRAM = r"""
import json, os, socket
out = {}
def t(name, fn):
    try:
        fn()
        out[name] = None
    except Exception as e:
        out[name] = [type(e).__name__, e.errno, e.strerror, str(e), getattr(e, "filename", None)]
t("hidden", lambda: open("/etc/pysb-compat-hidden"))
t("hidden_stat", lambda: os.stat("/etc/pysb-compat-hidden"))
t("write", lambda: open("data.txt", "w"))
t("api", lambda: os.system("true"))
t("network", lambda: socket.create_connection(("127.0.0.1", 9), timeout=5))
print(json.dumps(out))
"""


@pytest.mark.parametrize("provider", PROVIDERS)
def test_refusals_carry_errno_strerror_and_message(project: Project, provider: str) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.profile(PROFILE)
    project.file("data.txt", "x")
    project.file("prog.py", PROGRAM)
    r = project.run("run", "--provider", provider, "prog.py")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    expected = {
        "hidden": ("FileDeniedError", errno.ENOENT),
        "hidden_stat": ("FileDeniedError", errno.ENOENT),
        "write": ("WriteDeniedError", errno.EACCES),
        "api": ("ApiDeniedError", errno.EACCES),
        "network": ("NetworkDeniedError", errno.ECONNREFUSED),
    }
    for case, (kind, code) in expected.items():
        name, err, strerror, message, _filename = out[case]
        assert (name, err) == (kind, code), (case, out[case])
        assert isinstance(strerror, str) and strerror, (case, out[case])
        assert message and "None" not in message, (case, out[case])
        assert strerror == message, (case, out[case])


@pytest.mark.parametrize(
    ("cls", "base", "code"),
    [
        (errors.FileDeniedError, FileNotFoundError, errno.ENOENT),
        (errors.WriteDeniedError, PermissionError, errno.EACCES),
        (errors.NetworkDeniedError, ConnectionRefusedError, errno.ECONNREFUSED),
    ],
)
def test_denials_promise_what_their_base_does(cls: type, base: type, code: int) -> None:
    exc = cls("refused: add `x` to the profile", target="t", suggested_rule="x")
    assert isinstance(exc, base)
    assert (exc.errno, exc.strerror, str(exc)) == (code, str(exc), exc.args[0])
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls
    assert (back.errno, back.strerror, str(back), back.suggested_rule) == (
        code,
        str(exc),
        str(exc),
        "x",
    )


def test_api_and_import_denials_keep_their_attributes() -> None:
    api = errors.ApiDeniedError("no", qualname="os.system", category="process-exec")
    assert (api.errno, api.strerror) == (errno.EACCES, "no")
    back = pickle.loads(pickle.dumps(api))
    assert (back.errno, back.qualname, back.category) == (errno.EACCES, "os.system", "process-exec")
    imp = errors.ImportDeniedError("import of 'socket' refused", target="socket")
    assert (imp.name, imp.msg, str(imp)) == ("socket", str(imp), "import of 'socket' refused")
    back = pickle.loads(pickle.dumps(imp))
    assert (back.name, str(back)) == ("socket", str(imp))


NAMES = r"""
import smtplib, socket
try:
    socket.gethostbyname("uncovered.pysb.test")
except socket.gaierror as exc:
    refused = isinstance(exc, ConnectionRefusedError)
    print(type(exc).__name__, exc.errno == socket.EAI_NONAME, refused)
# smtplib names the client after the machine: gethostbyname(gethostname()), ready for a
# name that does not resolve (gaierror) -- the sandbox's own host name is not in any rule
print("smtp", smtplib.SMTP().local_hostname.startswith("["))
"""


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_refused_name_does_not_resolve_as_the_resolver_says(
    project: Project, provider: str
) -> None:
    """A name no rule covers raises what the resolver raises for a name that does not
    resolve (``socket.gaierror``, EAI_NONAME), and is still a NetworkDeniedError: code
    written for unresolvable names (smtplib, getfqdn users) runs on. It raised a bare
    ConnectionRefusedError, which smtplib.SMTP() let through (CPython's test_logging waited
    five minutes on SMTPHandlerTest under bwrap, whose sandbox has a host name of its own)."""
    if provider != "subprocess":
        require_provider(provider)
    project.profile("version: 1\nimports: '*'\n")
    project.file("names.py", NAMES)
    r = project.run("run", "--provider", provider, "names.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["NameResolutionDeniedError True True", "smtp True"], r.stdout


def test_a_name_refusal_is_both_builtins_and_survives_pickling() -> None:
    import socket

    exc = errors.NameResolutionDeniedError(
        "name resolution of 'x.test' refused before any query", target="x.test"
    )
    assert isinstance(exc, errors.NetworkDeniedError) and isinstance(exc, socket.gaierror)
    assert (exc.errno, exc.strerror) == (socket.EAI_NONAME, str(exc))
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is errors.NameResolutionDeniedError and back.errno == socket.EAI_NONAME


UDP_PROGRAM = r"""
import json, socket
out = []
for family in (socket.AF_INET, socket.AF_INET6):
    try:
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.sendto(b"x", ("127.0.0.1" if family == socket.AF_INET else "::1", 9))
    except OSError as e:
        out.append([type(e).__name__, e.suggested_rule if hasattr(e, "suggested_rule") else None])
with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:  # TCP sockets are still made
    out.append(tcp.type == socket.SOCK_STREAM)
print(json.dumps(out))
"""


@pytest.mark.parametrize("provider", ["subprocess", "landlock", "bwrap"])
def test_a_udp_socket_under_tcp_rules_is_refused_as_a_network_access(
    project: Project, provider: str, pysb_python: str
) -> None:
    """With TCP rules only, landlock's seccomp filter refuses a UDP socket at creation
    (landlock cannot filter UDP): that refusal is a NetworkDeniedError naming the rule to
    add, as the guard's own refusal of the send is elsewhere (it was a bare
    PermissionError 13). On 3.11 to 3.13."""
    if provider != "subprocess":
        require_provider(provider)
    project.profile("version: 1\nimports: [json, socket]\nnetwork: [allow tcp 127.0.0.1 80 out]\n")
    project.file("app.py", UDP_PROGRAM)
    res = project.run("run", "--provider", provider, "app.py", python=pysb_python)
    assert res.returncode == 0, res.stderr
    inet, inet6, tcp = json.loads(res.stdout)
    for name, rule in (inet, inet6):
        assert name == "NetworkDeniedError", res.stdout
        assert rule.startswith("allow udp "), res.stdout
    assert tcp is True


UDPLITE_PROGRAM = r"""
import json, socket
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, getattr(socket, "IPPROTO_UDPLITE", 136))
    with s:
        s.settimeout(10)
        s.bind(("127.0.0.1", 0))
        s.sendto(b"lite", s.getsockname())
        out = ["ok", s.recv(16).decode()]
except OSError as e:
    out = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("rules", ["allow any 127.0.0.1 * any", "allow tcp 127.0.0.1 * any"])
def test_a_udplite_socket_is_judged_by_the_udp_rules_on_every_provider(
    project: Project, provider: str, rules: str
) -> None:
    """UDP-Lite on the loopback: allowed by a rule whose protocols include udp (``any``),
    refused by the guard under TCP rules. Where the OS layer does not carry it, the socket
    is refused at creation with a NetworkDeniedError that says so, never a bare errno or a
    hang: landlock's seccomp filter lets through UDP's protocol alone (a bare EACCES
    before), and the packet filter of bwrap's, unshare's and firejail's network namespace
    accepts TCP and UDP only (the first datagram failed with EPERM while its peer waited
    for ever: CPython's test_socket hung). Every UDP-Lite bind was refused before
    ('network rules cover only TCP and UDP')."""
    if provider != "subprocess":
        require_provider(provider)
    project.profile(f"version: 1\nimports: [json, socket]\nnetwork: ['{rules}']\n")
    project.file("app.py", UDPLITE_PROGRAM)
    res = project.run("run", "--provider", provider, "app.py", timeout=120)
    if provider == "firejail" and os.geteuid() != 0:
        # set-uid firejail enforces network rules for root only: refused before the start
        assert res.returncode == 125 and "needs root with firejail" in res.stderr, res.stderr
        return
    assert res.returncode == 0, res.stderr
    kind, text = json.loads(res.stdout)
    if rules.startswith("allow tcp"):
        assert kind == "NetworkDeniedError", res.stdout
        return
    if provider in ("landlock", "bwrap", "unshare", "firejail"):
        assert kind == "NetworkDeniedError" and "udplite socket refused" in text, res.stdout
    else:
        assert [kind, text] == ["ok", "lite"], res.stdout
