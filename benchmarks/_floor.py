"""The floors of partial mode's figures, measured in the same run as the figures.

Why: a call's latency and a payload's time mean little alone on a shared machine whose
load moves them by half; beside them, the same transfer without any sandbox -- a pickle
ping-pong between two Python processes over a Unix socketpair, and a 10 MiB payload sent
with out-of-band pickle-5 buffers -- says how far pysb is from what the hardware allows.
Standard library only (it runs with the reference's interpreter too).
"""

from __future__ import annotations

import os
import pickle
import socket
import statistics
import struct
import time

_LEN = struct.Struct("<Q")


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise EOFError
        got += k
    return out


def _recv_msg(sock: socket.socket) -> bytearray:
    (n,) = _LEN.unpack(_recv_exact(sock, 8))
    return _recv_exact(sock, n)


def _send_msg(sock: socket.socket, data: bytes | memoryview) -> None:
    sock.sendall(_LEN.pack(len(data)))
    sock.sendall(data)


def _echo(sock: socket.socket) -> None:
    """The other process: decode each message and send the decoded value back."""
    try:
        while True:
            kind = _recv_exact(sock, 1)
            if kind == b"p":  # in-band pickle
                value = pickle.loads(_recv_msg(sock))
                _send_msg(sock, pickle.dumps(value, protocol=5))
            elif kind == b"b":  # out-of-band: header pickle, then one raw buffer
                head = _recv_msg(sock)
                buf = _recv_msg(sock)
                value = pickle.loads(head, buffers=[buf])
                _send_msg(sock, pickle.dumps(len(value), protocol=5))
            else:
                return
    except EOFError:
        return
    finally:
        os._exit(0)


def measure(calls: int = 2000, mib: int = 10, reps: int = 5) -> dict[str, float]:
    """p50 of a trivial pickle round trip, and a ``mib`` MiB bytes argument sent with an
    out-of-band buffer (pickle 5), between this process and a forked one."""
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        a.close()
        _echo(b)
    b.close()
    try:
        lat = []
        for i in range(calls + 100):
            t = time.perf_counter()
            a.sendall(b"p")
            _send_msg(a, pickle.dumps(((), (i,), {}), protocol=5))
            pickle.loads(_recv_msg(a))
            if i >= 100:
                lat.append(time.perf_counter() - t)
        lat.sort()
        payload = bytes(mib << 20)
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            buffers: list[pickle.PickleBuffer] = []
            head = pickle.dumps(
                pickle.PickleBuffer(payload), protocol=5, buffer_callback=buffers.append
            )
            a.sendall(b"b")
            _send_msg(a, head)
            _send_msg(a, buffers[0].raw())
            pickle.loads(_recv_msg(a))
            times.append(time.perf_counter() - t)
        return {
            "ping_pong_p50_s": lat[len(lat) // 2],
            f"oob_{mib}mib_s": statistics.median(times),
        }
    finally:
        a.close()
        os.waitpid(pid, 0)  # our own forked child


if __name__ == "__main__":
    import json

    print(json.dumps(measure()))
