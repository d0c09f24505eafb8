"""The learning corpus: real programs of different shapes, learned once, run everywhere.

Each program is learned once with ``pysb run --learn`` in a fresh project (a fake ``HOME``
inside it), its profile is checked for tightness, and it is then run *unchanged* under every
provider available here. ``tests/test_learning_corpus.py`` runs it in the test suite;
``make bench`` (section ``learning``) and ``python benchmarks/learning_corpus.py`` print the
table program x provider that docs/learning.md shows.

Tight means: no exposure of ``/``, of the project itself when only a subdirectory was
written (``.`` read-write), of ``~`` or of any directory above the project; and every
exposure inside the project is one the program's own shape explains (``expected``).
Network: local servers only, on 127.0.0.1 (a server the harness starts, or the program's own).
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROVIDERS = ("subprocess", "landlock", "bwrap", "unshare", "firejail", "qemu")
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


@dataclass
class Program:
    """One corpus program: its project files, its command line, what a run prints."""

    name: str
    shape: str
    argv: list[str]
    files: dict[str, str] = field(default_factory=dict)
    #: Exposures inside the project (or the fake home) its shape explains, as learning
    #: writes them: {"./reports": "rw", "./data": "ro", "~/.config/app": "ro"}.
    expected: dict[str, str] = field(default_factory=dict)
    #: A substring every run's stdout holds.
    prints: str = "ok"
    #: Extra set-up in the project before learning (a git repository...).
    setup: Callable[[Path], None] | None = None
    #: A loopback HTTP server the harness runs during every run (its URL in APP_URL).
    server: bool = False
    #: A free loopback port the program serves on itself (in APP_PORT).
    own_port: bool = False


# --------------------------------------------------------------------------------------
# The programs
# --------------------------------------------------------------------------------------

PYTEST_PROJECT = {
    "calc/__init__.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": (
        "from calc import add\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n"
        "def test_tmp(tmp_path):\n    (tmp_path / 'f').write_text('x')\n"
        "    assert (tmp_path / 'f').read_text() == 'x'\n"
    ),
    "pyproject.toml": "[tool.pytest.ini_options]\npythonpath = ['.']\n",
}

REQUESTS_CLIENT = """
import os, requests
url = os.environ["APP_URL"]
with requests.Session() as s:
    r = s.get(url + "/hello", timeout=10)
    r.raise_for_status()
    os.makedirs("downloads", exist_ok=True)
    with open("downloads/hello.txt", "w") as f:
        f.write(r.text)
print("ok", r.status_code, r.text.strip())
"""

FLASK_APP = """
import os, threading, urllib.request
from flask import Flask
from werkzeug.serving import make_server

app = Flask(__name__)

@app.route("/")
def index():
    with open("templates/index.txt") as f:
        return f.read()

port = int(os.environ["APP_PORT"])
server = make_server("127.0.0.1", port, app)
thread = threading.Thread(target=server.serve_forever)
thread.start()
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
finally:
    server.shutdown()
    thread.join()
print("ok", body.strip())
"""

SQLITE_WAL = """
import os, sqlite3
os.makedirs("db", exist_ok=True)
con = sqlite3.connect("db/app.sqlite")
con.execute("PRAGMA journal_mode=WAL")
con.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT)")
con.execute("INSERT INTO t (v) VALUES ('x')")
con.commit()
n = con.execute("SELECT count(*) FROM t").fetchone()[0]
con.close()
print("ok", n > 0)
"""

CSV_REPORT = """
import csv, glob, os
totals = {}
for path in sorted(glob.glob("data/*.csv")):
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            totals[row["item"]] = totals.get(row["item"], 0) + int(row["qty"])
os.makedirs("reports", exist_ok=True)
with open("reports/summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["item", "qty"])
    for item, qty in sorted(totals.items()):
        w.writerow([item, qty])
print("ok", totals)
"""

SUBPROCESS_TOOLS = """
import os, subprocess
listed = subprocess.run(["/bin/ls", "data"], capture_output=True, text=True, check=True)
assert sorted(listed.stdout.split()) == sorted(os.listdir("data")), listed.stdout
version = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True)
head = open("repo/.git/HEAD").read().strip()
print("ok", version.stdout.split()[0], head)
"""

THREADS_ASYNCIO = """
import asyncio, concurrent.futures, json, os, threading

