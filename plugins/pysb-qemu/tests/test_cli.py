"""End to end through the CLI: ``pysb run --provider qemu`` (real VMs, TCG here).

With ``--no-python-guards`` the OS layer alone must hold: the program reaches files and
the environment through ``/bin/cat`` and ``/usr/bin/env`` (process-exec allowed), so no
Python guard could be what refuses.
"""

from __future__ import annotations

import pytest

from pysb_core.testing import require_provider, run_pysb, trust_profile

pytestmark = pytest.mark.slow

PROFILE = """\
version: 1
learn: false
api: {allow: [process-exec]}
env: {LANG: C.UTF-8, FOO: bar}
files:
  expose-ro: ["./data:/data"]
  expose-rw: [./out]
  ignore: [.env]
"""
RUN = ("run", "--provider", "qemu", "--no-python-guards")


@pytest.fixture
def project(tmp_path):
    require_provider("qemu")
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


def test_print_42_and_exit_status(project) -> None:
    root, _ = project
    res = run_pysb("run", "--provider", "qemu", "-c", "print(42)", cwd=root)
    assert (res.returncode, res.stdout) == (0, "42\n"), res.stderr
    res = run_pysb("run", "--provider", "qemu", "-c", "import sys; sys.exit(7)", cwd=root)
    assert res.returncode == 7, res.stderr


def test_files_rename_ignore_and_writes(project) -> None:
    root, secret = project
    script = (
        f"cat /data/x.txt; cat /data/.env; cat {secret}; cat {root}/data/x.txt; "
        "echo w > out/f && echo wrote; echo w > /data/y"
    )
    res = run_pysb(*RUN, "-c", sh(script), cwd=root)
    assert res.stdout.splitlines() == ["hello", "wrote"], res.stderr
    assert "SECRET" not in res.stdout
    assert f"{secret}: No such file" in res.stderr
    assert "/data/y: Read-only file system" in res.stderr
    assert (root / "out" / "f").read_text() == "w\n"
    assert not (root / "data" / "y").exists()


def test_env_is_the_whitelist_and_no_network(project) -> None:
    root, _ = project
    res = run_pysb(
        *RUN,
        "-c",
        "import subprocess as s; s.run(['/usr/bin/env']); s.run(['/bin/ls', '/sys/class/net'])",
        cwd=root,
        env={"PYSB_HOST_ONLY": "leak"},
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[-1] == "lo"
    # TMPDIR: the private temporary directory every sandbox gets (pysb_core.launch.tmpdir).
    assert sorted(lines[:-1]) == ["FOO=bar", "LANG=C.UTF-8", "TMPDIR=/tmp"]


def test_check_describes_the_vm(project) -> None:
    root, _ = project
    res = run_pysb("check", "--provider", "qemu", "--no-python-guards", cwd=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "qemu" in res.stdout


def _pty_session(cwd, steps: list[tuple[bytes, bytes]]) -> tuple[str, int]:
    """Run ``pysb run --provider qemu`` (a REPL) on a pty: wait for the first prompt, then
    for each (input, expected) write the input and wait until ``expected`` is seen."""
    import os
    import pty
    import select
    import time

    from pysb_core.testing import pysb_command

    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(cwd)
        cmd = [*pysb_command(), "run", "--provider", "qemu", "--no-python-guards"]
        os.execv(cmd[0], cmd)
    out = b""

    def pump(until: bytes, seconds: float = 90) -> None:
        nonlocal out
        start = len(out)
        end = time.monotonic() + seconds
        while time.monotonic() < end and until not in out[start:]:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    return

    pump(b">>> ")
    for data, expected in steps:
        os.write(fd, data)
        pump(expected)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return out.decode(errors="replace"), os.waitstatus_to_exitcode(status)


def test_repl_on_a_terminal_with_ctrl_c(project) -> None:
    """The REPL runs in the VM; Ctrl-C interrupts the running statement, the REPL goes on."""
    root, _ = project
    out, status = _pty_session(
        root,
        [
            (b"import time; print('sleep' + 'ing', flush=True); time.sleep(60)\n", b"sleeping\r\n"),
            (b"\x03", b"KeyboardInterrupt\r\n>>> "),
            (b"print(6 * 7)\n", b"42\r\n>>> "),
            (b"exit()\n", b""),
        ],
    )
    assert status == 0, out
    assert "provider qemu" in out
    assert "KeyboardInterrupt" in out
    assert "\r\n42\r\n" in out


def test_stdout_and_stderr_on_one_terminal_keep_the_programs_order(project) -> None:
    """stdout and stderr are the same terminal: what the program writes to the two shows
    in the order it wrote it (one port for both), as natively -- relayed apart, a
    traceback could show after the prompt that followed it."""
    import os
    import pty

    from pysb_core.testing import pysb_command

    root, _ = project
    code = (
        "import sys\n"
        "for i in range(40):\n"
        "    print(f'out{i}', flush=True)\n"
        "    print(f'err{i}', file=sys.stderr, flush=True)\n"
    )
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(root)
        cmd = [*pysb_command(), *RUN, "-c", code]
        os.execv(cmd[0], cmd)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, out
    lines = [ln for ln in out.decode().splitlines() if ln[:3] in ("out", "err")]
    assert lines == [f"{s}{i}" for i in range(40) for s in ("out", "err")], lines


def test_bad_provider_options_are_refused_with_125(tmp_path) -> None:
    require_provider("qemu")
    (tmp_path / ".pysb.yaml").write_text(
        "version: 1\nlearn: false\nproviders:\n  qemu: {memory: lots, accel: warp, disk: 1G}\n"
    )
    trust_profile(tmp_path / ".pysb.yaml")
    res = run_pysb("run", "--provider", "qemu", "-c", "print(1)", cwd=tmp_path)
    assert res.returncode == 125
    assert "memory" in res.stderr and "accel" in res.stderr and "disk" in res.stderr
    assert res.stdout == ""


def test_check_shows_the_guest_packet_filter(tmp_path) -> None:
    require_provider("qemu")
    (tmp_path / ".pysb.yaml").write_text(
        "version: 1\nlearn: false\nnetwork:\n  - allow tcp 127.0.0.1 8000 out\n"
    )
    res = run_pysb("check", "--provider", "qemu", "--no-python-guards", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "dnat ip to 10.0.2.2" in res.stdout  # the host's loopback, by the core compiler
    assert "user-mode (slirp)" in res.stdout
