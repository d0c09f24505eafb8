"""Guard-overhead loops, run unchanged by plain python, ``pysb run`` and ``python-sb``.

``python _guard_loops.py PORT SCALE REPS`` prints one JSON object: for each operation, the
median (and min) time per operation in seconds over REPS repetitions of a perf_counter
loop. The working directory must hold ``data.txt``; ``BENCH_VAR`` should be set. The
loopback listener for ``connect`` is opened by this same process on 127.0.0.1:PORT (a
namespace provider has its own loopback, so a listener outside would be out of reach),
with one accept thread that closes what it accepts; PORT 0 leaves ``connect`` out (for a
provider that refuses loopback rules). Standard library only, and only the modules the
benchmark's profiles allow: json, os, socket, importlib, threading, time.
"""

import importlib
import json
import os
import socket
import sys
import threading
import time

COUNTS = {"open": 4000, "stat": 10000, "import_module": 20000, "connect": 1000, "environ": 100000}


def _listener(port: int) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(256)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return server


def loop_open(n: int, port: int) -> None:
    for _ in range(n):
        open("data.txt").close()


def loop_stat(n: int, port: int) -> None:
    stat = os.stat
    for _ in range(n):
        stat("data.txt")


def loop_import_module(n: int, port: int) -> None:
    imp = importlib.import_module
    for _ in range(n):
        imp("json")


def loop_connect(n: int, port: int) -> None:
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.connect(("127.0.0.1", port))
        s.close()


def loop_environ(n: int, port: int) -> None:
    get = os.environ.get
    for _ in range(n):
        get("BENCH_VAR")


LOOPS = {
    "open": loop_open,
    "stat": loop_stat,
    "import_module": loop_import_module,
    "connect": loop_connect,
    "environ": loop_environ,
}


def main() -> None:
    port, scale, reps = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    server = _listener(port) if port else None
    result = {}
    for name, loop in LOOPS.items():
        if name == "connect" and server is None:
            continue
        n = max(10, int(COUNTS[name] * scale))
        loop(max(1, n // 10), port)  # warm-up: caches, first-use paths
        per_op = []
        for _ in range(reps):
            t = time.perf_counter()
            loop(n, port)
            per_op.append((time.perf_counter() - t) / n)
        per_op.sort()
        result[name] = {"median_s": per_op[len(per_op) // 2], "min_s": per_op[0], "n": n}
    if server is not None:
        server.close()
    sys.stdout.write(json.dumps(result) + "\n")


main()
