"""pasta has no ready descriptor: pysb waits for its default route, then for every
loopback port it forwards to be bound in the namespace (read from /proc/PID/net/*).

Under load, with thousands of ports, the program started before pasta's listeners and
got ECONNREFUSED from an allowed host port (CI's unprivileged pass: 10,000 rules under
unshare with pasta). These check the readers against real sockets of this process.
"""

from __future__ import annotations

import os
import socket

from pysb_core.net.netns.usernet import _bound, _expand


def test_expand_reads_ports_and_ranges() -> None:
    assert _expand(["80", "8000-8002"]) == {80, 8000, 8001, 8002}
    assert _expand([]) == set()


def test_bound_sees_a_tcp_listener_and_a_udp_socket_on_the_loopback_only() -> None:
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        udp.bind(("127.0.0.1", 0))
        tcp_port, udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        assert tcp_port not in _bound(os.getpid(), "tcp")  # bound, not yet listening
        tcp.listen()
        assert tcp_port in _bound(os.getpid(), "tcp")
        assert udp_port in _bound(os.getpid(), "udp")
        with socket.socket() as wildcard:
            wildcard.bind(("0.0.0.0", 0))
            wildcard.listen()
            assert wildcard.getsockname()[1] not in _bound(os.getpid(), "tcp")
