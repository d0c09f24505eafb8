"""Acceptance tests: the kernel, through bwrap, enforces the plan (no Python guards).

Each test runs real programs (``/bin/cat``, ``/usr/bin/env``, the interpreter) inside a
real bubblewrap sandbox built from a hand-made launch plan.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile

import pytest
from pysb_bwrap import BwrapProvider
from pysb_bwrap import child as child_module

from pysb_core.errors import SandboxError
from pysb_core.policy import Exposure

pytestmark = pytest.mark.provider("bwrap")

ENV = {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin", "PYSB_TEST_VISIBLE": "yes"}


def ro(path, target=None):
    return Exposure(path=str(path), target=str(target or path), writable=False, source="t:1")


def rw(path, target=None):
    return Exposure(path=str(path), target=str(target or path), writable=True, source="t:2")


def test_secret_outside_exposures_is_unreadable(run_plan, mkplan, workdir):
    (workdir / "exposed").mkdir()
    (workdir / "exposed" / "ok.txt").write_text("visible")
    secret = workdir / "secret.txt"
    secret.write_text("TOP-SECRET")
    plan = mkplan(["/bin/cat", str(secret)], exposures=[ro(workdir / "exposed")], env=ENV)
    res = run_plan(plan)
    assert res.returncode != 0
    assert "TOP-SECRET" not in res.stdout
    assert "No such file" in res.stderr
    ok = run_plan(
        mkplan(["/bin/cat", str(workdir / "exposed/ok.txt")], exposures=[ro(workdir / "exposed")])
    )
    assert ok.returncode == 0 and ok.stdout == "visible"


def test_host_etc_is_not_exposed(run_plan, mkplan):
    res = run_plan(mkplan(["/bin/cat", "/etc/shadow"], env=ENV))
    assert res.returncode != 0
    assert "No such file" in res.stderr
    res = run_plan(mkplan(["/bin/ls", "/etc"], env=ENV))
    assert res.returncode == 0
    assert "shadow" not in res.stdout.split()
    assert "passwd" in res.stdout.split()


def test_etc_files_are_read_only_copies_and_their_fds_are_gone(run_plan, mkplan):
    """The /etc files arrive as copies (memory files read by bwrap): same content, not
    writable, and no fd of theirs reaches the program."""
    code = (
        "import os\n"
        "for path in ('/etc/passwd', '/etc/hosts', '/etc/ld.so.cache'):\n"
        "    try:\n"
        "        open(path, 'a')\n"
        "        print('writable', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
        "print(sorted(os.listdir('/proc/self/fd')))\n"
    )
    res = run_plan(mkplan([os.path.realpath(sys.executable), "-c", code], env=ENV))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert all(line.startswith("refused") for line in lines[:3]), res.stdout
    assert lines[3] == "['0', '1', '2', '3']", res.stdout  # 3: listdir's own
    with open("/etc/passwd") as f:
        host = f.read()
    assert run_plan(mkplan(["/bin/cat", "/etc/passwd"], env=ENV)).stdout == host


def test_writes_only_inside_rw_exposures(run_plan, mkplan, workdir):
    out, inp = workdir / "out", workdir / "in"
    out.mkdir()
    inp.mkdir()
    exps = [rw(out), ro(inp)]
    ok = run_plan(mkplan(["/bin/sh", "-c", f"echo written > {out}/new.txt"], exposures=exps))
    assert ok.returncode == 0, ok.stderr
    assert (out / "new.txt").read_text() == "written\n"
    for target in (inp / "x.txt", "/usr/pysb-x", "/pysb-x", "/etc/pysb-x", "/root/pysb-x"):
        res = run_plan(mkplan(["/bin/sh", "-c", f"echo no > {target}"], exposures=exps))
        assert res.returncode != 0, target
        assert not os.path.exists(target)
    # /tmp is a private tmpfs: a write there succeeds but never reaches the host.
    outside = workdir / "outside.txt"
    res = run_plan(
        mkplan(["/bin/sh", "-c", f"echo no > {outside} && cat {outside}"], exposures=exps)
    )
    assert res.stdout == "no\n"
    assert not outside.exists()


def test_ignored_file_and_directory_are_masked(run_plan, mkplan, workdir):
    proj = workdir / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / ".git" / "config").write_text("GIT-SECRET")
    (proj / ".env").write_text("API_KEY=SECRET")
    (proj / "app.py").write_text("print('app')")
    plan = mkplan(
        [
            "/bin/sh",
            "-c",
            f"cat {proj}/app.py; cat {proj}/.env; cat {proj}/.git/config; "
            f"echo x > {proj}/.env; ls {proj}/.git",
        ],
        exposures=[rw(proj)],
        hidden=[str(proj / ".env"), str(proj / ".git")],
    )
    res = run_plan(plan)
    assert "print('app')" in res.stdout
    assert "SECRET" not in res.stdout
    assert res.stderr.count("Permission denied") + res.stderr.count("Read-only") >= 3
    assert (proj / ".env").read_text() == "API_KEY=SECRET"


def test_renamed_exposure_is_visible_under_its_new_name(run_plan, mkplan, workdir):
    data = workdir / "data"
    data.mkdir()
    (data / "x.txt").write_text("renamed!")
    res = run_plan(
        mkplan(["/bin/sh", "-c", f"cat /data/x.txt; ls {data}"], exposures=[ro(data, "/data")])
    )
    assert res.stdout.startswith("renamed!")
    assert "No such file" in res.stderr  # the original name is not visible


def test_profile_file_under_rw_exposure_stays_read_only(run_plan, mkplan, workdir):
    proj = workdir / "proj"
    proj.mkdir()
    profile = proj / ".pysb.yaml"
    profile.write_text("version: 1\n")
    plan = mkplan(
        ["/bin/sh", "-c", f"echo 'files: {{expose-rw: [/]}}' >> {profile}; echo ok > {proj}/f"],
        exposures=[rw(proj)],
        protected=[str(profile)],
    )
    res = run_plan(plan)
    assert profile.read_text() == "version: 1\n"
    assert (proj / "f").read_text() == "ok\n"
    assert "Read-only" in res.stderr


def test_only_whitelisted_environment(run_plan, mkplan, monkeypatch):
    monkeypatch.setenv("PYSB_HOST_ONLY_SECRET", "leak")
    res = run_plan(mkplan(["/usr/bin/env"], env=ENV, cwd="/"))
    seen = dict(line.split("=", 1) for line in res.stdout.splitlines())
    # bwrap itself always sets PWD; the child setup removes it (next test).
    assert seen.pop("PWD") == "/"
    assert seen == ENV


def test_child_setup_removes_bwraps_pwd(run_plan, mkplan):
    provider = BwrapProvider()
    plan = mkplan([sys.executable], env=ENV, cwd="/")
    provider.pysb_contribute(plan.policy, plan)
    (setup,) = plan.child_setups
    src = os.path.dirname(os.path.dirname(os.path.realpath(child_module.__file__)))
    code = (
        f"import sys; sys.path.insert(0, {src!r}); "
        f"import {setup.module} as m, os; m.{setup.function}(**{setup.args!r}); "
        "os.execv('/usr/bin/env', ['env'])"
    )
    plan.argv = [os.path.realpath(sys.executable), "-c", code]
    res = run_plan(plan)
    env = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert env == ENV, res.stderr


def test_host_loopback_server_is_unreachable(run_plan, mkplan):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    code = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "except OSError as e:\n"
        "    print('refused', type(e).__name__); sys.exit(0)\n"
        "print('connected'); sys.exit(1)\n"
    )
    try:
        res = run_plan(mkplan([os.path.realpath(sys.executable), "-c", code], env=ENV))
        assert res.stdout.startswith("refused"), (res.stdout, res.stderr)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever reached the host's server
    finally:
        server.close()


def test_interfaces_are_loopback_only(run_plan, mkplan):
    res = run_plan(mkplan(["/bin/cat", "/proc/net/dev"]))
    names = [ln.split(":")[0].strip() for ln in res.stdout.splitlines()[2:]]
    assert names == ["lo"]


@pytest.mark.parametrize(("script", "status"), [("exit 3", 3), ("kill -9 $$", 128 + 9)])
def test_exit_status_passes_through(run_plan, mkplan, script, status):
    assert run_plan(mkplan(["/bin/sh", "-c", script])).returncode == status


def test_python_signal_death_is_128_plus_n(run_plan, mkplan):
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    res = run_plan(mkplan([os.path.realpath(sys.executable), "-c", code]))
    assert res.returncode == 128 + 15


@pytest.mark.parametrize("version", ["3.11", "3.12", "3.13"])
def test_interpreters_start(run_plan, mkplan, pythons, version):
    python = pythons[version]
    if not os.path.exists(python):
        pytest.skip(f"no Python {version} here")
    exe = os.path.realpath(python)
    code = "import sys, ssl, json, sqlite3; print(sys.version_info[:2], sys.executable)"
    res = run_plan(mkplan([exe, "-c", code], python=python, env=ENV))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"{tuple(int(x) for x in version.split('.'))} {exe}"


def test_inherited_fd_reaches_the_program(run_plan, mkplan):
    r, w = os.pipe()
    try:
        code = f"import os; os.write({w}, b'through the fd')"
        plan = mkplan([os.path.realpath(sys.executable), "-c", code], pass_fds=[w])
        res = run_plan(plan)
        os.close(w)
        w = -1
        assert res.returncode == 0, res.stderr
        assert os.read(r, 100) == b"through the fd"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_unexposed_cwd_exists_empty(run_plan, mkplan, workdir):
    (workdir / "file").write_text("x")
    res = run_plan(mkplan(["/bin/sh", "-c", "pwd; ls -A"], cwd=str(workdir)))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [str(workdir)]


@pytest.mark.parametrize("with_network", [False, True])
def test_no_capabilities_no_nested_userns(run_plan, mkplan, mkrule, with_network):
    """Also with a filtered network: the filter loader finds the user namespace owning the
    network namespace itself (pysb_core.net.netns.enter), so bwrap's --disable-userns stays."""
    if with_network:
        from pysb_bwrap import netlayer

        if not netlayer.layer_usable():
            pytest.skip("pysb_core.net.netns or its helpers (slirp4netns/pasta, nft) are missing")
    script = "grep CapEff /proc/self/status; unshare -U true && echo NESTED"
    network = (mkrule(port=9),) if with_network else ()
    res = run_plan(mkplan(["/bin/sh", "-c", script], network=network))
    assert "CapEff:\t0000000000000000" in res.stdout, res.stderr
    assert "NESTED" not in res.stdout
    assert res.returncode != 0


