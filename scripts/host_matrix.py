"""Which provider works here for the user running this, without and with a filtered network.

Prints one Markdown table row per OS provider, for docs/providers.md's "Root and normal
users" table: run it once as root and once as a normal user (from a checkout that user can
read, with its own venv), and paste the rows. Each cell is a real run of ``pysb run``:

- *no network*: the program reads its project and finds no network but its own loopback;
- *filtered network*: a profile allowing ``tcp 127.0.0.1 P out``; the program reaches the
  host's service on P and is refused another port (traffic on 127.0.0.1 only).

Usage: ``python scripts/host_matrix.py`` (with the venv's python).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

PROVIDERS = ["subprocess", "landlock", "bwrap", "unshare", "firejail", "qemu"]

CLIENT = """
import socket, sys
for port in map(int, sys.argv[1:]):
    s = socket.socket(); s.settimeout(5)
    try:
        print(s.connect_ex(("127.0.0.1", port)))
    except OSError:  # the Python layer refuses before any packet
        print("refused")
"""


def _server() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server


def _run(project: Path, provider: str, *args: str) -> subprocess.CompletedProcess[str]:
    pysb = Path(sys.executable).with_name("pysb")
    return subprocess.run(
        [str(pysb), "run", "--provider", provider, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(Path.home())},
    )


def _cell(res: subprocess.CompletedProcess[str], works: bool) -> str:
    if res.returncode == 0 and works:
        return "works"
    if res.returncode == 125:
        first = res.stderr.strip().splitlines()[0].removeprefix("pysb: error: ")
        return f"refused (125): {first[:100]}"
    return f"FAILS (exit {res.returncode}): {res.stdout.split()}"


def main() -> None:
    who = "root" if os.getuid() == 0 else f"normal user (uid {os.getuid()})"
    project = Path(tempfile.mkdtemp(prefix=".pysb-matrix-", dir=Path.home()))
    allowed, other = _server(), _server()
    pa, po = allowed.getsockname()[1], other.getsockname()[1]
    try:
        (project / "client.py").write_text(CLIENT)
        for provider in PROVIDERS:
            (project / ".pysb.yaml").write_text("version: 1\nimports: [socket, sys]\n")
            plain = _run(project, provider, "client.py", str(pa))
            (project / ".pysb.yaml").write_text(
                f"version: 1\nimports: [socket, sys]\nnetwork:\n  - allow tcp 127.0.0.1 {pa} out\n"
            )
            filtered = _run(project, provider, "client.py", str(pa), str(po))
            seen, out = plain.stdout.split(), filtered.stdout.split()
            no_net = _cell(plain, len(seen) == 1 and seen != ["0"])
            net = _cell(filtered, len(out) == 2 and out[0] == "0" and out[1] != "0")
            print(f"| `{provider}` | {who} | {no_net} | {net} |", flush=True)
    finally:
        allowed.close()
        other.close()
        shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()
