"""The cyclic collector at the program's start is as under ``python`` (docs/performance.md).

The bootstrap pauses the collector while it imports and installs the guards (their ~30,000
objects live as long as the program: young collections over them found nothing to free) and
resumes it before the program, with what the set-up made in the oldest generation. The
program must find the collector as CPython leaves it: running, the same objects frozen
(none, but 3.12's static tuples, where nothing is paused), its own garbage collected by a
young collection, and no more collections behind it than the interpreter's own start makes.
Compared with the same interpreter run plainly, on 3.11 to 3.13.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from pysb_core.testing import Project, require_provider

PROFILE = "version: 1\nimports: [gc, json]\napi: {allow: [introspection]}\n"

CODE = """\
import gc, json
young_before = gc.get_stats()[0]["collections"]
state = [gc.isenabled(), gc.get_freeze_count(), gc.get_threshold()]
class Cycle:
    pass
a, b = Cycle(), Cycle()
a.other, b.other = b, a
del a, b
freed = gc.collect(0)  # the program's cycle, found by a young collection
print(json.dumps({"state": state, "young_before": young_before, "freed": freed}))
"""


@pytest.mark.parametrize("provider", ["subprocess", "landlock"])
def test_the_program_finds_the_collector_as_python_leaves_it(
    project: Project, provider: str, pysb_python: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.profile(PROFILE)
    plain = subprocess.run(
        [pysb_python, "-c", CODE], cwd=project.root, capture_output=True, text=True, check=True
    )
    res = project.run("run", "--provider", provider, "-c", CODE, python=pysb_python)
    assert res.returncode == 0, res.stdout + res.stderr
    boxed = json.loads(res.stdout.strip().splitlines()[-1])
    expected = json.loads(plain.stdout.strip().splitlines()[-1])
    assert boxed["state"] == expected["state"], res.stdout
    assert boxed["freed"] >= 2, boxed  # the two instances (and their dicts on 3.11)
    if expected["state"][1] == 0:  # paused (not on 3.12: see bootstrap._pause_gc)
        # The set-up itself ran no young collection: those the program finds are the
        # interpreter's own start's and the bootstrap's imports' (15 more without the pause).
        assert boxed["young_before"] <= expected["young_before"] + 3, (boxed, expected)
