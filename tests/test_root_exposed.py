"""``expose-ro: [/]`` -- read everything, write nothing, the common mode of agent sandboxes --
starts on every provider and means the same: any host file is readable, no write reaches
the host (bwrap failed with "Can't make symlink at /bin: File exists", unshare refused it,
and with a network rule bwrap's first error hid behind a follow-on one)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysb_core.testing import Project, require_provider

PROVIDERS = ["landlock", "bwrap", "unshare", "firejail", "qemu"]

PROGRAM = """
import os, sys
print(open(sys.argv[1]).read().strip())
print(sorted(os.listdir(os.path.dirname(sys.argv[1]))) == sorted(sys.argv[2].split(",")))
for target in (sys.argv[1] + ".new", os.path.join(os.getcwd(), "new.txt")):
    try:
        open(target, "w").write("no")
        print("written", target)
    except OSError as exc:
        print("refused", exc.errno)
"""


@pytest.fixture
def project() -> Iterator[Project]:
    """In the home directory (the qemu guest's private /tmp hides the host's)."""
    root = Path(tempfile.mkdtemp(prefix=".pysb-rootro-", dir=Path.home()))
    try:
        yield Project(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("with_network", [False, True], ids=["no-network", "network"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_read_everything_write_nothing(project: Project, provider: str, with_network: bool) -> None:
    require_provider(provider)
    if with_network and provider == "firejail" and os.getuid() != 0:
        pytest.skip(
            "firejail enforces network rules for root only (tests/test_loopback_everywhere)"
        )
    elsewhere = Path(tempfile.mkdtemp(prefix="pysb-rootro-", dir="/var/tmp"))
    try:
        secretless = elsewhere / "anywhere.txt"
        secretless.write_text("readable from anywhere")
        (elsewhere / "second").mkdir()
        lines = ["version: 1", "files: {expose-ro: [/]}", "imports: [os, sys]"]
        if with_network:
            lines += ["network:", "  - allow tcp 127.0.0.1 9 out"]
        project.profile("\n".join(lines) + "\n")
        project.file("app.py", PROGRAM)
        # The OS layer alone without a network rule; with one, as usually run (landlock
        # filters ports, not hosts: its host rules need the Python layer).
        guards = ["--no-python-guards"] if not with_network else []
        res = project.run(
            "run", "--provider", provider, *guards, "app.py",
            str(secretless), "anywhere.txt,second",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        out = res.stdout.splitlines()
        assert out[:2] == ["readable from anywhere", "True"], res.stdout
        # EROFS from a read-only mount, EACCES from Landlock or the Python layer
        assert [line.split()[0] for line in out[2:]] == ["refused", "refused"], res.stdout
        assert sorted(os.listdir(elsewhere)) == ["anywhere.txt", "second"]
        assert not (project.root / "new.txt").exists()
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
