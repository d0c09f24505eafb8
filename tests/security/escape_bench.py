"""A sandbox test bench: a host layout with secrets, a profile, and the probe run under pysb.

Layout (all under the test's ``tmp_path``)::

    outside/secret.txt      a secret no exposure covers
    outside/victim.txt      a file the probe tries to modify
    exposed/inner/          the only ``expose-ro`` directory (inner.txt)
    exposed/sibling.txt     a secret next to the exposure (its parent is not exposed)
    project/                the working directory, ``expose-ro``; holds the profile,
                            probe.py and ctl.txt (the control read)
    project/rw/             the ``expose-rw`` directory

Every run is ``pysb run --provider P --no-python-guards probe.py JSON`` with
``api: {allow: ["*"]}`` and ``imports: "*"``: nothing in Python refuses, only the kernel.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pysb_core.testing import BASE_ENV, pysb_command, require_provider

PROBE = Path(__file__).with_name("probe.py")
VICTIM_TEXT = "ORIGINAL\n"
VICTIM_MODE = 0o644
VICTIM_MTIME = 1_000_000_000


@dataclass
class Outcome:
    """One probe run: per-attempt verdicts plus the raw process result."""

    results: dict[str, str]
    proc: subprocess.CompletedProcess[str]

    def __getitem__(self, label: str) -> str:
        return self.results[label]

    def ok(self, label: str) -> bool:
        return self.results[label].startswith("ok")

    def refused(self, label: str) -> bool:
        return self.results[label].startswith("err:")


@dataclass
class Bench:
    provider: str
    root: Path
    token: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def secret(self) -> Path:
        return self.root / "outside" / "secret.txt"

    @property
    def victim(self) -> Path:
        return self.root / "outside" / "victim.txt"

    @property
    def inner(self) -> Path:
        return self.root / "exposed" / "inner"

    @property
    def sibling(self) -> Path:
        return self.root / "exposed" / "sibling.txt"

    @property
    def rw(self) -> Path:
        return self.project / "rw"

    @property
    def profile_path(self) -> Path:
        return self.project / ".pysb.yaml"

    def build(self, extra_profile: str = "") -> None:
        (self.root / "outside").mkdir(parents=True)
        self.secret.write_text(f"TOP-SECRET-{self.token}\n")
        self.victim.write_text(VICTIM_TEXT)
        os.chmod(self.victim, VICTIM_MODE)
        os.utime(self.victim, (VICTIM_MTIME, VICTIM_MTIME))
        self.inner.mkdir(parents=True)
        (self.inner / "inner.txt").write_text("INNER\n")
        self.sibling.write_text(f"SIBLING-SECRET-{self.token}\n")
        self.project.mkdir()
        shutil.copy(PROBE, self.project / "probe.py")
        (self.project / "ctl.txt").write_text("CONTROL\n")
        self.rw.mkdir()
        self.write_profile(extra_profile)

    def write_profile(self, extra: str = "") -> None:
        self.profile_path.write_text(
            "version: 1\n"
            'api: {allow: ["*"]}\n'
            'imports: "*"\n'
            "files:\n"
            f"  expose-ro: [{json.dumps(str(self.project))}, {json.dumps(str(self.inner))}]\n"
            f"  expose-rw: [{json.dumps(str(self.rw))}]\n" + extra
        )

    def victim_intact(self) -> bool:
        st = self.victim.stat()
        return (
            self.victim.read_text() == VICTIM_TEXT
            and (st.st_mode & 0o7777) == VICTIM_MODE
            and int(st.st_mtime) == VICTIM_MTIME
        )

    def command(self, attempts: Sequence[Sequence[Any]], *pysb_args: str) -> list[str]:
        return [
            *pysb_command(),
            "run",
            "--profile",  # named: the bench's own profile (a found one would need trust)
            str(self.profile_path),
            "--provider",
            self.provider,
            "--no-python-guards",
            *pysb_args,
            "probe.py",
            json.dumps([list(a) for a in attempts]),
        ]

    def run(
        self,
        attempts: Sequence[Sequence[Any]],
        *pysb_args: str,
        env: Mapping[str, str] | None = None,
        timeout: float = 180,
        **popen: Any,
    ) -> Outcome:
        """Run the probe with a control read first; fail loudly if the probe did not report."""
        attempts = [("control-read", "read", {"path": "ctl.txt"}), *attempts]
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
        proc = subprocess.run(
            self.command(attempts, *pysb_args),
            cwd=self.project,
            env={**BASE_ENV, **(env or {})},
            text=True,
            timeout=timeout,
            check=False,
            **popen,
        )
        return parse(proc)


def parse(proc: subprocess.CompletedProcess[str]) -> Outcome:
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE-RESULT "):
            results = json.loads(line.removeprefix("PROBE-RESULT "))
            assert results["control-read"] == "ok:CONTROL\n", (results, proc.stderr)
            return Outcome(results, proc)
    raise AssertionError(
        f"probe did not report (exit {proc.returncode})\n"
        f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-4000:]}"
    )


def bench(provider: str, tmp_path: Path, extra_profile: str = "") -> Bench:
    require_provider(provider)
    box = Bench(provider, tmp_path)
    box.build(extra_profile)
    return box
