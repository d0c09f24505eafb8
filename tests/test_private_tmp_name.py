"""The private temporary directory of subprocess and landlock runs: short, private, and
what a killed pysb left is removed by the next run.

Its name is the one part of a program's Unix socket paths below ``$TMPDIR`` that a plain
run has not (108 bytes in all): multiprocessing's forkserver listener and CPython's own
socket tests went past them with the longer ``tmp-PID-RANDOM12`` (issue 28: test_pathlib,
test_socket and test_multiprocessing_main_handling differed under subprocess).
"""

from __future__ import annotations

import os
from pathlib import Path

from pysb_core.launch import tmphost


def _dead_pid() -> int:
    pid = 4_000_000  # above pid_max's default ceiling: no such process
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def test_the_name_is_short_private_and_stale_ones_go(tmp_path: Path) -> None:
    parent = tmp_path / f"pysb-{os.getuid()}"
    parent.mkdir(mode=0o700)
    dead = _dead_pid()
    for name in (f"{dead}-0badcafe", f"tmp-{dead}-0123456789ab"):  # this version's, older
        (parent / name).mkdir()
        (parent / name / "left.txt").write_text("x")
    live = parent / f"{os.getpid()}-feedbeef"
    live.mkdir()
    other = parent / "notes"  # no PID in its name: never touched
    other.mkdir()
    made = Path(tmphost._make_host_dir({"TMPDIR": str(tmp_path)}))
    assert made.parent == parent
    pid, _, rand = made.name.partition("-")
    assert pid == str(os.getpid()) and len(rand) == 8, made.name
    assert len(made.name) <= len(str(os.getpid())) + 9
    assert made.stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in parent.iterdir()) == sorted([made.name, live.name, other.name])
