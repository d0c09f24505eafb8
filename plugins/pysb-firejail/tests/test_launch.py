"""Real firejail launches from hand-made plans: interpreters, inherited fds, signals.

Plans are built directly (not through the CLI) so that each test controls exactly what
is exposed and which interpreter runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pysb_firejail import FirejailProvider
from pysb_firejail.probe import probe_deep

from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, Policy
from pysb_core.testing import require_provider

PYTHONS = {
    # the running interpreter only when it is 3.11 (the suite also runs under 3.12, 3.13)
    "3.11": sys.executable
    if sys.version_info[:2] == (3, 11)
    else os.path.expanduser("~/.pyenv/versions/3.11.7/bin/python3"),
    "3.12": os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3"),
    "3.13": os.path.expanduser("~/.pyenv/versions/3.13.0/bin/python3"),
}


@pytest.fixture(autouse=True)
def _firejail() -> None:
    require_provider("firejail")


def make_plan(argv: list[str], python: str = sys.executable, **kwargs) -> LaunchPlan:
    real = os.path.realpath(python)
    prefix = os.path.dirname(os.path.dirname(real))
    exps = [Exposure(prefix, prefix, False, "<python>", True)]
    # a venv's interpreter is a link into another prefix: expose the link's directory too
    link_dir = os.path.dirname(os.path.abspath(python))
    if not link_dir.startswith(prefix):
        exps.append(Exposure(os.path.dirname(link_dir), os.path.dirname(link_dir), False))
    policy = Policy(exposures=tuple(exps), provider="firejail", cwd="/")
    return LaunchPlan(
        policy=policy, python=python, argv=argv, env={"LANG": "C.UTF-8"}, cwd="/",
        exposures=exps, **kwargs,
    )  # fmt: skip


def launch(plan: LaunchPlan, **popen) -> subprocess.Popen[bytes]:
    return FirejailProvider().launch(plan, **popen)


def test_deep_probe_builds_a_sandbox() -> None:
    status = probe_deep()
    assert status.available, status.reason


@pytest.mark.parametrize("version", sorted(PYTHONS))
def test_python_versions_start(version: str) -> None:
    python = PYTHONS[version]
    if not os.path.exists(python):
        pytest.skip(f"Python {version} is not installed here")
    code = "import sys, ssl, json, sqlite3, ctypes; print(sys.version_info[:2])"
    proc = launch(make_plan([python, "-c", code], python), stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.decode().strip() == str(tuple(int(x) for x in version.split(".")))


def test_inherited_fds_keep_their_numbers() -> None:
    r, w = os.pipe()
    r2, w2 = os.pipe()
    os.write(w, b"through fd")
    os.close(w)
    code = f"import os; print(os.read({r}, 100).decode()); print(os.listdir('/proc/self/fd'))"
    try:
        plan = make_plan([sys.executable, "-c", code], pass_fds=[r])
        proc = launch(plan, stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=60)
    finally:
        for fd in (r, r2, w2):
            os.close(fd)
    lines = out.decode().splitlines()
    assert lines[0] == "through fd"
    assert str(r2) not in eval(lines[1]) or r2 == r  # fds not in pass_fds are not inherited


def test_signals_reach_the_program_not_firejail() -> None:
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGUSR1, lambda *a: (os.write(1, b'usr1\\n'), os._exit(7)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = launch(make_plan([sys.executable, "-c", code]), stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        for _ in range(50):  # the program is a descendant of firejail once it runs
            if proc.program_pid() is not None:  # type: ignore[attr-defined]
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out == b"usr1\n"
    assert proc.returncode == 7


def test_kill_ends_the_program_before_it_returns() -> None:
    code = "import time; print('up', flush=True); time.sleep(60)"
    proc = launch(make_plan([sys.executable, "-c", code]), stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        program = proc.program_pid()  # type: ignore[attr-defined]
        assert program is not None
        proc.kill()
        try:
            stat = Path(f"/proc/{program}/stat").read_text()
        except OSError:
            stat = ") Z"
        state = stat.rsplit(")", 1)[1].split()[0]
        assert state == "Z", f"program {program} still running ({state})"
        # firejail itself dies of the SIGKILL, or (--deterministic-shutdown) exits first with
        # the program's status: pysb reports 137 either way.
        assert proc.wait(timeout=10) in (-signal.SIGKILL, 128 + signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_arguments_reach_the_program_verbatim() -> None:
    """firejail 0.9.72 starts the program through ``/bin/bash -c`` with each argument
    quoted; nothing a shell would interpret may change them."""
    args = ["a'b", 'c"d', "$HOME", "x  y", "new\nline", "\\", "`id`", "*", ""]
    code = "import sys, json; print(json.dumps(sys.argv[1:]))"
    proc = launch(make_plan([sys.executable, "-c", code, *args]), stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    import json

    assert json.loads(out) == args


def _net_namespace(pid: str) -> tuple[int, int]:
    st = os.stat(f"/proc/{pid}/ns/net")
    return st.st_dev, st.st_ino


def test_program_has_a_network_namespace_of_its_own_with_loopback_up() -> None:
    """As root pysb makes the namespace before firejail starts (no --net=none sleep);
    as a normal user firejail makes it. Either way: not the host's, loopback only, up."""
    code = (
        "import os, socket\n"
        "print(os.stat('/proc/self/ns/net').st_ino)\n"
        "print(sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') "
        "else [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]])\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "c = socket.create_connection(s.getsockname(), timeout=5)\n"
        "print(c.getpeername()[0])\n"
    )
    plan = make_plan([sys.executable, "-c", code])
    assert ("--net=none" in FirejailProvider()._command(plan).argv) == (os.getuid() != 0)
    proc = launch(plan, stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    inode, interfaces, peer = out.decode().splitlines()
    assert int(inode) != _net_namespace("self")[1]
    assert interfaces == "['lo']"
    assert peer == "127.0.0.1"


@pytest.mark.skipif(os.getuid() != 0, reason="only a root pysb makes the namespace itself")
def test_firejail_in_pysbs_own_network_namespace_is_stopped() -> None:
    """The backstop behind launch(): a process in pysb's namespace is refused."""
    from pysb_firejail import netns

    from pysb_core.errors import SandboxError

    same = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "30"], preexec_fn=netns.enter_new())
    try:
        with pytest.raises(SandboxError, match="host's network"):
            netns.check_started(same)
        netns.check_started(other)  # a namespace of its own: fine
        assert _net_namespace(str(other.pid)) != _net_namespace("self")
    finally:
        for p in (same, other):
            p.kill()
            p.wait()


