"""The pysb demo: the explicit flow -- learn a profile, then enforce it under an OS provider.

Run with ``make demo``. It creates a throw-away project with a public data directory and a
secret file beside it, and a program that reads the file named on its command line, once
with ``open()`` and once with ``/bin/cat``. Then:

0. ``pysb run app.py SECRET`` with no profile: refused (exit 125) -- pysb never runs a
   program unconfined unless asked -- with the command that would learn one;
1. ``pysb run --learn app.py data/hello.txt``: a learning run (no sandbox, and pysb says
   so) on an ordinary input writes a least-privilege ``.pysb.yaml``, shown for review;
2. ``pysb run --verbose app.py SECRET``: the learned profile enforced by the Python
   guards and the OS provider ``auto`` chooses (the strongest that runs here: it says which
   and why): the secret read is refused with the profile line that would allow it;
3. the same with ``--no-python-guards``: ``/bin/cat`` on the secret is refused by the
   kernel (the OS provider) alone.

The profile the learning run wrote and trusted goes with the throw-away project: its
trust record is revoked at the end (``pysb trust --revoke``), so the user's trust store
keeps nothing of the demo.
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
target = sys.argv[1]
try:
    print(f"open({target!r}) ->", open(target).read().strip())
except OSError as e:
    print(f"open({target!r}) ->", type(e).__name__ + ":", e)
r = subprocess.run(["/bin/cat", target], capture_output=True, text=True)
print(f"/bin/cat {target} ->", "exit", r.returncode, r.stderr.strip() or r.stdout.strip())
"""


def _step(pysb: str, project: Path, title: str, args: list[str]) -> subprocess.CompletedProcess:
    print(f"== {title}\n$ pysb {' '.join(args)}")
    r = subprocess.run([pysb, *args], cwd=project, capture_output=True, text=True)
    print(r.stdout + (r.stderr and f"[stderr] {r.stderr}"), end="")
    print(f"[exit {r.returncode}]\n")
    return r


def main() -> None:
    pysb = shutil.which("pysb", path=os.path.dirname(sys.executable)) or "pysb"
    # Not under /tmp: every provider gives the program a private /tmp (or TMPDIR) of its own,
    # so a secret placed there would simply not exist inside, and the demo would show nothing.
    with tempfile.TemporaryDirectory(prefix="pysb-demo-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        project = root / "project"
        (project / "data").mkdir(parents=True)
        (project / "data" / "hello.txt").write_text("hello from an exposed directory\n")
        secret = root / "secret.txt"
        secret.write_text("TOP SECRET: outside every exposure\n")
        (project / "app.py").write_text(PROGRAM)
        enforce = ["run", "--verbose", "app.py", str(secret)]
        try:
            _steps(pysb, project, enforce)
        finally:
            # The learning run trusted the profile it wrote (in the user's own trust
            # store): forget it with the directory, or a record of it would stay behind.
            if (project / ".pysb.yaml").exists():
                subprocess.run([pysb, "trust", "--revoke", "-q", ".pysb.yaml"], cwd=project)


def _steps(pysb: str, project: Path, enforce: list[str]) -> None:
    """Steps 0 to 3 of the module's docstring, each shown with its command and output."""
    r = _step(pysb, project, "No profile yet: pysb refuses to run unconfined", enforce)
    if r.returncode != 125 or "TOP SECRET" in r.stdout:
        sys.exit("demo: a run without a profile was not refused -- this must never happen")
    learn = ["run", "--learn", "app.py", "data/hello.txt"]
    r = _step(pysb, project, "Learn a profile from an ordinary run (no sandbox)", learn)
    if r.returncode != 0:
        sys.exit("demo: the learning run failed")
    print(f"$ cat .pysb.yaml   # review it\n{(project / '.pysb.yaml').read_text()}")
    for extra, title in (
        ([], "Enforce it: Python guards + the OS provider auto chooses"),
        (["--no-python-guards"], "The OS provider alone (the kernel refuses)"),
    ):
        r = _step(pysb, project, title, [*enforce[:2], *extra, *enforce[2:]])
        if r.returncode == 125 and "no OS sandbox can run this profile here" in r.stderr:
            sys.exit("demo: no OS provider is available here (see `pysb providers`)")
        if r.returncode != 0 or "TOP SECRET" in r.stdout:
            sys.exit("demo: the secret was readable -- this must never happen")


if __name__ == "__main__":
    main()
