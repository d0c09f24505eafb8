"""What a new user reads when something is wrong (issue 32): every line of a refusal is
``pysb: error:`` (or FILE:LINE), the click commands and ``pysb run`` word a usage error
alike, a profile path that names no file says so and offers no learning run that could not
write it, the API's refusal names the API's argument, and the options every command takes
may come first."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pysb_core.profile.discovery import ProfileNotFoundError
from pysb_core.testing import BASE_ENV, pysb_command, run_pysb

LOCATED = re.compile(r"^[^\s:]+:\d+: ")


def _all_prefixed(stderr: str) -> None:
    lines = stderr.splitlines()
    assert lines, stderr
    for line in lines:
        assert line.startswith("pysb: error: ") or LOCATED.match(line), stderr


@pytest.mark.parametrize("command", [("check",), ("run",), ("providers",), ("trust",)])
def test_an_unknown_option_is_worded_alike_by_every_command(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    r = run_pysb(*command, "--verbos", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    _all_prefixed(r.stderr)
    assert r.stderr.splitlines()[0] == (
        "pysb: error: no such option: --verbos (did you mean --verbose?)"
    ), r.stderr
    assert f"see 'pysb {command[0]} --help'" in r.stderr
    assert r.stdout == ""


def test_pysb_alone_prints_its_help_and_succeeds(tmp_path: Path) -> None:
    r = run_pysb(cwd=tmp_path)
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert "Commands:" in r.stdout and "run" in r.stdout


def test_quiet_and_verbose_may_come_before_the_command(tmp_path: Path) -> None:
    quiet = run_pysb("-q", "providers", cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == run_pysb("providers", "-q", cwd=tmp_path).stdout
    verbose = run_pysb("-v", "providers", cwd=tmp_path)
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout == run_pysb("providers", "-v", cwd=tmp_path).stdout


@pytest.mark.parametrize("kind", ["directory", "fifo"])
@pytest.mark.parametrize("learn", [False, True])
def test_a_profile_path_naming_no_file_is_refused_without_a_learning_hint(
    tmp_path: Path, kind: str, learn: bool
) -> None:
    (tmp_path / "app.py").write_text("print('ran')\n")
    path = tmp_path / "p.yaml"
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    words = "a directory" if kind == "directory" else "a FIFO"
    args = ["run", *(["--learn"] if learn else []), "--profile", "p.yaml", "app.py"]
    r = run_pysb(*args, cwd=tmp_path, timeout=60)
    assert r.returncode == 125, r.stderr
    _all_prefixed(r.stderr)
    assert f"profile p.yaml is {words}, not a profile file (named by --profile)" in r.stderr
    assert "--learn" not in r.stderr and "ran" not in r.stdout


def test_the_api_names_its_own_argument(tmp_path: Path) -> None:
    from pysb_core import sandboxes

    with pytest.raises(ProfileNotFoundError) as caught, sandboxes(profile=tmp_path / "no.yaml"):
        pass
    text = "\n".join(caught.value.errors)
    assert "(named by profile=)" in text and "--profile" not in text, text
    assert "learn=True" in text


def test_a_nul_byte_in_a_profile_is_one_located_line(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_bytes(b"version: 1\nfiles:\n  expose-ro: [a\x00]\n")
    (tmp_path / "app.py").write_text("print('ran')\n")
    r = run_pysb("run", "--profile", "p.yaml", "app.py", cwd=tmp_path)
    assert r.returncode == 125, r.stderr
    assert r.stderr.splitlines() == [
        "p.yaml:3: invalid YAML: unacceptable character #x0000: control characters are not allowed"
    ], r.stderr


def _complete(words: str, cword: int, tmp_path: Path) -> list[str]:
    """What bash would offer (click's ``bash_complete`` protocol: ``type,value`` lines)."""
    import subprocess

    env = {**BASE_ENV, "_PYSB_COMPLETE": "bash_complete", "COMP_WORDS": words}
    r = subprocess.run(
        pysb_command(),
        env={**env, "COMP_CWORD": str(cword)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line.split(",", 1)[1] for line in r.stdout.splitlines() if "," in line]


def test_completion_after_the_script_offers_no_pysb_option(tmp_path: Path) -> None:
    assert _complete("pysb run --pro", 2, tmp_path) == ["--provider", "--profile"]
    assert _complete("pysb run app.py --pro", 3, tmp_path) == []
    assert _complete("pysb run -m json.tool --", 4, tmp_path) == []
    assert _complete("pysb run -c pass --le", 4, tmp_path) == []


def test_events_hold_no_read_of_pysbs_own(tmp_path: Path) -> None:
    """``--events`` records the program's accesses: the network guard's read of the
    kernel's ephemeral port range happens as the guard is imported, before the file
    guard judges anything, so it is no denial of a program that does nothing."""
    from pysb_core.testing import trust_profile

    (tmp_path / "app.py").write_text("pass\n")
    (tmp_path / ".pysb.yaml").write_text("version: 1\nfiles:\n  expose-ro: [.]\n")
    trust_profile(tmp_path / ".pysb.yaml")
    r = run_pysb("run", "--provider", "subprocess", "--events", "ev.jsonl", "app.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    events = (tmp_path / "ev.jsonl").read_text()
    assert "ip_local_port_range" not in events, events


def test_events_hold_no_scan_of_the_import_system(tmp_path: Path) -> None:
    """A program importing json in a project whose profile exposes only ./data: the import
    system's stat of the unexposed sys.path entries (the script's directory, then its
    parents as zipimport tries them) is not the program's denial, and does not hide the
    program's own later stat of that directory, which is."""
    import json

    from pysb_core.testing import trust_profile

    (tmp_path / "data").mkdir()
    (tmp_path / "app.py").write_text(
        "import json, os\ntry:\n    os.stat('.')\nexcept OSError:\n    print('refused')\n"
    )
    (tmp_path / ".pysb.yaml").write_text(
        "version: 1\nimports: [json, os]\nfiles:\n  expose-ro: [./data]\n"
    )
    trust_profile(tmp_path / ".pysb.yaml")
    r = run_pysb("run", "--provider", "subprocess", "--events", "ev.jsonl", "app.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "refused\n", r.stdout
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    seen = [(e["action"], e["target"], e["detail"]) for e in events]
    assert seen == [("deny", str(tmp_path.resolve()), "stat")], seen


def test_a_set_up_failure_inside_the_sandbox_is_an_error_line(tmp_path: Path) -> None:
    """A child set-up that raises stops the program (125) with a ``pysb: error:`` line."""
    import subprocess

    from pysb_core.guardkit import hookimpl
    from pysb_core.launch.pipeline import Program, Session
    from pysb_core.plan import ChildSetup

    class FailingSetup:
        @hookimpl
        def pysb_contribute(self, policy, plan) -> None:
            plan.add_child_setup(ChildSetup("os", "close", {"fd": -1}))  # EBADF inside

    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    session = Session.create(
        profile=str(tmp_path / ".pysb.yaml"),
        provider="subprocess",
        cwd=str(tmp_path),
        stderr=None,
        extra_plugins=[FailingSetup()],
    )
    proc = session.spawn(
        Program("code", argv=["-c"], code="print('ran')"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=60)
    session.finish(proc.returncode)
    assert proc.returncode == 125 and b"ran" not in out, err
    assert err.decode().startswith("pysb: error: sandbox set-up failed inside the sandbox"), err