def _server() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    return server


def test_allowed_host_loopback_port_is_reachable_others_not(run_plan, mkplan, mkrule):
    from pysb_bwrap import netlayer

    if not netlayer.layer_usable():
        pytest.skip("pysb_core.net.netns or its helpers (slirp4netns/pasta, nft) are missing")
    allowed, other = _server(), _server()
    pa, po = allowed.getsockname()[1], other.getsockname()[1]
    code = (
        "import socket\n"
        f"for port in ({pa}, {po}):\n"
        "    try:\n"
        "        s = socket.create_connection(('127.0.0.1', port), timeout=5)\n"
        "        s.sendall(b'hello'); s.close(); print(port, 'ok')\n"
        "    except OSError as e:\n"
        "        print(port, 'refused', type(e).__name__)\n"
    )
    try:
        plan = mkplan(
            [os.path.realpath(sys.executable), "-c", code], env=ENV, network=(mkrule(port=pa),)
        )
        res = run_plan(plan)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert lines[0] == f"{pa} ok", res.stdout
        assert lines[1].startswith(f"{po} refused"), res.stdout
        allowed.settimeout(5)
        conn, _ = allowed.accept()
        assert conn.recv(5) == b"hello"
        conn.close()
        other.setblocking(False)
        with pytest.raises(BlockingIOError):
            other.accept()
    finally:
        allowed.close()
        other.close()


