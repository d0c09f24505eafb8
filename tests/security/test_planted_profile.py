"""A profile planted for the next run (issue 22, item 2), under real providers.

Run 1 is an ordinary confined run whose profile lets the program write ``./rw``. The
program uses that right to write ``rw/.pysb.yaml`` (a profile exposing a directory it
was never given) with a script beside it, and to create ``rw/extra.yaml``, a file the
project's own profile includes but that did not exist yet. Both layers allow every one
of those writes: they are inside the read-write exposure.

Run 2 is what the user does next: ``pysb run rw/next.py`` finds the planted profile next
to the script; ``pysb run show.py`` finds the project's profile, which now includes the
planted file. Before discovered profiles needed the user's trust, both runs read the
secret. Now both are refused (exit 125) before the program starts, and say how to review
and trust the profile.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, pysb_command, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap", "unshare", "firejail"]
SECRET = "TOP-SECRET-PLANTED-PROFILE"

PROJECT_PROFILE = """\
version: 1
include: [rw/extra.yaml]
files:
  expose-ro: [.]
  expose-rw: [./rw]
"""

#: Run 1's program: plants a profile and a script for the next run, and the include.
PLANT = """\
import sys
secret_dir = sys.argv[1]
planted = "version: 1\\nfiles:\\n  expose-ro: [" + secret_dir + "]\\n"
open("rw/.pysb.yaml", "w").write(planted)
open("rw/next.py", "w").write("print(open(%r).read())" % (secret_dir + "/secret.txt"))
open("rw/extra.yaml", "w").write(planted)
print("planted")
"""


def _pysb(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*pysb_command(), *args],
        cwd=cwd,
        env={**BASE_ENV, **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_profile_planted_by_one_run_grants_nothing_to_the_next(
    tmp_path: Path, provider: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    project = tmp_path / "project"
    (project / "rw").mkdir(parents=True)
    (project / ".pysb.yaml").write_text(PROJECT_PROFILE)
    (project / "plant.py").write_text(PLANT)
    (project / "show.py").write_text(f"print(open({str(outside / 'secret.txt')!r}).read())\n")

    trusted = _pysb("trust", cwd=project, env=env)  # the user reviewed the project's profile
    assert trusted.returncode == 0, trusted.stderr

    first = _pysb("run", "--provider", provider, "plant.py", str(outside), cwd=project, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "planted\n"
    assert (project / "rw" / ".pysb.yaml").is_file() and (project / "rw" / "extra.yaml").is_file()

    # The planted profile, found next to the script the user runs.
    planted = _pysb("run", "--provider", provider, "rw/next.py", cwd=project, env=env)
    assert SECRET not in planted.stdout + planted.stderr
    assert planted.returncode == 125, planted.stdout + planted.stderr
    assert "rw/.pysb.yaml was found, not named, and is not trusted" in planted.stderr
    assert "pysb check --profile rw/.pysb.yaml" in planted.stderr
    assert "pysb trust rw/.pysb.yaml" in planted.stderr

    # The project's own, trusted profile, which now includes a file the program created.
    included = _pysb("run", "--provider", provider, "show.py", cwd=project, env=env)
    assert SECRET not in included.stdout + included.stderr
    assert included.returncode == 125, included.stdout + included.stderr
    assert "has changed since it was trusted (rw/extra.yaml is new" in included.stderr


FORGE = """\
import os, sys
store = sys.argv[1]
for attempt in (
    lambda: open(os.path.join(store, "forged.trust"), "w").write("pysb-trust 1\\n"),
    lambda: os.rename(store, store + ".moved"),
):
    try:
        attempt()
        print("ALLOWED")
    except OSError as e:
        print("refused", type(e).__name__)
"""


@pytest.mark.parametrize(
    "provider, guards",
    [
        ("subprocess", True),
        ("landlock", True),
        ("landlock", False),
        ("bwrap", False),
        ("unshare", False),
        ("firejail", False),
    ],
)
def test_the_trust_store_is_never_writable_inside(
    tmp_path: Path, provider: str, guards: bool
) -> None:
    """The records of trusted profiles steer the next run: a sandbox that exposes their
    directory read-write (here: the whole state home) still cannot write or move them.
    Landlock cannot keep a directory inside a read-write exposure read-only: with the
    Python layer that layer refuses; without it the run does not start."""
    if provider != "subprocess":
        require_provider(provider)
    state = tmp_path / "project" / "state"
    store = state / "pysb" / "trust"
    store.mkdir(parents=True)
    project = tmp_path / "project"
    (project / "p.yaml").write_text(
        'version: 1\nimports: ["*"]\nfiles:\n  expose-ro: [.]\n  expose-rw: [./state]\n'
    )
    (project / "forge.py").write_text(FORGE)
    flags = [] if guards else ["--no-python-guards"]
    r = _pysb(
        "run", "--profile", "p.yaml", "--provider", provider, *flags, "forge.py", str(store),
        cwd=project, env={"XDG_STATE_HOME": str(state)},
    )  # fmt: skip
    assert sorted(p.name for p in store.iterdir()) == []
    assert store.is_dir()
    if provider == "landlock" and not guards:
        assert r.returncode == 125, r.stdout + r.stderr
        assert f"pysb's state {store} stays read-only" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert "ALLOWED" not in r.stdout
    assert r.stdout.count("refused") == 2, r.stdout