def work(n):
    return sum(i * i for i in range(n))

async def main():
    loop = asyncio.get_running_loop()
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        jobs = [loop.run_in_executor(pool, work, n) for n in range(1, 200)]
        results = await asyncio.gather(*jobs)
    await asyncio.sleep(0.01)
    return results

results = asyncio.run(main())
lock = threading.Lock()
done = []
threads = [threading.Thread(target=lambda: (lock.acquire(), done.append(1), lock.release()))
           for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
os.makedirs("out", exist_ok=True)
with open("out/result.json", "w") as f:
    json.dump({"sum": sum(results), "threads": len(done)}, f)
print("ok", len(done))
"""

ZIPFILE_ARCHIVE = """
import os, zipfile
os.makedirs("dist", exist_ok=True)
with zipfile.ZipFile("dist/data.zip", "w", zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir("data")):
        z.write(os.path.join("data", name), name)
with zipfile.ZipFile("dist/data.zip") as z:
    names = z.namelist()
    assert z.testzip() is None
print("ok", names)
"""

CLICK_CLI = """
import configparser, os, click

@click.command()
@click.option("--name", default=None)
def main(name):
    config = configparser.ConfigParser()
    config.read(os.path.expanduser("~/.config/greeter/config.ini"))
    name = name or config["greeter"]["name"]
    click.echo(f"ok hello {name}")

main()
"""

TEMPFILES = """
import os, shutil, tempfile
with tempfile.TemporaryDirectory() as d:
    for i in range(3):
        with open(os.path.join(d, f"part{i}"), "w") as f:
            f.write(str(i))
    with tempfile.NamedTemporaryFile("w", delete=False, dir=d, suffix=".txt") as f:
        f.write("merged")
    os.makedirs("out", exist_ok=True)
    shutil.copy(f.name, "out/merged.txt")
print("ok", open("out/merged.txt").read())
"""

SALES = "item,qty\napple,3\npear,2\n"


def _git_repo(root: Path) -> None:
    repo = root / "repo"
    repo.mkdir()
    env = {**BASE_ENV, "HOME": str(root / "home"), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)


PROGRAMS: tuple[Program, ...] = (
    Program(
        "pytest",
        "pytest on a small project (config looked for up the tree, tmp_path)",
        # pytest's cache is made by renaming a staging directory into the project: that
        # first run writes the project itself (docs/learning.md); the corpus leaves it off
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        PYTEST_PROJECT,
        # the tests and the package are read; bytecode is written next to them
        {
            ".": "ro",
            "./calc": "ro",
            "./tests": "ro",
            "./calc/__pycache__": "rw",
            "./tests/__pycache__": "rw",
        },
        prints="2 passed",
    ),
    Program(
        "requests",
        "HTTP client (requests) against a local server on 127.0.0.1",
        ["client.py"],
        {"client.py": REQUESTS_CLIENT},
        {"./downloads": "rw"},
        server=True,
        prints="ok 200 hello",
    ),
    Program(
        "flask",
        "a Flask app serving 127.0.0.1, asked by itself",
        ["app.py"],
        {"app.py": FLASK_APP, "templates/index.txt": "served\n"},
        {"./templates": "ro"},
        own_port=True,
        prints="ok served",
    ),
    Program(
        "sqlite-wal",
        "sqlite3 in WAL mode (the -wal and -shm files beside the database)",
        ["db.py"],
        {"db.py": SQLITE_WAL},
        {"./db": "rw"},
    ),
    Program(
        "csv-report",
        "csv: a data directory read, a report directory written",
        ["report.py"],
        {"report.py": CSV_REPORT, "data/jan.csv": SALES, "data/feb.csv": SALES},
        {"./data": "ro", "./reports": "rw"},
    ),
    Program(
        "subprocess",
        "subprocess.run of /bin/ls and git",
        ["tools.py"],
        {"tools.py": SUBPROCESS_TOOLS, "data/a.txt": "a", "data/b.txt": "b"},
        {"./data": "ro", "./repo/.git": "ro"},
        setup=_git_repo,
    ),
    Program(
        "threads-asyncio",
        "threads, a thread pool and asyncio",
        ["conc.py"],
        {"conc.py": THREADS_ASYNCIO},
        {"./out": "rw"},
    ),
    Program(
        "json-tool",
        "python -m json.tool INFILE OUTFILE",
        ["-m", "json.tool", "data/in.json", "out/pretty.json"],
        {"data/in.json": '{"b": 1, "a": [1, 2]}', "out/.keep": ""},
        {"./data": "ro", "./out": "rw"},
        prints="",
    ),
    Program(
        "zipfile",
        "zipfile: a directory archived, then read back",
        ["pack.py"],
        {"pack.py": ZIPFILE_ARCHIVE, "data/x.txt": "x" * 1000, "data/y.txt": "y"},
        {"./data": "ro", "./dist": "rw"},
    ),
    Program(
        "click-config",
        "a click CLI reading ~/.config (a fake HOME)",
        ["greet.py"],
        {"greet.py": CLICK_CLI, "home/.config/greeter/config.ini": "[greeter]\nname = Ada\n"},
        {"~/.config/greeter": "ro"},
        prints="ok hello Ada",
    ),
    Program(
        "tempfiles",
        "tempfile: a temporary directory, then a result copied out",
        ["tmp.py"],
        {"tmp.py": TEMPFILES},
        {"./out": "rw"},
        prints="ok merged",
    ),
)


# --------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------


def pysb_command() -> list[str]:
    script = Path(sys.executable).with_name("pysb")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pysb_core"]


def free_port(below: int = 32768) -> int:
    """A free loopback port outside the ephemeral range (a configured port, as a real app
    has: stable from the learning run to the enforced ones)."""
    for port in range(below - 1, 20000, -7):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port")


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def loopback_server() -> Iterator[str]:
    """A bounded HTTP server on 127.0.0.1 (a fixed free port) for the client programs."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port(30000)), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@dataclass
class Learned:
    """One program learned in its project: where, with which environment, what it wrote."""

    program: Program
    root: Path
    env: dict[str, str]
    profile: dict[str, Any]
    learn_stderr: str

    def run(self, provider: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*pysb_command(), "run", "--provider", provider, *self.program.argv],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def make_project(program: Program, base: Path | None = None) -> tuple[Path, dict[str, str]]:
    """A fresh project (outside /tmp: projects live anywhere) with a fake HOME inside."""
    root = Path(tempfile.mkdtemp(prefix=f".pysb-corpus-{program.name}-", dir=base or Path.home()))
    (root / "home").mkdir()
    for rel, text in program.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if program.setup is not None:
        program.setup(root)
    env = {**BASE_ENV, "HOME": str(root / "home")}
    if program.own_port:
        env["APP_PORT"] = str(free_port())
    return root, env


def learn(program: Program, root: Path, env: dict[str, str]) -> Learned:
    import yaml

    r = subprocess.run(
        [*pysb_command(), "run", "--learn", *program.argv],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if r.returncode != 0 or program.prints not in r.stdout:
        raise AssertionError(f"{program.name}: the learning run failed:\n{r.stdout}\n{r.stderr}")
    profile = yaml.safe_load((root / ".pysb.yaml").read_text()) or {}
    return Learned(program, root, env, profile, r.stderr)


def tightness(learned: Learned) -> list[str]:
    """What is too wide in the learned profile (empty: tight)."""
    files = learned.profile.get("files") or {}
    problems = []
    inside = ("./", "~/")
    for key, right in (("expose-ro", "ro"), ("expose-rw", "rw")):
        for path in files.get(key) or ():
            text = str(path)
            if text in ("/", "~") or text.startswith(".."):
                problems.append(f"{key}: {text} (far too wide)")
            elif text == "." or text.startswith(inside):
                want = learned.program.expected.get(text)
                if want is None:
                    problems.append(f"{key}: {text} (never needed by this program)")
                elif want == "ro" and right == "rw":
                    problems.append(f"{key}: {text} (written, only read by this program)")
            elif str(learned.root).startswith(text.rstrip("/") + "/"):
                problems.append(f"{key}: {text} (a directory above the project)")
    return problems


@dataclass
class Cell:
    """One program under one provider."""

    status: str  # "ok", "fails", "unavailable"
    detail: str = ""
    seconds: float = 0.0


def available_providers() -> dict[str, str | None]:
    """provider -> None when it can run here, else why not."""
    out = subprocess.run(
        [*pysb_command(), "providers", "--json"], capture_output=True, text=True, check=True
    )
    found = {p["name"]: (None if p["available"] else p["reason"]) for p in json.loads(out.stdout)}
    return {name: found.get(name, "not installed") for name in PROVIDERS}


def run_program(
    program: Program, providers: dict[str, str | None], log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Learn ``program`` once and run it under every provider: its row of the table."""
    root, env = make_project(program)
    try:
        with _maybe_server(program) as url:
            if url:
                env["APP_URL"] = url
            learned = learn(program, root, env)
            row: dict[str, Any] = {"tight": tightness(learned), "cells": {}}
            for provider, why_not in providers.items():
                if why_not is not None:
                    row["cells"][provider] = Cell("unavailable", why_not)
                    continue
                if log:
                    log(f"learning corpus: {program.name} under {provider}")
                began = time.monotonic()
                r = learned.run(provider)
                elapsed = time.monotonic() - began
                ok = r.returncode == 0 and program.prints in r.stdout
                detail = "" if ok else (r.stderr.strip().splitlines() or ["(no output)"])[-1]
                row["cells"][provider] = Cell("ok" if ok else "fails", detail[:300], elapsed)
            return row
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _maybe_server(program: Program) -> Iterator[str | None]:
    if not program.server:
        yield None
        return
    with loopback_server() as url:
        yield url


def run_all(log: Callable[[str], None] | None = None) -> dict[str, Any]:
    providers = available_providers()
    rows = {}
    for program in PROGRAMS:
        try:
            row = run_program(program, providers, log)
        except AssertionError as exc:
            row = {"tight": [], "learn_error": str(exc)[-500:], "cells": {}}
        rows[program.name] = {
            "shape": program.shape,
            "tight": row["tight"],
            "learn_error": row.get("learn_error"),
            "cells": {
                p: {"status": c.status, "detail": c.detail, "seconds": round(c.seconds, 2)}
                for p, c in row["cells"].items()
            },
        }
    return {"providers": list(PROVIDERS), "programs": rows}


def markdown(result: dict[str, Any]) -> list[str]:
    """The table program x provider: ✅ works unchanged, ❌ fails (why), — unavailable."""
    providers = result["providers"]
    lines = [
        "| program | shape | tight | " + " | ".join(providers) + " |",
        "|---|---|---|" + "---|" * len(providers),
    ]
    notes = []
    for name, row in result["programs"].items():
        if row.get("learn_error"):
            tight = "learning failed"
        else:
            tight = "yes" if not row["tight"] else "no: " + "; ".join(row["tight"])
        cells = []
        for p in providers:
            cell = row["cells"].get(p, {"status": "unavailable"})
            if cell["status"] == "ok":
                cells.append("✅")
            elif cell["status"] == "unavailable":
                cells.append("—")
            else:
                notes.append(f"- {name} under {p}: `{cell['detail']}`")
                cells.append("❌")
        lines.append(f"| {name} | {row['shape']} | {tight} | " + " | ".join(cells) + " |")
    return lines + (["", *notes] if notes else [])


def run(ctx: Any) -> dict[str, Any]:
    """``make bench`` section ``learning``."""
    return run_all(getattr(ctx, "log", None))


#: docs/learning.md holds the table between these two lines.
BEGIN = "<!-- learning corpus table: written by benchmarks/learning_corpus.py -->"
END = "<!-- end of the learning corpus table -->"


def write_docs(path: Path, result: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
    """Replace the table of ``path`` (between BEGIN and END) by this run's."""
    import datetime
    import platform

    when = (meta or {}).get("date") or datetime.datetime.now(datetime.UTC).strftime(
        "%Y-%m-%d %H:%M UTC"
    )
    table = [
        BEGIN,
        "",
        f"Run of {when} on Linux {platform.release()}, Python {platform.python_version()}: "
        "✅ works unchanged, ❌ fails (the reason follows the table), — provider unavailable "
        "here. *tight*: no exposure of `/`, of `~`, of a directory above the project, nor of "
        "one inside it that the program's shape does not explain.",
        "",
        *markdown(result),
        "",
        END,
    ]
    text = path.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + "\n".join(table) + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(table) + "\n"
    path.write_text(text)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="learn and run the learning corpus")
    parser.add_argument(
        "--docs", type=Path, help="rewrite the table of this file (docs/learning.md)"
    )
    ns = parser.parse_args()
    outcome = run_all(lambda m: print(m, file=sys.stderr))
    print("\n".join(markdown(outcome)))
    if ns.docs:
        write_docs(ns.docs, outcome)