def test_firejails_own_failure_is_125_with_pysbs_words(tmp_path, capsys, monkeypatch) -> None:
    """firejail exits 1 with "Error: ..." when it cannot build the sandbox, like a program
    exiting 1; the child set-up's started byte tells them apart. Here firejail is told to
    start in a directory that does not exist (what /var/tmp did before --keep-var-tmp)."""
    from pysb_firejail import provider as provider_module

    real_build = provider_module.build_argv

    def build(*args, **kwargs):
        cmd = real_build(*args, **kwargs)
        cmd.argv = [
            "--private-cwd=/nonexistent/pysb-gone" if a.startswith("--private-cwd=") else a
            for a in cmd.argv
        ]
        return cmd

    monkeypatch.setattr(provider_module, "build_argv", build)
    plan = make_plan([sys.executable, "-c", "pass"])
    provider = FirejailProvider()
    provider.pysb_contribute(plan.policy, plan)
    err = tmp_path / "stderr"
    with open(err, "wb") as stderr:
        try:
            proc = provider.launch(plan, stdout=subprocess.DEVNULL, stderr=stderr)
            assert proc.wait(timeout=60) == 125
        finally:
            for fn in reversed(plan.cleanups):
                fn()
    assert b"unable to enter private working directory" in err.read_bytes()  # firejail's
    assert "firejail could not set the sandbox up" in capsys.readouterr().err  # pysb's