def _launch(plan):
    import subprocess

    return BwrapProvider(plan.provider_options).launch(
        plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _wait_for_line(proc, expected: bytes) -> None:
    line = proc.stdout.readline()
    assert line.strip() == expected, (line, proc.stderr.read() if proc.poll() is not None else "")


def test_terminate_reaches_the_program_not_just_bwrap(mkplan, bwrap_available):
    code = (
        "import os, signal, sys, time\n"
        "def bye(n, f):\n"
        "    os.write(1, b'graceful %d\\n' % n); os._exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    plan = mkplan([os.path.realpath(sys.executable), "-c", code])
    proc = _launch(plan)
    try:
        _wait_for_line(proc, b"ready")
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        assert out.strip() == b"graceful 15"
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fn in plan.cleanups:
            fn()


def test_interactive_bwrap_survives_sigint_program_gets_keyboardinterrupt(mkplan, bwrap_available):
    import signal

    provider = BwrapProvider()
    plan = mkplan([sys.executable], interactive=True)
    provider.pysb_contribute(plan.policy, plan)
    (setup,) = plan.child_setups
    assert setup.args["restore_sigint"] is True
    src = os.path.dirname(os.path.dirname(os.path.realpath(child_module.__file__)))
    code = (
        f"import sys, time; sys.path.insert(0, {src!r})\n"
        f"import {setup.module} as m; m.{setup.function}(**{setup.args!r})\n"
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    plan.argv = [os.path.realpath(sys.executable), "-c", code]
    argv = provider.prepare(plan).argv
    assert "--new-session" not in argv
    proc = _launch(plan)
    try:
        _wait_for_line(proc, b"ready")
        os.kill(proc.pid, signal.SIGINT)  # what the terminal does to bwrap: ignored
        program = proc.program_pid()
        assert program is not None and proc.poll() is None
        os.kill(program, signal.SIGINT)  # what the terminal does to the program
        out, err = proc.communicate(timeout=30)
        assert out.strip() == b"interrupted", err
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fn in plan.cleanups:
            fn()


def test_bwraps_own_failure_is_the_first_error_with_network(mkplan, mkrule, bwrap_available):
    """bwrap reports its PID before it sets the sandbox up: when the set-up fails, pysb
    says that bwrap failed (its message is on stderr), not what failed after it (loading
    the filter into a namespace that is gone, writing to the block pipe)."""
    from pysb_bwrap import netlayer

    if not netlayer.layer_usable():
        pytest.skip("pysb_core.net.netns or its helpers (slirp4netns/pasta, nft) are missing")
    gone = "/nonexistent/pysb-vanished-exposure"
    # implicit: bwrap binds it by path and fails itself (a profile's exposure is opened by
    # pysb first, and a vanished one is refused before bwrap starts)
    plan = mkplan(
        ["/bin/true"],
        exposures=[Exposure(gone, gone, False, "test.yaml:2", True)],
        network=(mkrule(port=9),),
    )
    with tempfile.TemporaryFile() as stderr:
        try:
            with pytest.raises(SandboxError, match="bwrap could not set the sandbox up"):
                BwrapProvider({}).launch(plan, stdout=subprocess.DEVNULL, stderr=stderr)
            stderr.seek(0)
            assert b"pysb-vanished-exposure" in stderr.read()  # bwrap's own words
        finally:
            for fn in plan.cleanups:
                fn()


def test_bwraps_own_failure_is_125_with_pysbs_words(mkplan, bwrap_available, tmp_path, capsys):
    """bwrap exits 1 when it cannot build the sandbox, like a program that exits 1: its
    --json-status-fd tells them apart (no exit code = the program never ran)."""
    gone = "/nonexistent/pysb-vanished-exposure"
    # implicit: bwrap binds it by path and fails itself (pysb opens a profile's exposure
    # first and refuses a vanished one before bwrap starts)
    failing = mkplan(["/bin/true"], exposures=[Exposure(gone, gone, False, "test.yaml:2", True)])
    exiting = mkplan(["/bin/sh", "-c", "exit 1"])
    for plan, status, words in ((failing, 125, b"pysb-vanished-exposure"), (exiting, 1, b"")):
        err = tmp_path / f"stderr-{status}"
        with open(err, "wb") as stderr:
            try:
                proc = BwrapProvider({}).launch(plan, stdout=subprocess.DEVNULL, stderr=stderr)
                assert proc.wait(timeout=60) == status
            finally:
                for fn in plan.cleanups:
                    fn()
        assert words in err.read_bytes()  # bwrap's own words (on the program's stderr) ...
        said = "bwrap could not set the sandbox up" in capsys.readouterr().err  # ... pysb's
        assert said == (status == 125)
