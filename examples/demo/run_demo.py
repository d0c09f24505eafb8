"""The pysb demo: a real program under a real OS provider, one allowed and one refused access.

Run with ``make demo``. It creates a throw-away project with a public data directory and a
secret file beside it, writes a profile that exposes only the data, and runs the same
program twice:

1. with the Python guards and the OS provider: the secret read is refused by the Python
   layer, with the profile line that would allow it;
2. with ``--no-python-guards``: the program runs ``/bin/cat`` on the secret, and the kernel
   (the OS provider) refuses it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = """\
import subprocess, sys
print("read data/hello.txt ->", open("data/hello.txt").read().strip())
try:
    open(sys.argv[1]).read()
    print("read the secret -> NOT REFUSED")
except OSError as e:
    print("read the secret ->", type(e).__name__ + ":", e)
r = subprocess.run(["/bin/cat", sys.argv[1]], capture_output=True, text=True)
print("/bin/cat the secret ->", "exit", r.returncode, r.stderr.strip() or r.stdout.strip())
"""

PROFILE = """\
version: 1
files:
  expose-ro: [.]
imports: [subprocess]
api:
  allow: [process-exec]
env:
  PATH: /usr/bin:/bin
"""


def pick_provider(pysb: str) -> str:
    import json

    out = subprocess.run([pysb, "providers", "--json"], capture_output=True, text=True, check=True)
    available = {p["name"] for p in json.loads(out.stdout) if p["available"]}
    for name in ("bwrap", "landlock", "unshare", "firejail"):
        if name in available:
            return name
    sys.exit("demo: no OS provider is available here (see `pysb providers`)")


def main() -> None:
    pysb = shutil.which("pysb", path=os.path.dirname(sys.executable)) or "pysb"
    provider = pick_provider(pysb)
    with tempfile.TemporaryDirectory(prefix="pysb-demo-") as tmp:
        root = Path(tmp)
        project = root / "project"
        (project / "data").mkdir(parents=True)
        (project / "data" / "hello.txt").write_text("hello from an exposed directory\n")
        secret = root / "secret.txt"
        secret.write_text("TOP SECRET: outside every exposure\n")
        (project / "app.py").write_text(PROGRAM)
        (project / ".pysb.yaml").write_text(PROFILE)
        print(f"$ cat .pysb.yaml\n{PROFILE}")
        for extra, title in (
            ([], f"Python guards + OS provider '{provider}'"),
            (["--no-python-guards"], f"OS provider '{provider}' alone (the kernel refuses)"),
        ):
            cmd = [pysb, "run", "--provider", provider, *extra, "app.py", str(secret)]
            shown = " ".join(["pysb run --provider", provider, *extra, "app.py", str(secret)])
            print(f"== {title}\n$ {shown}")
            r = subprocess.run(cmd, cwd=project, capture_output=True, text=True)
            print(r.stdout + (r.stderr and f"[stderr] {r.stderr}"), end="")
            print(f"[exit {r.returncode}]\n")
            if "NOT REFUSED" in r.stdout or "TOP SECRET" in r.stdout:
                sys.exit("demo: the secret was readable -- this must never happen")


if __name__ == "__main__":
    main()
