"""``pysb run`` on a real terminal (a pty that is the controlling terminal of a stand-in
shell) does job control as a shell does (issue 17, item 5): the sandbox has a process
group of its own that becomes the terminal's foreground group, so

- a Ctrl-C typed on the terminal reaches the program once,
- a signal sent to pysb's whole process group reaches the program once (forwarded),
- the exit status is the program's,
- Ctrl-Z stops the program and pysb (the shell gets its terminal back), and continuing
  pysb continues the program in the foreground,
- the terminal's foreground group is the shell's again when the run is over.

The stand-in shell (``SHELL_STANDIN``) is this test's own child, leader of a session of
its own on the pty; the tests signal only its process group (which they created) and
its pid, never anything else.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, EVERY_PROVIDER, Project, pysb_command, require_provider

PROVIDERS = EVERY_PROVIDER
OPEN = "version: 1\nimports: '*'\nfiles:\n  expose-ro: [.]\napi:\n  allow: ['*']\n"

#: A shell waiting for one foreground command: it keeps the terminal's foreground group
#: (its own, which pysb joins), survives SIGINT/SIGQUIT as shells do while waiting, and
#: reports after the command whether the terminal's foreground group is its own again.
SHELL_STANDIN = """
import os, signal, subprocess, sys
for s in (signal.SIGINT, signal.SIGQUIT):
    signal.signal(s, lambda *_: None)  # a handler, not SIG_IGN: reset at the child's exec
proc = subprocess.Popen(sys.argv[1:])
print("pysb-pid", proc.pid, flush=True)
status = proc.wait()
print("foreground-is-the-shell's", os.tcgetpgrp(0) == os.getpgrp(), flush=True)
print("status", status, flush=True)
"""

#: A shell running its command in the background (a group of its own, not the terminal's
#: foreground group), then, once the command stopped, bringing it to the foreground as
#: ``fg`` does and taking the terminal back when it ends.
BACKGROUND_STANDIN = """
import os, signal, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], process_group=0)
print("pysb-pid", proc.pid, flush=True)
_, status = os.waitpid(proc.pid, os.WUNTRACED)
print("stopped", os.WIFSTOPPED(status), flush=True)
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
os.tcsetpgrp(0, proc.pid)
os.killpg(proc.pid, signal.SIGCONT)  # the job's group, which this shell made
print("continued", flush=True)
_, status = os.waitpid(proc.pid, 0)
os.tcsetpgrp(0, os.getpgrp())
print("status", os.waitstatus_to_exitcode(status), flush=True)
"""

READS_A_LINE = """
import sys
print("ready", flush=True)
print("got", input(), flush=True)
sys.exit(3)
"""

HANDLES_INTERRUPT = """
import os, sys, time
print("ready", os.getpid(), flush=True)
try:
    for _ in range(600):
        time.sleep(0.1)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    try:
        time.sleep(1)  # a second SIGINT (pysb forwarding it again) would land here
    except KeyboardInterrupt:
        print("twice", flush=True)
        sys.exit(8)
    sys.exit(7)
