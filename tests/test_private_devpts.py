"""Pseudo-terminals with one profile on every provider (issue 28, the class of item 8).

bwrap, unshare, firejail and qemu mount a devpts instance of the sandbox's own
(``Provider.private_pts``): its terminals are the sandbox's, so the program opens them by
name as ``os.openpty`` makes them, and ``expose-rw: [/dev/pts]`` -- what subprocess and
landlock need, on the host's devpts -- means that instance instead of stopping the run
("lies under /dev, which bwrap mounts itself"). Without the rule, subprocess and landlock
keep the host's terminals closed (tests/security: another terminal on the host).
"""

from __future__ import annotations

import json

import pytest

from pysb_core.launch.tmpdir import PTS_SOURCE, pts_exposures
from pysb_core.policy import Exposure
from pysb_core.testing import Project, require_provider

OWN = ["bwrap", "unshare", "firejail", pytest.param("qemu", marks=pytest.mark.slow)]
HOST = ["subprocess", "landlock"]

PROGRAM = r"""
import json, os
out = {}
try:
    m, s = os.openpty()
    fd = os.open(os.ttyname(s), os.O_RDWR | os.O_NOCTTY)  # by name, as 3.13's tests do
    os.write(fd, b"hi\n")
    out["pty"] = os.read(m, 8).decode().strip()
except Exception as e:
    out["pty"] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""

BASE = "version: 1\nimports: [json, os]\nfiles:\n  expose-ro: [.]\n"
WITH_RULE = BASE + "  expose-rw: [/dev/pts]\n"


def _run(project: Project, provider: str, profile: str) -> dict:
    if provider != "subprocess":
        require_provider(provider)
    project.profile(profile)
    project.file("prog.py", PROGRAM)
    r = project.run("run", "--provider", provider, "prog.py")
    assert r.returncode == 0, r.stderr
    result: dict = json.loads(r.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("provider", OWN + HOST)
def test_the_rule_gives_pseudo_terminals_everywhere(project: Project, provider: str) -> None:
    assert _run(project, provider, WITH_RULE)["pty"] == "hi"


@pytest.mark.parametrize("provider", OWN)
def test_a_devpts_of_its_own_needs_no_rule(project: Project, provider: str) -> None:
    assert _run(project, provider, BASE)["pty"] == "hi"


@pytest.mark.parametrize("provider", HOST)
def test_the_hosts_devpts_needs_the_rule(project: Project, provider: str) -> None:
    kind, message = _run(project, provider, BASE)["pty"]
    if provider == "landlock":  # /dev/ptmx opens; the new terminal's end, in /dev/pts, not
        assert kind == "PermissionError", message
    else:  # os.openpty is C; opening its terminal by name is judged by the file rules
        assert kind == "FileDeniedError" and "expose-rw: [/dev/pts]" in message, message


def test_the_rule_means_the_providers_own_instance() -> None:
    class Own:
        private_pts = "/dev/pts"

    class Shared:
        private_pts = None

    rule = Exposure("/dev/pts", "/dev/pts", True, "p.yaml:5")
    other = Exposure("/srv", "/srv", False, "p.yaml:4")
    kept, implicit = pts_exposures(Own(), [other, rule])  # type: ignore[arg-type]
    assert kept == [other]  # never a bind of the host's devpts
    assert implicit is not None and implicit.writable and implicit.source == PTS_SOURCE
    kept, implicit = pts_exposures(Shared(), [other, rule])  # type: ignore[arg-type]
    assert kept == [other, rule] and implicit is None
    renamed = Exposure("/srv/pts", "/dev/pts", True, "p.yaml:6")
    assert renamed.renamed
    kept, _ = pts_exposures(Own(), [renamed])  # type: ignore[arg-type]
    assert kept == [renamed]  # a rename onto it is the provider's to judge
