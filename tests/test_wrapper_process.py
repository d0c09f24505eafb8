"""pysb_core.launch.wrapper_process with a real three-level tree shaped like bwrap's
(wrapper -> the sandbox's PID 1 -> program), all of them this test's own descendants."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from pysb_core.launch.wrapper_process import adopt
from pysb_core.linux.proctree import children, running

#: The wrapper forks "PID 1", which forks the program. With ``wedge``, the program exits at
#: once and PID 1 stops itself without reaping it (what a ptrace-stopped init did): the
#: program stays a zombie under a stopped PID 1. Otherwise the program sleeps and reports
#: the signal it gets.
TREE = """
import ctypes, os, signal, sys, time
wedge = sys.argv[1] == "wedge"
if os.fork() == 0:  # PID 1: dies with the wrapper, as bwrap's does (--die-with-parent)
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.fork() == 0:  # the program
        if wedge:
            os._exit(0)
        # os.write, not print: the handler may run while print("READY") is still inside
        # stdout's BufferedWriter, and print would then raise "reentrant call"
        signal.signal(signal.SIGTERM, lambda *_: (os.write(1, b"PROGRAM-TERM\\n"), os._exit(0)))
        print("READY", flush=True)
        time.sleep(30)
        os._exit(1)
    if wedge:
        time.sleep(0.3)
        print("READY", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    os.wait()
    os._exit(0)
os.wait()
"""


def _tree(mode: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE, mode], stdout=subprocess.PIPE, start_new_session=True
    )
    adopt(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"READY\n"
    return proc


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()  # WrapperProcess.kill: the chain (our descendants, by PID), then the wrapper
        proc.wait()


def test_a_signal_reaches_the_program_inside() -> None:
    proc = _tree("normal")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout is not None and proc.stdout.readline() == b"PROGRAM-TERM\n"
        assert proc.wait(timeout=10) == 0  # the wrapper itself was not signalled
    finally:
        _end(proc)


def test_a_zombie_program_under_a_stopped_pid1_passes_the_signal_to_the_wrapper() -> None:
    """SIGTERM to a zombie is lost; pysb waited for ever. The wrapper gets it instead."""
    proc = _tree("wedge")
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(proc.chain()) < 2:  # type: ignore[attr-defined]
            time.sleep(0.05)
        pid1 = children(proc.pid)[0]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and running(pid1):
            time.sleep(0.05)
        assert not running(pid1)  # SIGKILLed with the wrapper (PR_SET_PDEATHSIG)
    finally:
        _end(proc)


#: firejail's shape since 2026-12-07: wrapper -> PID 1 -> the reaper -> program.
DEEPER = """
import os, signal, sys, time
if os.fork() == 0:  # PID 1
    if os.fork() == 0:  # the reaper: blocks what is meant for the program
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        if os.fork() == 0:  # the program
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            def term(*_):
                os.write(1, b"PROGRAM-TERM\\n")  # not print: see TREE
                os._exit(0)
            signal.signal(signal.SIGTERM, term)
            print("READY", flush=True)
            time.sleep(30)
            os._exit(1)
        os.wait()
        os._exit(0)
    os.wait()
    os._exit(0)
os.wait()
"""


def test_a_deeper_program_is_found_at_the_depth_the_provider_names() -> None:
    """``adopt(depth=3)``: the signal goes to the program below the reaper, not to the
    reaper (which would keep it blocked) nor to the wrapper; the chain has three PIDs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", DEEPER], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        adopt(proc, depth=3)
        assert proc.stdout is not None and proc.stdout.readline() == b"READY\n"
        assert len(proc.chain()) == 3  # type: ignore[attr-defined]
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline() == b"PROGRAM-TERM\n"
        assert proc.wait(timeout=10) == 0
    finally:
        _end(proc)


def test_a_depth_below_one_is_refused() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        with pytest.raises(ValueError, match="depth"):
            adopt(proc, depth=0)
    finally:
        proc.wait()


def test_the_light_process_is_adopted_as_a_popen_is() -> None:
    """``LaunchSpec.light``: the wrapper started as pysb's light process
    (``pysb_core.linux.spawn``, no ``subprocess``) gets the same forwarding."""
    import os

    from pysb_core.linux.spawn import Process, start

    r, w = os.pipe()
    proc = start([sys.executable, "-c", TREE, "normal"], stdout=w, process_group=0)
    os.close(w)
    try:
        assert isinstance(proc, Process)
        adopt(proc)
        assert not isinstance(proc, subprocess.Popen)
        with os.fdopen(r, "rb") as out:
            assert out.readline() == b"READY\n"
            proc.send_signal(signal.SIGTERM)
            assert out.readline() == b"PROGRAM-TERM\n"
        assert proc.wait(timeout=10) == 0
    finally:
        _end(proc)  # type: ignore[arg-type]


def test_a_light_wrapper_that_failed_its_set_up_says_125() -> None:
    """``watch_setup`` on the light process: exit 1 without the marker is the wrapper's own
    failure (125); with it, the program's exit 1."""
    import os

    from pysb_core.launch.wrapper_process import watch_setup
    from pysb_core.linux.spawn import start

    for written, expected in ((b"", 125), (b"1", 1)):
        r, w = os.pipe()
        os.write(w, written)
        os.close(w)
        proc = start([sys.executable, "-c", "raise SystemExit(1)"])
        adopt(proc)
        watch_setup(r, tool="test", marker=b"1")(proc)
        os.close(r)  # the process holds its own copy
        assert proc.wait(timeout=10) == expected