"""


#: Prints a tick every 0.1 s until Ctrl-C: while it is stopped, the ticks stop.
TICKS = """
import sys, time
print("ready", flush=True)
try:
    while True:
        time.sleep(0.1)
        print("tick", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(7)
"""


class Shell:
    """The stand-in shell running ``pysb run ARGS`` on a fresh pty (its controlling
    terminal)."""

    def __init__(
        self,
        cwd: Path,
        *args: str,
        env: dict[str, str] | None = None,
        standin: str = SHELL_STANDIN,
    ) -> None:
        leader, follower = pty.openpty()
        self.leader = leader

        def controlling_terminal() -> None:  # after setsid(): the pty becomes ours
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            [sys.executable, "-c", standin, *pysb_command(), "run", *args],
            cwd=cwd,
            env={**BASE_ENV, "TERM": "dumb", **(env or {})},
            stdin=follower,
            stdout=follower,
            stderr=follower,
            start_new_session=True,
            preexec_fn=controlling_terminal,
        )
        os.close(follower)
        self.shown = b""

    def read_until(self, marker: bytes, timeout: float = 60, start: int = 0) -> str:
        """What the terminal showed, once ``marker`` is in it (past ``start``)."""
        end = time.monotonic() + timeout
        while marker not in self.shown[start:] and time.monotonic() < end:
            ready, _, _ = select.select([self.leader], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(self.leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            self.shown += chunk
        text = self.shown.decode(errors="replace")
        assert marker in self.shown[start:], text
        return text

    def drain(self, seconds: float) -> bytes:
        """What the terminal shows during the next ``seconds``."""
        start = len(self.shown)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.leader], [], [], left)
            if ready:
                try:
                    self.shown += os.read(self.leader, 65536)
                except OSError:
                    break
        return self.shown[start:]

    def shows_within(self, marker: bytes, seconds: float) -> bool:
        """Whether ``marker`` appears on the terminal within the next ``seconds`` (read no
        longer than it takes to appear)."""
        start = len(self.shown)
        end = time.monotonic() + seconds
        while marker not in self.shown[start:] and (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.leader], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.leader, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                self.shown += chunk
        return marker in self.shown[start:]

    def value_after(self, word: str) -> str:
        self.read_until(word.encode() + b" ")
        line = self.read_until(b"\n", timeout=5)
        return line.split(word + " ", 1)[1].split()[0]

    def type(self, data: bytes) -> None:
        os.write(self.leader, data)

    def finish(self) -> tuple[str, int]:
        """Everything the terminal showed, and pysb's exit status as the shell saw it."""
        try:
            self.proc.wait(timeout=60)
            self.read_until(b"status ", timeout=5)
            self.read_until(b"\n", timeout=5)
        finally:
            self.close()
        text = self.shown.decode(errors="replace")
        return text, int(text.split("status ", 1)[1].split()[0])

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group this test created
            self.proc.wait()
        if self.leader >= 0:
            os.close(self.leader)
            self.leader = -1


def _process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_for_state(pid: int, state: str, timeout: float = 20) -> str:
    end = time.monotonic() + timeout
    current = _process_state(pid)
    while current != state and time.monotonic() < end:
        time.sleep(0.05)
        current = _process_state(pid)
    return current


def _shell(
    project: Project, provider: str, *args: str, program: str = HANDLES_INTERRUPT, **env: str
) -> Shell:
    if provider != "subprocess":
        require_provider(provider)
    project.profile(OPEN)
    project.file("prog.py", program)
    return Shell(project.root, "--provider", provider, *args, env=env)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ctrl_c_typed_on_the_terminal_reaches_the_program_once(
    project: Project, provider: str
) -> None:
    shell = _shell(project, provider, "prog.py")
    try:
        shell.read_until(b"ready")
        time.sleep(0.3)
        shell.type(b"\x03")
        text, status = shell.finish()
    finally:
        shell.close()
    assert "interrupted" in text and "twice" not in text, text
    assert status == 7, text
    assert "foreground-is-the-shell's True" in text, text


@pytest.mark.parametrize("provider", PROVIDERS)
def test_group_sigint_on_a_terminal_reaches_the_program_once(
    project: Project, provider: str
) -> None:
    shell = _shell(project, provider, "prog.py")
    try:
        shell.read_until(b"ready")
        time.sleep(0.3)
        os.killpg(shell.proc.pid, signal.SIGINT)  # the shell's group, which pysb is in
        text, status = shell.finish()
    finally:
        shell.close()
    assert "interrupted" in text and "twice" not in text, text
    assert status == 7, text
    assert "foreground-is-the-shell's True" in text, text


#: Providers whose program is in a session of its own: pysb keeps the terminal.
OWN_SESSION = {"unshare"}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ctrl_z_stops_the_program_and_pysb_and_fg_continues_them(
    project: Project, provider: str
) -> None:
    shell = _shell(project, provider, "prog.py", program=TICKS)
    try:
        pysb_pid = int(shell.value_after("pysb-pid"))
        shell.read_until(b"tick")
        shell.type(b"\x1a")  # Ctrl-Z
        assert _wait_for_state(pysb_pid, "T") == "T"  # pysb stopped: the shell's turn
        assert os.tcgetpgrp(shell.leader) == shell.proc.pid  # the shell has the terminal
        shell.drain(0.5)  # what was on its way
        assert b"tick" not in shell.drain(1.5)  # stopped: no more ticks
        os.killpg(shell.proc.pid, signal.SIGCONT)  # what `fg` does to the job's group
        assert _wait_for_state(pysb_pid, "S") in ("S", "R")
        assert shell.shows_within(b"tick", 3)  # the program runs again
        if provider not in OWN_SESSION:  # the sandbox's group holds the terminal again
            assert os.tcgetpgrp(shell.leader) not in (shell.proc.pid, -1)
        shell.type(b"\x03")
        text, status = shell.finish()
    finally:
        shell.close()
    assert "interrupted" in text, text
    assert status == 7, text
    assert "foreground-is-the-shell's True" in text, text


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_prompt_reads_the_terminal_and_gives_it_back(project: Project, provider: str) -> None:
    shell = _shell(project, provider, PYSB_NO_IPYTHON="1")  # Python's own prompt
    try:
        shell.read_until(b">>> ")
        start = len(shell.shown)
        shell.type(b"print(6 * 7)\n")
        shell.read_until(b"42\r\n>>> ", start=start)
        start = len(shell.shown)
        shell.type(b"\x03")
        if not shell.shows_within(b"KeyboardInterrupt", 3):
            # CPython's readline loses a SIGINT that lands between the prompt and its
            # select() (the same with plain python): the user presses Ctrl-C again.
            shell.type(b"\x03")
        shell.read_until(b"KeyboardInterrupt", start=start)
        shell.read_until(b">>> ", start=start)
        shell.type(b"raise SystemExit(5)\n")
        text, status = shell.finish()
    finally:
        shell.close()
    assert status == 5, text
    assert "foreground-is-the-shell's True" in text, text


#: Providers whose program stays in the terminal's session when pysb is in the background
#: (the others: docs/compat.md, Signals).
IN_THE_SESSION = ["subprocess", "landlock", pytest.param("qemu", marks=pytest.mark.slow)]


@pytest.mark.parametrize("provider", IN_THE_SESSION)
def test_reading_the_terminal_in_the_background_stops_the_job_until_fg(
    project: Project, provider: str
) -> None:
    """Started in the background, the sandbox is stopped by SIGTTIN when it reads the
    terminal; pysb stops with it, and ``fg`` gives the terminal to the sandbox."""
    if provider != "subprocess":
        require_provider(provider)
    project.profile(OPEN)
    project.file("prog.py", READS_A_LINE)
    shell = Shell(project.root, "--provider", provider, "prog.py", standin=BACKGROUND_STANDIN)
    try:
        shell.read_until(b"stopped True")
        shell.read_until(b"continued")
        shell.type(b"hello\n")
        shell.read_until(b"got hello")
        shell.read_until(b"status ")
        shell.read_until(b"\n", start=shell.shown.index(b"status "))
    finally:
        shell.close()
    text = shell.shown.decode(errors="replace")
    assert "status 3" in text, text


#: Like SHELL_STANDIN, and afterwards reads what the terminal's input holds, as the user's
#: shell would read its next command line.
READS_AFTER_STANDIN = """
import os, select, subprocess, sys
proc = subprocess.Popen(sys.argv[1:])
status = proc.wait()
ready, _, _ = select.select([0], [], [], 0.5)  # TIOCSTI queues at once: a line is there
typed = os.read(0, 4096) if ready else b""
print("shell-read", repr(typed), flush=True)
print("status", status, flush=True)
"""

#: Pushes a command line into its terminal's input, one byte per TIOCSTI, and says how
#: each request fared (the other requests of the class take no effect on a pty).
INJECTS = """
import fcntl, termios, sys
refused = 0
for byte in b"echo INJECTED\\n":
    try:
        fcntl.ioctl(0, termios.TIOCSTI, bytes([byte]))
    except PermissionError as exc:
        refused += 1
        why = exc
print("refused", refused, flush=True)
if refused:
    print("why", why, flush=True)
"""


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_program_cannot_type_into_the_shells_terminal(project: Project, provider: str) -> None:
    """``ioctl(TIOCSTI)`` with only ``imports: [fcntl, termios]`` pushed a command into the
    user's shell under ``subprocess`` (issue 26 item 5); every provider refuses it (the
    Python layer's ``fcntl.ioctl`` judge, and the OS providers' seccomp filter)."""
    if provider != "subprocess":
        require_provider(provider)
    project.profile("version: 1\nimports: [fcntl, termios]\n")
    project.file("prog.py", INJECTS)
    shell = Shell(project.root, "--provider", provider, "prog.py", standin=READS_AFTER_STANDIN)
    try:
        text, _ = shell.finish()
    finally:
        shell.close()
    assert "shell-read b''" in text, text
    assert "INJECTED" not in text.split("shell-read", 1)[1], text
    assert "refused 14" in text, text
