"""Signals sent to the whole process group of a ``pysb run`` (what ``timeout``,
supervisors and CI runners do) reach the program once, under every provider, and the exit
status is the program's; a SIGKILL of the group leaves no sandbox behind (issue 17,
item 5). Only processes these tests started are signalled, through their own group."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from pysb_core.testing import BASE_ENV, EVERY_PROVIDER, Project, pysb_command, require_provider

PROVIDERS = EVERY_PROVIDER
OPEN = "version: 1\nimports: '*'\nfiles:\n  expose-ro: [.]\napi:\n  allow: ['*']\n"

HANDLES_INTERRUPT = """
import sys, time
print("ready", flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    try:
        time.sleep(1)  # a second SIGINT (pysb forwarding it again) would land here
    except KeyboardInterrupt:
        print("twice", flush=True)
        sys.exit(8)
    sys.exit(7)
"""


def _start(project: Project, provider: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*pysb_command(), "run", "--provider", provider, *args],
        cwd=project.root,
        env=BASE_ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of our own: the tests signal only that group
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_group_sigint_reaches_the_program_once(project: Project, provider: str) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.profile(OPEN)
    project.file("prog.py", HANDLES_INTERRUPT)
    proc = _start(project, provider, "prog.py")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)  # the group this test made for it
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert out.split() == ["interrupted"], (out, err)
    assert proc.returncode == 7, (proc.returncode, err)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_group_sigkill_leaves_no_sandbox_behind(project: Project, provider: str) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.profile(OPEN)
    code = "import time; print('ready', flush=True); time.sleep(60); print('survived')"
    proc = _start(project, provider, "-c", code)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    start = time.monotonic()
    rest = proc.stdout.read()  # end of file once every process holding the pipe is gone
    proc.stderr.close()  # type: ignore[union-attr]
    proc.stdout.close()
    assert rest == ""
    assert time.monotonic() - start < 10
