"""The child-side contract of a guard family: the bootstrap calls ``pysb_child_install`` and
``pysb_child_arm`` with the arguments each implementation names, as pluggy does on the
host (a guard that needs only the policy names only ``policy``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pysb_core.testing import Project

sys.path.insert(0, str(Path(__file__).parent / "security"))
from fakedist import fake_dist

OPEN = "version: 1\nimports: '*'\nfiles:\n  expose-rw: [.]\napi:\n  allow: ['*']\n"

GUARDS = {
    "policy only": (
        "import sys\n"
        "def pysb_child_install(policy):\n"
        "    sys.stderr.write(f'installed {type(policy).__name__}\\n')\n"
        "def pysb_child_arm(recorder):\n"
        "    sys.stderr.write(f'armed learning={recorder.learning}\\n')\n"
    ),
    "no argument": (
        "import sys\n"
        "def pysb_child_install():\n"
        "    sys.stderr.write('installed Policy\\n')\n"
        "def pysb_child_arm():\n"
        "    sys.stderr.write('armed learning=False\\n')\n"
    ),
    "keywords": (
        "import sys\n"
        "def pysb_child_install(**kw):\n"
        "    sys.stderr.write(f'installed {type(kw[\"policy\"]).__name__}\\n')\n"
        "def pysb_child_arm(*, policy, recorder):\n"
        "    sys.stderr.write(f'armed learning={recorder.learning}\\n')\n"
    ),
}


@pytest.mark.parametrize("case", sorted(GUARDS))
def test_child_hooks_get_the_arguments_they_name(
    case: str, project: Project, tmp_path: Path
) -> None:
    site = fake_dist(
        tmp_path / "site",
        "pysb-tiny",
        entry_points={"pysb.guards": {"tiny": "pysb_tiny"}},
        modules={"pysb_tiny.py": GUARDS[case]},
    )
    project.profile(OPEN)
    project.file("prog.py", "print('ran')\n")
    r = project.run("run", "prog.py", env={"PYTHONPATH": str(site)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran\n"
    assert "installed Policy\n" in r.stderr and "armed learning=False\n" in r.stderr, r.stderr


def test_a_child_hook_asking_for_an_argument_pysb_does_not_give_is_refused(
    project: Project, tmp_path: Path
) -> None:
    site = fake_dist(
        tmp_path / "site",
        "pysb-tiny",
        entry_points={"pysb.guards": {"tiny": "pysb_tiny"}},
        modules={"pysb_tiny.py": "def pysb_child_install(policy, bogus):\n    pass\n"},
    )
    project.profile(OPEN)
    project.file("prog.py", "open('RAN', 'w')\n")
    r = project.run("run", "prog.py", env={"PYTHONPATH": str(site)})
    assert r.returncode == 125, r.stderr
    assert "bogus" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (project.root / "RAN").exists()
