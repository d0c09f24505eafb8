"""pysb_core.linux.spawn starts a process as subprocess.Popen does: the same calls, run
side by side with Popen on real processes, give the same child and the same errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pysb_core.linux.spawn import DEVNULL, Process, start

SHOW = (
    "import os, signal, sys\n"
    "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
    "print(os.getcwd(), os.getpgrp() == os.getpid(), os.environ.get('ONLY'), len(os.environ))\n"
    "print(signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN)\n"  # python's own, again
    "print(fds, sys.stdin.read())\n"
)


def _both(tmp_path: Path, **kwargs: object) -> tuple[str, str]:
    """The output of SHOW started by Popen and by Process with ``kwargs``."""
    outputs = []
    for make in (subprocess.Popen, Process):
        out_path = tmp_path / f"out-{make.__name__}"
        r, w = os.pipe()
        os.write(w, b"from stdin")
        os.close(w)
        with open(out_path, "wb") as out:
            proc = make(
                [sys.executable, "-c", SHOW],
                stdin=r,
                stdout=out,
                **kwargs,  # type: ignore[arg-type]
            )
            assert proc.wait() == 0
        os.close(r)
        outputs.append(out_path.read_text())
    return outputs[0], outputs[1]


def test_the_child_is_popens(tmp_path: Path) -> None:
    keep_r, keep_w = os.pipe()
    try:
        popen, ours = _both(
            tmp_path,
            env={"ONLY": "x"},
            cwd=str(tmp_path),
            pass_fds=(keep_w,),
            process_group=0,
            preexec_fn=lambda: None,
        )
    finally:
        os.close(keep_r)
        os.close(keep_w)
    assert ours == popen
    assert f"{tmp_path} True x" in ours and str(keep_w) in ours and "from stdin" in ours


def test_streams_given_as_devnull_and_inherited(tmp_path: Path) -> None:
    with open(tmp_path / "o", "w") as out:
        proc = Process(
            [sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"],
            stdin=DEVNULL,
            stdout=out,
        )
        assert proc.wait() == 0
    assert (tmp_path / "o").read_text() == "''\n"


def test_exit_status_signal_and_poll() -> None:
    proc = Process([sys.executable, "-c", "import time; time.sleep(30)"])
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait() == -signal.SIGTERM
    assert proc.poll() == -signal.SIGTERM
    proc.kill()  # ended and reaped: nothing is sent (its pid may be another's now)
    assert Process([sys.executable, "-c", "raise SystemExit(7)"]).wait() == 7


@pytest.mark.parametrize(
    "kwargs",
    [
        {"argv": ["/nonexistent/program"]},
        {"argv": [sys.executable, "-c", "pass"], "cwd": "/nonexistent/dir"},
        {"argv": [os.devnull]},
    ],
    ids=["no such program", "no such directory", "not executable"],
)
def test_failures_are_popens(kwargs: dict) -> None:
    argv = kwargs.pop("argv")
    with pytest.raises(OSError) as expected:
        subprocess.Popen(argv, **kwargs)
    with pytest.raises(OSError) as got:
        Process(argv, **kwargs)
    assert type(got.value) is type(expected.value)
    assert (got.value.errno, got.value.filename) == (expected.value.errno, expected.value.filename)


def test_a_failing_preexec_fn_is_popens() -> None:
    def fail() -> None:
        raise RuntimeError("no")

    with pytest.raises(subprocess.SubprocessError, match="preexec_fn"):
        Process([sys.executable, "-c", "pass"], preexec_fn=fail)


def test_start_falls_back_to_popen_for_what_it_does_not_cover() -> None:
    for argv, kwargs in (
        ([sys.executable, "-c", "pass"], {"stdout": subprocess.PIPE}),
        (["python3", "-c", "pass"], {}),  # a PATH search
        ([sys.executable, "-c", "pass"], {"light": False}),
        ([sys.executable, "-c", "pass"], {"start_new_session": True}),
    ):
        proc = start(argv, **kwargs)
        assert isinstance(proc, subprocess.Popen), (argv, kwargs)
        proc.communicate()
    proc = start([sys.executable, "-c", "pass"], env={}, process_group=0)
    assert type(proc) is Process and proc.wait() == 0
