"""Learning runs: nothing is refused, every access is recorded, rules are rendered."""

from __future__ import annotations

from pathlib import Path

import guarded
from pysb_guards.api import hooks as api
from pysb_guards.env import hooks as env
from pysb_guards.files import hooks as files
from pysb_guards.imports import hooks as imports

from pysb_core.events import Event
from pysb_core.profile.learning import LearnedProfile

PROGRAM = """
import os, json, csv, ctypes
print(open("data/x.txt").read())
os.makedirs("out/sub/deep", exist_ok=True)
with open("out/sub/deep/y.txt", "w") as f:
    f.write(json.dumps([os.environ.get("PYSB_TEST_VAR"), os.getenv("PYSB_TEST_OTHER")]))
os.environ["SET_BY_ME"] = "1"
print(os.environ["SET_BY_ME"], len(dict(os.environ)) > 0)
print(os.path.exists(os.path.expanduser("~/.nonexistent-pysb")))
os.system("true")
print(eval("1 + 1"))
print(open("/etc/hostname").read() if os.path.exists("/etc/hostname") else "")
"""


def _render(
    records: list[Event], project: Path
) -> list[tuple[str, str | None, object, str | None]]:
    # the environment the learning run had (a variable it did not hold is never forwarded)
    environ = {"HOME": "/nonexistent-home", "PYSB_TEST_VAR": "v", "PYSB_TEST_OTHER": "w"}
    profile = LearnedProfile(cwd=str(project), environ=environ)
    for family in (files, imports, api, env):
        family.pysb_learned(records=records, profile=profile)
    return [(r.section, r.key, r.value, r.group) for r in profile]


def test_a_learning_run_refuses_nothing_and_records_everything(project: Path, python: str) -> None:
    res = guarded.run(
        PROGRAM,
        python=python,
        learn=True,
        imports=None,
        exposures=[],
        cwd=project,
        env={"PYSB_TEST_VAR": "v", "PYSB_TEST_OTHER": "w", "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr
    assert not res.denials()
    assert (project / "out" / "sub" / "deep" / "y.txt").read_text() == '["v", "w"]'
    rules = _render(res.events, project)
    exposures = {(k, v) for s, k, v, _ in rules if s == "files"}
    assert ("expose-ro", "./data") in exposures
    assert ("expose-rw", "./out/sub") in exposures or ("expose-rw", "./out") in exposures
    # the stats of ".", "out" made while creating out/sub/deep never widen to the project
    assert not any(v in (".", "./out/sub/deep/y.txt") for _, v in exposures)
    assert ("expose-ro", "/etc") in exposures
    groups = {v: g for s, _, v, g in rules if s == "imports"}
    assert groups.get("json") == "standard library" and groups.get("csv") == "standard library"
    assert groups.get("ctypes") == "dangerous" and groups.get("os") == "standard library"
    allowed = {v for s, k, v, _ in rules if s == "api"}
    assert {"os.system", "builtins.eval"} <= allowed
    env_rules = {v for s, _, v, _ in rules if s == "env"}
    assert ("PYSB_TEST_VAR", "${PYSB_TEST_VAR}") in env_rules
    assert ("PYSB_TEST_OTHER", "${PYSB_TEST_OTHER}") in env_rules
    assert not any(name == "SET_BY_ME" for name, _ in env_rules)
    assert not any(name == "PATH" for name, _ in env_rules)  # only listed by dict(os.environ)


def _ev(target: str, detail: str, write: bool = False, isdir: bool = False) -> Event:
    return Event("python", "files", "learn", target, detail, data={"write": write, "isdir": isdir})


def test_files_render_as_directories_without_widening(tmp_path: Path) -> None:
    for d in ("p/data/sub", "p/out", "q/listed", "r"):
        (tmp_path / d).mkdir(parents=True)
    p, q, r = (str(tmp_path / n) for n in "pqr")
    rows = files.learned_exposures(
        [
            _ev(f"{p}/data/a.txt", "read"),
            _ev(f"{p}/data/sub/b.txt", "read"),
            _ev(p, "stat", isdir=True),  # resolving p/data/...: never widens to p
            _ev(f"{p}/out/r.txt", "write", write=True),
            _ev(f"{p}/out/q.txt", "read"),
            _ev(f"{q}/listed", "list", isdir=True),
            _ev(f"{r}/only-stat.txt", "stat"),
            _ev("/proc/self/status", "read"),
        ]
    )
    assert rows == [
        ("expose-ro", f"{p}/data"),
        ("expose-rw", f"{p}/out"),
        ("expose-ro", f"{q}/listed"),
        ("expose-ro", r),
    ]


def test_path_forms_are_portable(tmp_path: Path) -> None:
    for d in ("proj/d", "home/u/.config/app", "scratch/run", "venv/share/x"):
        (tmp_path / d).mkdir(parents=True)
    home, venv, scratch = (str(tmp_path / n) for n in ("home/u", "venv", "scratch"))
    profile = LearnedProfile(
        cwd=str(tmp_path / "proj"),
        environ={"HOME": home, "VIRTUAL_ENV": venv, "TMPDIR": scratch},
    )
    records = [
        _ev(str(tmp_path / "proj" / "d" / "f"), "read"),
        _ev(f"{home}/.config/app/c", "read"),
        _ev(f"{scratch}/run/t", "write", write=True),
        _ev(f"{venv}/share/x/y", "read"),
    ]
    files.pysb_learned(records=records, profile=profile)
    values = {r.value for r in profile}
    assert values == {"./d", "~/.config/app", "${TMPDIR:-/tmp}/run", "${VIRTUAL_ENV}/share/x"}
