"""End to end through the CLI: ``pysb run --provider bwrap --no-python-guards``.

The OS layer alone must hold: the program reaches the files through ``/bin/cat`` and
``/usr/bin/env`` (process-exec allowed), so no Python guard could be what refuses.
"""

from __future__ import annotations

import socket

import pytest

from pysb_core.testing import require_provider, run_pysb, trust_profile

PROFILE = """\
version: 1
api: {allow: [process-exec]}
env: {LANG: C.UTF-8, FOO: bar}
files:
  expose-ro: ["./data:/data"]
  expose-rw: [./out]
  ignore: [.env]
"""
RUN = ("run", "--provider", "bwrap", "--no-python-guards")


@pytest.fixture
def project(tmp_path):
    require_provider("bwrap")
    (tmp_path / "data").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "data" / "x.txt").write_text("hello\n")
    (tmp_path / "data" / ".env").write_text("API_KEY=SECRET\n")
    (tmp_path / ".pysb.yaml").write_text(PROFILE)
    trust_profile(tmp_path / ".pysb.yaml")  # found, not named: used once trusted
    secret = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    secret.write_text("TOP-SECRET\n")
    yield tmp_path, secret
    secret.unlink()


def sh(script: str) -> str:
    run = f"subprocess.run(['/bin/sh', '-c', {script!r}])"
    return f"import subprocess, sys; sys.exit({run}.returncode)"


def test_files_rename_ignore_and_writes(project):
    root, secret = project
    script = (
        f"cat /data/x.txt; cat /data/.env; cat {secret}; cat {root}/data/x.txt; "
        "echo w > out/f && echo wrote; echo w > /data/y"
    )
    res = run_pysb(*RUN, "-c", sh(script), cwd=root, env={"PYSB_HOST_ONLY": "leak"})
    assert res.stdout.splitlines() == ["hello", "wrote"], res.stderr
    assert "SECRET" not in res.stdout
    assert "/data/.env: Permission denied" in res.stderr
    assert f"{secret}: No such file" in res.stderr
    assert "/data/y: Read-only file system" in res.stderr
    assert (root / "out" / "f").read_text() == "w\n"
    assert not (root / "data" / "y").exists()


def test_environment_is_the_whitelist(project):
    root, _ = project
    code = "import subprocess; subprocess.run(['/usr/bin/env'])"  # not via sh: it adds PWD
    res = run_pysb(*RUN, "-c", code, cwd=root, env={"PYSB_HOST_ONLY": "leak"})
    # TMPDIR: the private temporary directory every sandbox gets (pysb_core.launch.tmpdir).
    assert sorted(res.stdout.splitlines()) == ["FOO=bar", "LANG=C.UTF-8", "TMPDIR=/tmp"], res.stderr


@pytest.mark.parametrize(
    ("code", "status"),
    [("import sys; sys.exit(3)", 3), ("import os; os.kill(os.getpid(), 9)", 128 + 9)],
)
def test_exit_status(project, code, status):
    root, _ = project
    assert run_pysb(*RUN, "-c", code, cwd=root).returncode == status


def test_check_says_os_enforces_everything(project):
    root, _ = project
    res = run_pysb("check", "--provider", "bwrap", "--no-python-guards", cwd=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "loopback only" in res.stdout


def _server() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def test_host_loopback_only_with_a_rule(project):
    root, _ = project
    server = _server()
    port = server.getsockname()[1]
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\n"
        "except OSError as e:\n"
        "    print('refused')\n"
    )
    try:
        res = run_pysb(*RUN, "-c", code, cwd=root)
        assert res.stdout.strip() == "refused", res.stderr
        res = run_pysb(*RUN, "--net", f"allow tcp 127.0.0.1 {port} out", "-c", code, cwd=root)
        if res.returncode == 125 and "install" in res.stderr:
            pytest.skip(f"network helpers missing: {res.stderr.strip()}")
        assert res.stdout.strip() == "connected", res.stderr
    finally:
        server.close()


def test_repl_ctrl_c_reaches_the_program_and_job_goes_on(project):
    """A REPL on a terminal: Ctrl-C is a KeyboardInterrupt inside, the REPL continues."""
    import os
    import pty
    import select
    import time

    from pysb_core.testing import BASE_ENV, pysb_command

    root, _ = project
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(root)
        cmd = [*pysb_command(), *RUN]
        os.execve(cmd[0], cmd, {**BASE_ENV, "TERM": "dumb"})
    out = b""

    def read_until(marker: bytes, timeout: float = 30) -> None:
        nonlocal out
        end = time.monotonic() + timeout
        while marker not in out and time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    return

    try:
        read_until(b">>> ")
        os.write(fd, b"import time; time.sleep(60)\r")
        read_until(b"time.sleep(60)")
        time.sleep(0.5)
        os.write(fd, b"\x03")
        read_until(b"KeyboardInterrupt")
        os.write(fd, b"print(6 * 7)\r")
        read_until(b"42\r\n")
        os.write(fd, b"raise SystemExit(5)\r")
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    text = out.decode(errors="replace")
    assert "provider bwrap" in text
    assert "KeyboardInterrupt" in text and "42" in text, text
    assert os.waitstatus_to_exitcode(status) == 5


def test_ctrl_c_reaches_a_script_in_its_own_session(project):
    """Not interactive (-c on a terminal): the program has its own session, pysb forwards the
    terminal's SIGINT, the program sees KeyboardInterrupt and dies of it (130), as python."""
    import os
    import pty
    import select
    import time

    from pysb_core.testing import BASE_ENV, pysb_command

    root, _ = project
    code = (
        "import time\n"
        "try:\n"
        "    print('ready', flush=True); time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    print('caught', flush=True); raise\n"
    )
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(root)
        cmd = [*pysb_command(), *RUN, "-c", code]
        os.execve(cmd[0], cmd, {**BASE_ENV, "TERM": "dumb"})
    out = b""

    def read_until(marker: bytes, timeout: float = 30) -> None:
        nonlocal out
        end = time.monotonic() + timeout
        while marker not in out and time.monotonic() < end:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    return

    try:
        read_until(b"ready")
        time.sleep(1)  # let pysb reach its wait loop (it forwards from there)
        os.write(fd, b"\x03")
        read_until(b"KeyboardInterrupt")
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert b"caught" in out, out
    assert os.waitstatus_to_exitcode(status) == 130
