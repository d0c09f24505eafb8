from __future__ import annotations

from pysb_core.testing import Project

PROFILE = "version: 1\nimports: ['*']\napi:\n  allow: ['*']\nsignals: [SIGTERM]\n"
PROGRAM = """\
import signal
signal.signal(signal.SIGTERM, signal.SIG_DFL)
print("SIGTERM handled")
try:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
except PermissionError as exc:
    print("refused:", exc)
"""


def test_only_the_listed_signals_get_a_handler(project: Project) -> None:
    project.profile(PROFILE)
    project.file("prog.py", PROGRAM)
    # The Python layer alone is what this guard adds: name the provider with no OS layer
    # (the default, auto, needs an OS provider installed).
    r = project.run("run", "--provider", "subprocess", "prog.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "SIGTERM handled",
        "refused: a handler for SIGUSR1 is not allowed; the profile line that allows it: "
        "signals: [SIGUSR1]",
    ]


def test_a_mistyped_signal_is_a_profile_error(project: Project) -> None:
    project.profile(PROFILE.replace("SIGTERM]", "SIGTREM]"))
    r = project.run("run", "--provider", "subprocess", "-c", "pass")
    assert r.returncode == 125
    assert ".pysb.yaml:5: signals: unknown signal 'SIGTREM'" in r.stderr


def test_pysb_check_credits_the_python_layer(project: Project) -> None:
    project.profile(PROFILE)
    r = project.run("check", "--provider", "subprocess")
    assert r.returncode == 0, r.stderr
    assert "signals: [SIGTERM]" in r.stdout


def test_a_learning_run_writes_the_rule(project: Project) -> None:
    project.profile(PROFILE.replace("signals: [SIGTERM]\n", ""))
    project.file("prog.py", PROGRAM)
    r = project.run("run", "--learn", "prog.py")
    assert r.returncode == 0, r.stderr
    learned = (project.root / ".pysb.yaml").read_text()
    assert "SIGTERM" in learned and "SIGUSR1" in learned, learned
