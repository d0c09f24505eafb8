"""How a run ends, whatever the program does (issue 22 #13, #14).

Each test starts ``pysb run`` (our own child) on a small program under a real provider with
``--no-python-guards``, and checks what is left afterwards. A left-over process is found by
a random token in its command line and never signalled here (it is no longer our
descendant): it is a ``sleep 30`` that ends by itself.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, pysb_command, require_provider, trust_profile

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
    trust_profile(tmp_path / ".pysb.yaml")  # found, not named: used once trusted
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


def _grace_param(provider: str) -> object:
    """The grace period is pysb's own clock (``execute.wait``'s ``kill_at``), and its
    kill the one a second SIGTERM makes at once, which
    :func:`test_a_second_sigterm_kills_at_once` checks under every provider: the fast tier
    waits the grace out under bwrap only, the rest tier under the others."""
    marks = [] if provider == "subprocess" else [pytest.mark.provider(provider)]
    if provider != "bwrap":
        marks.append(pytest.mark.full)
    return pytest.param(provider, marks=marks, id=provider)


@pytest.mark.parametrize("provider", [_grace_param(p) for p in PROVIDERS])
def test_sigterm_ends_a_sandbox_that_ignores_it(provider: str, tmp_path: Path) -> None:
    """pysb forwards SIGTERM; a program that ignores it (or a wedged sandbox) is killed
    after the grace period, so pysb never hangs on a request to end."""
    from pysb_core.launch.execute import TERM_GRACE

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


def _processes_with(token: str) -> list[int]:
    """PIDs whose command line holds ``token`` (only this test's programs carry it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


DAEMON = """\
import os, sys, time
token = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)  # a daemon lets go of the run's streams
        code = "import time; time.sleep(30)"
        os.execv(sys.executable, [sys.executable, "-c", code, token])  # orphaned, own session
    os._exit(0)
os.wait()
time.sleep(0.3)
print("DAEMONIZED", flush=True)
if sys.argv[2] == "hang":
    time.sleep(60)
elif sys.argv[2] == "killed":
    import signal
    os.kill(os.getpid(), signal.SIGKILL)  # no exit handler of any kind runs
"""


@pytest.mark.parametrize("provider", [_param(p) for p in PROVIDERS])
@pytest.mark.parametrize("ending", ["exit", "killed", "wall-time"])
def test_no_descendant_outlives_the_run(provider: str, ending: str, tmp_path: Path) -> None:
    """A double-forked ``setsid`` grandchild is killed when the run ends: when the program
    exits (without waiting for it: firejail waited 20 s), when it dies of SIGKILL (no
    exit handler runs: firejail's reaper watches it from outside), and on the wall-time
    kill."""
    _check_descendants_killed(provider, ending, "", tmp_path)


@pytest.mark.provider("firejail")
@pytest.mark.parametrize("ending", ["exit", "killed"])
def test_no_descendant_outlives_a_run_with_a_processes_limit(ending: str, tmp_path: Path) -> None:
    """With ``limits: processes`` firejail has no reaper (it would take one of the
    program's processes): ``--deterministic-shutdown`` kills what is left instead."""
    _check_descendants_killed("firejail", ending, "limits: {processes: 20}\n", tmp_path)


def _check_descendants_killed(provider: str, ending: str, extra: str, tmp_path: Path) -> None:
    token = f"pysb-daemon-{secrets.token_hex(6)}"
    if ending == "wall-time":
        extra += "limits: {wall-time: 4s}\n"
    project = _project(tmp_path, DAEMON, extra, files=provider != "subprocess")
    proc = _start(provider, project, token, "hang" if ending == "wall-time" else ending)
    try:
        started = time.monotonic()
        out, err = proc.communicate(timeout=25)
        elapsed = time.monotonic() - started
        left = [pid for pid in _processes_with(token) if os.path.exists(f"/proc/{pid}")]
        time.sleep(0.2)
        left = [pid for pid in left if _alive(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "DAEMONIZED" in out, err
    expected = {"exit": 0, "killed": 128 + signal.SIGKILL, "wall-time": 124}[ending]
    assert proc.returncode == expected, err
    assert left == [], f"left running after the run: {left}"
    assert elapsed < 15, elapsed


SLEEPER = """\
import os, sys
code = "import time; print('READY', flush=True); time.sleep(60)"
os.execv(sys.executable, [sys.executable, "-c", code, sys.argv[1]])  # the token in its argv
"""


@pytest.mark.parametrize("provider", [_param(p) for p in PROVIDERS])
def test_a_sigkill_of_pysbs_process_group_ends_the_sandbox(provider: str, tmp_path: Path) -> None:
    """``kill -KILL -PGID`` of pysb's process group (a shell's ``kill -9 %1``; the sandbox
    has a group of its own) leaves nothing running. Under firejail started by a normal user
    the program went on (issue 26 #9): the kernel drops pysb's ``PR_SET_PDEATHSIG`` at the
    exec of set-uid firejail. The program writes nothing after READY, so it cannot die of
    a broken pipe instead; its exec'd interpreter carries the token."""
    if provider != "subprocess":
        require_provider(provider)
    token = f"pysb-kill-{secrets.token_hex(6)}"
    project = _project(tmp_path, SLEEPER, files=provider != "subprocess")
    proc = subprocess.Popen(
        [*pysb_command(), "run", "--provider", provider, "--no-python-guards", "prog.py", token],
        cwd=project,
        env=BASE_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,  # pysb leads a group of its own, as a shell's job does
    )
    try:
        _wait_for_line(proc, "READY")
        assert _processes_with(token), "the program is not running"
        os.killpg(proc.pid, signal.SIGKILL)  # our child leads the group
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        left = _processes_with(token)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [pid for pid in _processes_with(token) if _alive(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert left == [], f"left running after pysb's group was killed: {left}"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.provider("qemu")
def test_qemu_wall_time_is_the_programs_time(tmp_path: Path) -> None:
    """``limits: wall-time: 3s`` under qemu: the program prints at once and is then killed
    at the limit, counted from its own start: neither the VM's boot nor the interpreter's
    start-up in the guest (seconds under emulation) counts. So from the program's first
    line to its end, nearly all of the 3 s pass (the line crosses the relay at once)."""
    program = 'import time\nprint("HELLO", flush=True)\ntime.sleep(30)\n'
    proc = _start("qemu", _project(tmp_path, program, "limits: {wall-time: 3s}\n"))
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        shown = time.monotonic()
        _, err = proc.communicate(timeout=120)
        lasted = time.monotonic() - shown
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert first.strip() == "HELLO", err
    assert proc.returncode == 124 and "wall-time limit of 3s reached" in err, err
    assert 2.2 <= lasted <= 3 + 5, lasted
