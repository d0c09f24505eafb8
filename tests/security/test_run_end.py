"""How a run ends, whatever the program does (issue 22 #13, #14).

Each test starts ``pysb run`` (our own child) on a small program under a real provider with
``--no-python-guards``, and checks what is left afterwards. A left-over process is found by
a random token in its command line and never signalled here (it is no longer our
descendant): it is a ``sleep 30`` that ends by itself.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, pysb_command, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap", "unshare", "firejail"]


def _param(provider: str) -> object:
    marks = [] if provider == "subprocess" else [pytest.mark.provider(provider)]
    return pytest.param(provider, marks=marks, id=provider)


def _project(tmp_path: Path, program: str, extra: str = "", *, files: bool = True) -> Path:
    """A project with ``prog.py``; ``files``: expose it (subprocess enforces no file rule)."""
    exposure = 'files:\n  expose-ro: ["."]\n' if files else ""
    (tmp_path / ".pysb.yaml").write_text(
        f'version: 1\napi: {{allow: ["*"]}}\nimports: "*"\n{exposure}{extra}'
    )
    (tmp_path / "prog.py").write_text(program)
    return tmp_path


def _start(provider: str, project: Path, *args: str) -> subprocess.Popen[str]:
    if provider != "subprocess":
        require_provider(provider)
    return subprocess.Popen(
        [*pysb_command(), "run", "--provider", provider, "--no-python-guards", "prog.py", *args],
        cwd=project,
        env=BASE_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_line(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == text, (line, proc.stderr.read() if proc.poll() is not None else "")


IGNORES_SIGTERM = """\
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
print("READY", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("provider", [_param(p) for p in PROVIDERS])
def test_sigterm_ends_a_sandbox_that_ignores_it(provider: str, tmp_path: Path) -> None:
    """pysb forwards SIGTERM; a program that ignores it (or a wedged sandbox) is killed
    after the grace period, so pysb never hangs on a request to end."""
    from pysb_core.execute import TERM_GRACE

    proc = _start(provider, _project(tmp_path, IGNORES_SIGTERM, files=provider != "subprocess"))
    try:
        _wait_for_line(proc, "READY")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=TERM_GRACE + 15)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    assert TERM_GRACE - 0.5 <= elapsed < TERM_GRACE + 10, elapsed


@pytest.mark.parametrize("provider", [_param(p) for p in PROVIDERS])
def test_a_second_sigterm_kills_at_once(provider: str, tmp_path: Path) -> None:
    proc = _start(provider, _project(tmp_path, IGNORES_SIGTERM, files=provider != "subprocess"))
    try:
        _wait_for_line(proc, "READY")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGKILL
    assert elapsed < 3, elapsed
