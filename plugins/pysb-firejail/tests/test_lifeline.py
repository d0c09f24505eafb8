"""pysb_firejail.lifeline: the watcher that ends set-uid firejail with the process that
started it (issue 26 #9). Here the "wrapper" is a plain ``sleep`` started with the
watcher's pre-exec step by a starter process of ours; the end-to-end case (firejail run
by a normal user, pysb's group SIGKILLed) is tests/security/test_run_end.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from pysb_firejail import lifeline

pytestmark = pytest.mark.skipif(not lifeline.supported(), reason="no pidfds here")

STARTER = """\
import subprocess, sys, time
from pysb_firejail import lifeline
wrapper = subprocess.Popen(["sleep", sys.argv[1]], preexec_fn=lifeline.step())
time.sleep(0.3)
with open(f"/proc/{wrapper.pid}/task/{wrapper.pid}/children") as f:
    watcher = f.read().split()
print(wrapper.pid, *watcher, flush=True)
wrapper.wait()
time.sleep(60)
"""


def _start(seconds: str) -> tuple[subprocess.Popen[str], int, int]:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, seconds], stdout=subprocess.PIPE, text=True
    )
    assert starter.stdout is not None
    wrapper, watcher = (int(pid) for pid in starter.stdout.readline().split())
    return starter, wrapper, watcher


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_the_wrapper_is_killed_when_its_starter_dies() -> None:
    starter, wrapper, watcher = _start("60")
    try:
        with open(f"/proc/{watcher}/comm") as f:
            assert f.read().strip() == "pysb-lifeline"
        assert os.getsid(watcher) == watcher  # a session of its own
        held = [os.readlink(f"/proc/{watcher}/fd/{fd}") for fd in os.listdir(f"/proc/{watcher}/fd")]
        assert held == ["anon_inode:[pidfd]"] * 2, held  # no pipe of the run's
        starter.send_signal(signal.SIGKILL)  # our own child
        starter.wait()
        assert _gone(wrapper, 3), "the wrapper outlived the process that started it"
        assert _gone(watcher, 3)
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()


def test_the_watcher_ends_with_the_wrapper() -> None:
    starter, wrapper, watcher = _start("0.5")
    try:
        assert _gone(wrapper, 3)
        assert _gone(watcher, 3), "the watcher outlived the wrapper"
        assert starter.poll() is None  # the starter was never touched
    finally:
        starter.kill()
        starter.wait()
