"""Security regression corpus: pysb never runs code with less confinement than asked.

Each test is an edge where an earlier pysb ran a program unconfined, trusted a name, or
answered a plugin failure with a traceback (issue 15). Real ``pysb`` processes, real
child interpreters; a program that must not run writes a marker file, and the test checks
that the file does not exist (the program never started), not only the exit status.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pysb_core.testing import Project

#: A program that leaves a trace when it runs at all.
EVIL = "open('RAN', 'w').write('unconfined')\nimport os\nprint(len(os.environ))\n"
OPEN = "version: 1\nimports: '*'\nfiles:\n  expose-rw: [.]\napi:\n  allow: ['*']\n"


def _refused(project: Project, r, *, wrote_profile: bool = False) -> None:
    assert r.returncode == 125, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("pysb: error: "), r.stderr
    assert not (project.root / "RAN").exists(), "the program ran"
    assert (project.root / ".pysb.yaml").exists() is wrote_profile


# -- 1. learning only when asked --------------------------------------------------------


def test_mistyped_profile_is_refused_with_the_learning_command(project: Project) -> None:
    project.profile(OPEN, name="strict.yaml")
    project.file("evil.py", EVIL)
    r = project.run("run", "--profile", "strct.yaml", "evil.py")
    _refused(project, r)
    assert "strct.yaml" in r.stderr and "does not exist" in r.stderr
    assert "did you mean strict.yaml" in r.stderr
    assert "pysb run --learn --profile strct.yaml evil.py" in r.stderr
    assert not (project.root / "strct.yaml").exists()


def test_pysb_profile_naming_a_missing_file_is_refused(project: Project) -> None:
    project.file("evil.py", EVIL)
    r = project.run("run", "evil.py", env={"PYSB_PROFILE": "nosuch.yaml"})
    _refused(project, r)
    assert "nosuch.yaml" in r.stderr and "PYSB_PROFILE" in r.stderr
    assert not (project.root / "nosuch.yaml").exists()


def test_no_profile_found_is_refused_and_writes_nothing(project: Project) -> None:
    project.file("evil.py", EVIL)
    r = project.run("run", "evil.py")
    _refused(project, r)
    assert "no profile" in r.stderr
    assert "pysb run --learn evil.py" in r.stderr
    r = project.run("run", "-c", "open('RAN','w')")
    _refused(project, r)
    assert "pysb run --learn -c " in r.stderr


def test_missing_script_without_profile_writes_no_profile(project: Project) -> None:
    r = project.run("run", "nosuch.py")
    _refused(project, r)


def test_learning_is_announced_before_the_program_starts(project: Project) -> None:
    code = "import sys; sys.stderr.write('PROGRAM STARTED\\n')"
    r = project.run("run", "--learn", "-c", code)
    assert r.returncode == 0, r.stderr
    notice = r.stderr.find("WITHOUT a sandbox")
    assert 0 <= notice < r.stderr.index("PROGRAM STARTED"), r.stderr
    assert (project.root / ".pysb.yaml").exists()


def test_learn_with_a_missing_named_profile_creates_it(project: Project) -> None:
    r = project.run("run", "--learn", "--profile", "new.yaml", "-c", "import json")
    assert r.returncode == 0, r.stderr
    assert "json" in (project.root / "new.yaml").read_text()
    assert not (project.root / ".pysb.yaml").exists()


def test_learn_true_in_a_profile_starts_a_learning_run(project: Project) -> None:
    project.profile("version: 1\nlearn: true\n")
    r = project.run("run", "-c", "import json")
    assert r.returncode == 0, r.stderr
    assert "WITHOUT a sandbox" in r.stderr
    assert "json" in (project.root / ".pysb.yaml").read_text()


def test_sandboxes_with_a_missing_profile_raises_profile_error(tmp_path: Path) -> None:
    from pysb_core import ProfileError, sandboxes

    box = sandboxes(profile=str(tmp_path / "strct.yaml"), cwd=str(tmp_path))
    with pytest.raises(ProfileError) as info, box:
        raise AssertionError("the sandbox started")
    text = "\n".join(info.value.errors)
    assert "does not exist" in text and "learn=True" in text
    assert not (tmp_path / "strct.yaml").exists()
    assert not (tmp_path / ".pysb.yaml").exists()


def test_sandboxes_without_any_profile_raises_profile_error(tmp_path: Path) -> None:
    from pysb_core import ProfileError, sandboxes

    env = {k: v for k, v in os.environ.items() if k != "PYSB_PROFILE"}
    with pytest.raises(ProfileError) as info, sandboxes(cwd=str(tmp_path), environ=env):
        raise AssertionError("the sandbox started")
    assert "no profile" in "\n".join(info.value.errors)
    assert not (tmp_path / ".pysb.yaml").exists()


def test_partial_mode_pysb_profile_and_run_default_are_refused(tmp_path: Path) -> None:
    import pysb_core
    from pysb_core import ProfileError, sandboxes

    env = {**os.environ, "PYSB_PROFILE": str(tmp_path / "gone.yaml")}
    with pytest.raises(ProfileError) as info, sandboxes(cwd=str(tmp_path), environ=env):
        raise AssertionError("the sandbox started")
    assert "PYSB_PROFILE" in "\n".join(info.value.errors)

    async def main() -> None:
        raise AssertionError("the program ran")

    env = {k: v for k, v in os.environ.items() if k != "PYSB_PROFILE"}
    coroutine = main()
    try:
        with pytest.raises(ProfileError, match="no profile"):
            pysb_core.run(coroutine, cwd=str(tmp_path), environ=env)
    finally:
        coroutine.close()
    assert not (tmp_path / ".pysb.yaml").exists()


# -- 6. pysb check of a missing profile --------------------------------------------------


def test_check_of_a_missing_profile_is_125(project: Project) -> None:
    r = project.run("check", "--profile", "nosuch.yaml")
    assert r.returncode == 125, (r.stdout, r.stderr)
    assert "nosuch.yaml" in r.stderr and "does not exist" in r.stderr
    assert "valid" not in r.stdout
    r = project.run("check")
    assert r.returncode == 125, (r.stdout, r.stderr)
    assert "no profile" in r.stderr


# -- 5. provider names -------------------------------------------------------------------


def test_mistyped_provider_suggests_the_installed_one_and_no_install(project: Project) -> None:
    project.profile(OPEN)
    project.file("evil.py", EVIL)
    for extra in ([], ["--learn"]):
        r = project.run("run", "--provider", "bwarp", *extra, "evil.py")
        _refused(project, r, wrote_profile=True)
        assert "unknown provider 'bwarp'" in r.stderr and "did you mean 'bwrap'" in r.stderr
        assert "pip install" not in r.stderr  # a typo is not a package name to install


def test_mistyped_provider_without_a_profile_is_named_beside_the_missing_profile(
    project: Project,
) -> None:
    project.file("evil.py", EVIL)
    r = project.run("run", "--provider", "bwarp", "evil.py")
    _refused(project, r)
    assert "did you mean 'bwrap'" in r.stderr and "no profile found" in r.stderr


def test_unknown_provider_in_a_learning_run_without_profile(project: Project) -> None:
    project.file("evil.py", EVIL)
    r = project.run("run", "--learn", "--provider", "nosuchprovider", "evil.py")
    _refused(project, r)
    assert "unknown provider 'nosuchprovider'" in r.stderr and "pip install" not in r.stderr


def test_install_hint_only_for_first_party_provider_names() -> None:
    from pysb_core.launch.drivers import unknown_provider

    qemu = unknown_provider("qemu", ["subprocess", "bwrap"])
    assert qemu.fix == "pip install pysb-qemu"
    typo = unknown_provider("bwarp", ["subprocess", "bwrap"])
    assert typo.fix is None and "did you mean 'bwrap'" in str(typo)
    other = unknown_provider("nsjail", ["subprocess"])
    assert other.fix is None and "pip install" not in str(other)


def _providers_json(project: Project, site: Path) -> dict[str, dict]:
    import json

    r = project.run("providers", "--json", env={"PYTHONPATH": str(site)})
    assert r.returncode == 0, r.stderr
    return {p["name"]: p for p in json.loads(r.stdout)}


def test_provider_entry_point_with_extras_runs_and_is_listed(
    project: Project, tmp_path: Path
) -> None:
    from fakedist import FAKE_PROVIDER, fake_dist

    site = fake_dist(
        tmp_path / "site",
        "pysb-fake",
        entry_points={"pysb.providers": {"fake": "pysb_fake:Fake [speed]"}},
        modules={"pysb_fake.py": FAKE_PROVIDER},
    )
    listed = _providers_json(project, site)["fake"]
    assert listed["available"] and listed["distribution"] == "pysb-fake", listed
    project.profile(OPEN)
    r = project.run(
        "run", "--provider", "fake", "-c", "print(6 * 7)", env={"PYTHONPATH": str(site)}
    )
    assert r.returncode == 0 and r.stdout == "42\n", r.stderr


def test_provider_registered_under_another_name_is_refused_by_both(
    project: Project, tmp_path: Path
) -> None:
    from fakedist import FAKE_PROVIDER, fake_dist

    site = fake_dist(
        tmp_path / "site",
        "pysb-fake",
        entry_points={"pysb.providers": {"other": "pysb_fake:Fake"}},
        modules={"pysb_fake.py": FAKE_PROVIDER},
    )
    listed = _providers_json(project, site)["other"]
    assert not listed["available"] and "named 'fake'" in listed["reason"], listed
    project.profile(OPEN)
    project.file("evil.py", EVIL)
    r = project.run("run", "--provider", "other", "evil.py", env={"PYTHONPATH": str(site)})
    _refused(project, r, wrote_profile=True)
    assert "named 'fake'" in r.stderr


def test_two_distributions_claiming_one_provider_are_both_named(
    project: Project, tmp_path: Path
) -> None:
    from fakedist import FAKE_PROVIDER, fake_dist

    site = tmp_path / "site"
    for dist in ("pysb-fake", "pysb-shadow"):
        module = dist.replace("-", "_")
        fake_dist(
            site,
            dist,
            entry_points={"pysb.providers": {"fake": f"{module}:Fake"}},
            modules={f"{module}.py": FAKE_PROVIDER},
        )
    listed = _providers_json(project, site)["fake"]
    assert not listed["available"], listed
    assert "pysb-fake 1.0" in listed["reason"] and "pysb-shadow 1.0" in listed["reason"]
    project.profile(OPEN)
    project.file("evil.py", EVIL)
    r = project.run("run", "--provider", "fake", "evil.py", env={"PYTHONPATH": str(site)})
    _refused(project, r, wrote_profile=True)
    assert "pysb-fake 1.0" in r.stderr and "pysb-shadow 1.0" in r.stderr


# -- 4. plugin failures: one paragraph naming the distribution, 125, no traceback ---------

BROKEN_PLUGINS = {
    "import error": "import nosuchmodule_xyz\n",
    "unknown hook": (
        "from pysb_core import hookimpl\n@hookimpl\ndef pysb_nosuch_hook(policy):\n    pass\n"
    ),
    "wrong argument": (
        "from pysb_core import hookimpl\n@hookimpl\ndef pysb_configure(policy, bogus):\n    pass\n"
    ),
    "hook raises": (
        "from pysb_core import hookimpl\n@hookimpl\n"
        "def pysb_contribute(policy, plan):\n    raise RuntimeError('plugin bug')\n"
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_PLUGINS))
def test_a_broken_plugin_is_one_paragraph_naming_its_distribution(
    case: str, project: Project, tmp_path: Path
) -> None:
    from fakedist import fake_dist

    site = fake_dist(
        tmp_path / "site",
        "pysb-broken",
        "2.3",
        entry_points={"pysb.plugins": {"broken": "pysb_broken"}},
        modules={"pysb_broken.py": BROKEN_PLUGINS[case]},
    )
    env = {"PYTHONPATH": str(site)}
    project.profile(OPEN)
    project.file("evil.py", EVIL)
    r = project.run("run", "evil.py", env=env)
    _refused(project, r, wrote_profile=True)
    assert "pysb-broken 2.3" in r.stderr, r.stderr
    r = project.run("run", "--debug", "evil.py", env=env)
    assert r.returncode == 125 and "Traceback" in r.stderr and "pysb-broken 2.3" in r.stderr
    assert not (project.root / "RAN").exists()
    for command in (["check"], ["plugins"]):
        r = project.run(*command, env=env)
        if case == "hook raises" and command == ["plugins"]:
            assert r.returncode == 0, r.stderr  # listing it calls no hook
            continue
        assert r.returncode == 125, (command, r.stdout, r.stderr)
        assert "pysb-broken 2.3" in r.stderr and "Traceback" not in r.stderr, r.stderr


def _fake_provider_site(tmp_path: Path, body: str) -> Path:
    from fakedist import FAKE_PROVIDER, fake_dist

    return fake_dist(
        tmp_path / "site",
        "pysb-fake",
        "0.9",
        entry_points={"pysb.providers": {"fake": "pysb_fake:Fake"}},
        modules={"pysb_fake.py": FAKE_PROVIDER + body},
    )


@pytest.mark.parametrize(
    "body",
    [
        "    def probe(self):\n        raise OSError('probe bug')\n",
        "    def prepare(self, plan):\n        raise KeyError('prepare bug')\n",
        "    @classmethod\n"
        "    def validate_options(cls, options):\n        raise ValueError('bug')\n",
    ],
    ids=["probe", "launch", "options"],
)
def test_a_provider_that_raises_is_one_paragraph_naming_its_distribution(
    body: str, project: Project, tmp_path: Path
) -> None:
    env = {"PYTHONPATH": str(_fake_provider_site(tmp_path, body))}
    project.profile(OPEN)
    project.file("evil.py", EVIL)
    r = project.run("run", "--provider", "fake", "evil.py", env=env)
    _refused(project, r, wrote_profile=True)
    assert "provider 'fake' (pysb-fake 0.9)" in r.stderr and "bug" in r.stderr, r.stderr


# -- 3. one family, one distribution --------------------------------------------------------


def test_two_distributions_claiming_one_guard_family_are_both_named(
    project: Project, tmp_path: Path
) -> None:
    from fakedist import fake_dist

    site = fake_dist(
        tmp_path / "site",
        "pysb-shadow",
        "0.2",
        entry_points={"pysb.guards": {"imports": "pysb_shadow"}},
        modules={"pysb_shadow.py": ""},
    )
    project.profile(OPEN)
    project.file("evil.py", EVIL)
    for command in (["run", "evil.py"], ["check"], ["plugins"]):
        r = project.run(*command, env={"PYTHONPATH": str(site)})
        assert r.returncode == 125, (command, r.stdout, r.stderr)
        assert "pysb-shadow 0.2" in r.stderr and "pysb-guards" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not (project.root / "RAN").exists()


def test_plugins_names_the_distribution_of_each_guard_family(project: Project) -> None:
    import json

    r = project.run("plugins", "--json")
    assert r.returncode == 0, r.stderr
    families = {
        row["family"]: row["distribution"] for row in json.loads(r.stdout) if row.get("family")
    }
    assert families == dict.fromkeys(["api", "env", "files", "imports", "network"], "pysb-guards")
    r = project.run("plugins")
    assert "family imports: pysb-guards" in r.stdout, r.stdout
