"""The interactive prompt under every provider, driven through a real terminal (a pty):
it survives refusals and errors, and the tracebacks it shows hold only the typed code's
frames (issue 17)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, EVERY_PROVIDER, Project, pysb_command, require_provider

PROVIDERS = EVERY_PROVIDER
ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[a-zA-Z]|\x1b\][^\x07]*\x07")
OPEN = "version: 1\nimports: '*'\nfiles:\n  expose-ro: [.]\napi:\n  allow: ['*']\n"


class Terminal:
    """``pysb run ARGS`` on a pty: type lines, read what the terminal shows."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        leader, follower = pty.openpty()
        self.leader = leader
        self.proc = subprocess.Popen(
            [*pysb_command(), "run", *args],
            cwd=cwd,
            env={**BASE_ENV, "TERM": "dumb", **(env or {})},
            stdin=follower,
            stdout=follower,
            stderr=follower,
            start_new_session=True,
        )
        os.close(follower)
        self.shown = b""

    def read_until(self, marker: bytes, timeout: float = 60) -> bytes:
        """What the terminal shows until ``marker`` (or the timeout, or the end)."""
        start = len(self.shown)
        end = time.monotonic() + timeout
        while time.monotonic() < end and marker not in ANSI_BYTES.sub(b"", self.shown[start:]):
            ready, _, _ = select.select([self.leader], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(self.leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            if b"\x1b[6n" in chunk:  # a cursor position request: answer as a terminal does
                os.write(self.leader, b"\x1b[1;1R")
            self.shown += chunk
        return ANSI_BYTES.sub(b"", self.shown[start:])

    def type(self, line: str, prompt: bytes = b">>> ", end: bytes = b"\n") -> str:
        os.write(self.leader, line.encode() + end)
        return self.read_until(prompt).decode(errors="replace")

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()  # our own child, by its Popen handle
                self.proc.wait()
            os.close(self.leader)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_prompt_survives_refusals_and_shows_clean_tracebacks(
    project: Project, provider: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.profile(OPEN)
    term = Terminal("--provider", provider, "--no-ipython", cwd=project.root)
    try:
        term.read_until(b">>> ", timeout=120)
        refused = term.type('open("/etc/pysb-compat-x", "w")')
        division = term.type("1/0")
        alive = term.type("print('alive', 6 * 7)")
        stack = term.type("import traceback; traceback.print_stack()")
        os.write(term.leader, b"exit()\n")
        status = term.close()
    finally:
        if term.proc.poll() is None:
            term.close()
    # (the banner goes to stderr, the prompt to stdout: a provider relaying the two apart,
    # qemu, may show them in either order)
    assert "pysb sandbox" in term.shown.decode(errors="replace")
    assert "DeniedError" in refused, refused
    assert "ZeroDivisionError: division by zero" in division, division
    for shown in (refused, division):
        assert 'File "<stdin>", line 1, in <module>' in shown, shown
        assert "<pysb" not in shown and "pysb_guards" not in shown, shown
        assert "AttributeError" not in shown, shown
    assert "alive 42" in alive, alive
    assert 'File "<stdin>", line 1, in <module>' in stack and "Error" not in stack, stack
    assert status == 0


def _has_ipython() -> bool:
    import importlib.util

    return importlib.util.find_spec("IPython") is not None


ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ipython_starts_with_the_sandbox_banner(project: Project, provider: str) -> None:
    """IPython installed and allowed: ``pysb run`` on a terminal starts it, with IPython's
    banner and the sandbox's line, and it survives refusals as the plain prompt does."""
    if not _has_ipython():
        pytest.skip("IPython is not installed (make dev installs it)")
    if provider != "subprocess":
        require_provider(provider)
    project.profile(OPEN)
    term = Terminal("--provider", provider, cwd=project.root, env={"TERM": "xterm"})
    try:
        banner = term.read_until(b"In [1]", timeout=120).decode(errors="replace")
        refused = term.type('open("/etc/pysb-compat-x", "w")', b"In [2]", b"\r")
        division = term.type("1/0", b"In [3]", b"\r")
        alive = term.type("print('alive', 6 * 7)", b"In [4]", b"\r")
        os.write(term.leader, b"exit()\r")
        status = term.close()
    finally:
        if term.proc.poll() is None:
            term.close()
    banner, refused, division = (ANSI.sub("", t) for t in (banner, refused, division))
    assert "IPython" in banner and "pysb sandbox" in banner, banner
    assert "DeniedError" in refused, refused
    assert "ZeroDivisionError" in division, division
    for shown in (refused, division):
        assert "<pysb" not in shown and "pysb_guards" not in shown, shown
        assert "AttributeError" not in shown, shown
    assert "alive 42" in ANSI.sub("", alive), alive
    assert status == 0


@pytest.mark.parametrize("how", ["flag", "env"])
def test_ipython_can_be_declined(project: Project, how: str) -> None:
    if not _has_ipython():
        pytest.skip("IPython is not installed (make dev installs it)")
    project.profile(OPEN)
    args = ("--no-ipython",) if how == "flag" else ()
    env = {"PYSB_NO_IPYTHON": "1"} if how == "env" else {}
    term = Terminal("--provider", "subprocess", *args, cwd=project.root, env=env)
    try:
        banner = term.read_until(b">>> ", timeout=120).decode(errors="replace")
        os.write(term.leader, b"exit()\n")
        status = term.close()
    finally:
        if term.proc.poll() is None:
            term.close()
    assert "pysb sandbox" in banner and "IPython" not in banner, banner
    assert status == 0
