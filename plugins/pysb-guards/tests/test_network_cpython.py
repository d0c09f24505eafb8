"""The network guard gives CPython's own answers where the rules allow, on 3.11 to 3.13: the
same errors in the same order, the same reference counts, and UDP-Lite judged by the rules
(CPython's ``test_socket`` under the guards: ``testSendtoErrors``,
``testRefCountGetNameInfo`` and the UDP-Lite tests failed). Each snippet runs plain and
guarded, in real child interpreters; traffic stays on 127.0.0.0/8.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from test_network_guard import rules, run_child

from pysb_core.policy import Policy

UDPLITE = getattr(socket, "IPPROTO_UDPLITE", 136)


def both(tmp_path: Path, policy: Policy, code: str, python: str) -> tuple[dict, dict]:
    """The results of ``code`` plain and with the guard installed."""
    plain, _ = run_child(tmp_path, policy, code, install=False, python=python)
    guarded, _ = run_child(tmp_path, policy, code, python=python)
    return plain, guarded


def test_sendto_refuses_bad_data_as_cpython_before_judging(tmp_path: Path, python: str) -> None:
    """``sendto`` with data or flags its C parsing refuses raises CPython's TypeError even to
    an address no rule allows (the guard judged the address first: a refusal naming it);
    good data to that address is still refused."""
    code = """
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(('127.0.0.1', 0))
    far = ('127.0.0.2', u.getsockname()[1])
    attempt('str', u.sendto, '\\u2620', far)
    attempt('complex', u.sendto, 5j, far)
    attempt('str_flags', u.sendto, '\\u2620', 0, far)
    attempt('flags_str', u.sendto, b'foo', 'bar', far)
    attempt('flags_none', u.sendto, b'foo', None, far)
    attempt('one_arg', u.sendto, b'foo')
    attempt('four_args', u.sendto, b'foo', 0, far, 4)
    attempt('none_address', u.sendto, b'foo', None)
    """
    policy = Policy(network=rules("allow udp 127.0.0.1 * any"))
    plain, guarded = both(tmp_path, policy, code, python)
    assert guarded == plain
    assert plain["str"]["message"] == "a bytes-like object is required, not 'str'"
    assert plain["flags_str"]["error"] == "TypeError"
    control = """
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attempt('good', u.sendto, b'x', ('127.0.0.2', 9))
    attempt('good_flags', u.sendto, b'x', 0, ('127.0.0.2', 9))
    """
    refused, _ = run_child(tmp_path, policy, control, python=python)
    assert refused["good"]["error"] == "NetworkDeniedError"
    assert refused["good_flags"]["error"] == "NetworkDeniedError"


def test_getnameinfo_keeps_no_reference_on_a_type_error(tmp_path: Path, python: str) -> None:
    """While the TypeError of ``getnameinfo(name, 0)`` is handled, its argument has the
    references it had: the face's frame, which the traceback keeps, holds no argument."""
    code = """
    import sys
    arg = 'a' + 'b' * 3
    def count(fn, *args):
        before = sys.getrefcount(arg)
        try:
            fn(*args)
        except TypeError:
            return sys.getrefcount(arg) - before
        return 'no error'
    results['getnameinfo'] = count(socket.getnameinfo, arg, 0)
    results['connect'] = count(socket.socket().connect, arg)
    """
    plain, guarded = both(
        tmp_path, Policy(network=rules("allow tcp 127.0.0.1 * out")), code, python
    )
    assert guarded == plain
    assert plain["getnameinfo"] == 0


UDPLITE_ECHO = f"""
def lite():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, {UDPLITE})
    with s:
        s.settimeout(5)
        s.bind(('127.0.0.1', 0))
        s.sendto(b'lite', s.getsockname())
        return s.recv(16).decode()
attempt('lite', lite)
"""


@pytest.mark.parametrize(
    ("lines", "allowed"),
    [
        (("allow any 127.0.0.1 * any",), True),
        (("allow udp 127.0.0.1 * any",), True),
        (("allow tcp,udp 127.0.0.1 * any",), True),
        (("allow tcp 127.0.0.1 * any",), False),
        (("allow any 127.0.0.1 * any", "deny udp 127.0.0.1 * any"), False),
        (("allow any 127.0.0.2 * any",), False),
    ],
)
def test_udplite_is_judged_by_the_udp_rules(
    tmp_path: Path, python: str, lines: tuple[str, ...], allowed: bool
) -> None:
    """A UDP-Lite socket's addresses are judged by the udp rules (``any`` and ``tcp,udp``
    include them), a deny of udp too; before, every UDP-Lite bind was refused ('network
    rules cover only TCP and UDP')."""
    plain, guarded = both(tmp_path, Policy(network=rules(*lines)), UDPLITE_ECHO, python)
    if "error" in plain["lite"]:
        pytest.skip(f"no UDP-Lite in this kernel: {plain['lite']}")
    assert plain["lite"] == {"ok": "lite"}
    if allowed:
        assert guarded == plain
    else:
        assert guarded["lite"]["error"] == "NetworkDeniedError", guarded
