"""The plugin kits (pysb_core.providerkit, pysb_core.guardkit): what they export, and the
refusal of a plugin written for a kit this pysb does not offer (exit 125, naming it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pysb_core import guardkit, kitversion, providerkit
from pysb_core.testing import Project

sys.path.insert(0, str(Path(__file__).parent / "security"))
from fakedist import FAKE_PROVIDER, fake_dist

OPEN = "version: 1\nimports: '*'\nfiles:\n  expose-rw: [.]\napi:\n  allow: ['*']\n"
PROGRAM = "open('RAN', 'w').write('ran')\nprint('ran')\n"


@pytest.mark.parametrize("kit", [providerkit, guardkit], ids=lambda m: m.__name__)
def test_every_exported_name_resolves_and_is_listed(kit: ModuleType) -> None:
    names: list[str] = kit.__all__
    assert set(names) == set(kit._EXPORTS) | {"KIT_VERSION", "DECLARATION"}
    for name in names:
        assert getattr(kit, name) is not None, name
    assert dir(kit) == sorted(names)
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        getattr(kit, "nosuch")  # noqa: B009


@pytest.mark.parametrize("kit", ["providerkit", "guardkit"])
def test_importing_a_kit_loads_nothing_until_a_name_is_used(kit: str) -> None:
    """The guard kit is imported inside the sandbox: it must cost nothing there."""
    code = (
        f"import sys; import pysb_core.{kit} as k; "
        "print(sorted(m for m in sys.modules if m.startswith('pysb_core.') and "
        f"m not in ('pysb_core.{kit}', 'pysb_core._lazy')))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout.replace("'", '"')) == [], r.stdout


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        ("1", (1, 0)),
        ("1.3", (1, 3)),
        (" 2.0 ", (2, 0)),
        (1, (1, 0)),
        ((1, 2), (1, 2)),
        ((3,), (3, 0)),
        ("1.x", None),
        ("1.2.3", None),
        ("", None),
        (-1, None),
        (True, None),
        ((1, "2"), None),
        (1.0, None),
    ],
)
def test_kit_versions_are_read_strictly(declared: object, expected: object) -> None:
    assert kitversion.parse(declared) == expected


def _module(**constants: object) -> ModuleType:
    module = ModuleType("plugin")
    for name, value in constants.items():
        setattr(module, name, value)
    return module


def test_a_kit_is_served_to_the_same_major_and_an_older_or_equal_minor() -> None:
    current = (1, 2)
    for ok in ("1", "1.0", "1.2", None):
        mod = _module(PYSB_PROVIDERKIT=ok) if ok else _module()
        assert kitversion.refusal(mod, "PYSB_PROVIDERKIT", current, "x") is None, ok
    for bad in ("1.3", "2", "0.9"):
        why = kitversion.refusal(
            _module(PYSB_PROVIDERKIT=bad),
            "PYSB_PROVIDERKIT",
            current,
            "provider 'x' (pysb-x 1.0)",
        )
        assert why is not None and "provider 'x' (pysb-x 1.0)" in why and "1.2" in why, why


def _refused(project: Project, r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == 125, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("pysb: error: ") and "Traceback" not in r.stderr, r.stderr
    assert not (project.root / "RAN").exists(), "the program ran"


def test_a_provider_built_for_another_kit_is_refused_naming_its_distribution(
    project: Project, tmp_path: Path
) -> None:
    site = fake_dist(
        tmp_path / "site",
        "pysb-future",
        "3.1",
        entry_points={"pysb.providers": {"fake": "pysb_future:Fake"}},
        modules={"pysb_future.py": "PYSB_PROVIDERKIT = '2.0'\n" + FAKE_PROVIDER},
    )
    env = {"PYTHONPATH": str(site)}
    project.profile(OPEN)
    project.file("prog.py", PROGRAM)
    r = project.run("run", "--provider", "fake", "prog.py", env=env)
    _refused(project, r)
    assert "pysb-future 3.1" in r.stderr and "providerkit 2.0" in r.stderr, r.stderr
    r = project.run("providers", "--json", env=env)
    listed = {p["name"]: p for p in json.loads(r.stdout)}["fake"]
    assert not listed["available"] and "providerkit 2.0" in listed["reason"], listed


def test_a_provider_built_for_this_kit_runs(project: Project, tmp_path: Path) -> None:
    have = ".".join(map(str, providerkit.KIT_VERSION))
    site = fake_dist(
        tmp_path / "site",
        "pysb-current",
        entry_points={"pysb.providers": {"fake": "pysb_current:Fake"}},
        modules={"pysb_current.py": f"PYSB_PROVIDERKIT = {have!r}\n" + FAKE_PROVIDER},
    )
    project.profile(OPEN)
    project.file("prog.py", PROGRAM)
    r = project.run("run", "--provider", "fake", "prog.py", env={"PYTHONPATH": str(site)})
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr


@pytest.mark.parametrize(
    ("declared", "says"), [("'1.99'", "guardkit 1.99"), ("'banana'", "not a kit version")]
)
def test_a_guard_built_for_another_kit_is_refused_naming_its_distribution(
    declared: str, says: str, project: Project, tmp_path: Path
) -> None:
    site = fake_dist(
        tmp_path / "site",
        "pysb-newguard",
        "0.4",
        entry_points={"pysb.guards": {"newguard": "pysb_newguard"}},
        modules={"pysb_newguard.py": f"PYSB_GUARDKIT = {declared}\n"},
    )
    env = {"PYTHONPATH": str(site)}
    project.profile(OPEN)
    project.file("prog.py", PROGRAM)
    r = project.run("run", "prog.py", env=env)
    _refused(project, r)
    assert "pysb-newguard 0.4" in r.stderr and says in r.stderr, r.stderr
    r = project.run("check", env=env)
    assert r.returncode == 125 and "Traceback" not in r.stderr, r.stderr
    assert "pysb-newguard 0.4" in r.stderr and says in r.stderr, r.stderr


# -- the one path-containment helper ------------------------------------------------------

_component = st.sampled_from(["a", "b", "ab", "a b", ".x", "x.", "é"])
_paths = st.lists(_component, max_size=4).map(lambda parts: "/" + "/".join(parts))


@given(_paths, _paths, st.booleans())
def test_is_within_answers_as_pathlib_does(path: str, root: str, slash: bool) -> None:
    from pathlib import PurePosixPath

    from pysb_core.linux.paths import is_within

    spelled = root + "/" if slash and root != "/" else root
    assert is_within(path, spelled) == PurePosixPath(path).is_relative_to(root)


def test_is_within_is_component_wise() -> None:
    from pysb_core.linux.paths import is_within

    assert is_within("/a/b/c", "/a/b") and is_within("/a/b", "/a/b/")
    assert not is_within("/a/bc", "/a/b") and not is_within("/a", "/a/b")
    assert is_within("/anything", "/") and not is_within("relative", "/")


@pytest.mark.parametrize(
    ("kit", "page"),
    [(providerkit, "writing-providers.md"), (guardkit, "writing-guards.md")],
    ids=["providerkit", "guardkit"],
)
def test_every_name_of_a_kit_is_documented_in_its_guide(kit: ModuleType, page: str) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / page).read_text()
    missing = [name for name in kit.__all__ if f"`{name}`" not in text]
    assert not missing, f"docs/{page} does not document {missing}"
