"""Packaging: what ``pip install`` gives a user, and what PyPI is given.

Every distribution (pysb-core and the six first-party plugins) is built as an sdist and a
wheel built *from that sdist* (``python -m build``), checked with ``twine check --strict``,
inspected (license, readme, classifiers, URLs, ``py.typed``, an sdist holding its own
package only), and installed into fresh virtual environments: with the newest dependencies,
with the oldest versions ``pyproject.toml`` allows, and with every Python the classifiers
name that is installed here. pysb-core alone works, names what it lacks, and a third-party
provider plugs in by entry point.

Installs are offline from the wheelhouse ``make dev`` fills, except the other Pythons'
(their compiled PyYAML wheels come from PyPI).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from pysb_core.testing import offline_pip, offline_venv, wheelhouse

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = wheelhouse()


@pytest.fixture(scope="module")
def core_only_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return offline_venv(tmp_path_factory.mktemp("core-only") / "venv", str(ROOT))


def _run(env_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(env_dir / "bin" / "pysb"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        timeout=60,
        check=False,
    )


#: This venv's pysb runs with no HOME (no trust store): the profile is named, not found.
NAMED = ("--profile", ".pysb.yaml")


def test_core_alone_refuses_to_run_without_an_os_sandbox(
    core_only_env: Path, tmp_path: Path
) -> None:
    """pysb-core alone has no OS provider: the default (auto) refuses and says what to
    install; subprocess runs only when named (issue 27: it was the silent default)."""
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    r = _run(core_only_env, "run", *NAMED, "-c", "open('RAN', 'w')", cwd=tmp_path)
    assert r.returncode == 125, r.stderr
    assert not (tmp_path / "RAN").exists()
    assert "no OS sandbox can run this profile here" in r.stderr
    for name in ("bwrap", "unshare", "landlock", "firejail"):
        assert f"{name}: not installed" in r.stderr
    assert "pip install pysb-bwrap" in r.stderr and "apt-get install bubblewrap" in r.stderr
    assert "--provider subprocess" in r.stderr and "Traceback" not in r.stderr
    r = _run(core_only_env, "check", *NAMED, cwd=tmp_path)
    assert r.returncode == 125 and "no OS sandbox can run this profile here" in r.stderr
    r = _run(core_only_env, "providers", "--json", cwd=tmp_path)
    names = [p["name"] for p in json.loads(r.stdout)]
    assert names == ["subprocess"]


def test_core_alone_enforces_no_default_but_refuses_a_python_rule_written(
    core_only_env: Path, tmp_path: Path
) -> None:
    """Defaults (deny every import and sensitive call) are not rules the user wrote
    (SPEC 2): without the Python layer they are only warned of; an `imports` rule the
    user wrote still refuses the run unless they opt out of the Python layer."""
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    r = _run(
        core_only_env, "run", *NAMED, "--provider", "subprocess", "-c", "print(1)", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1\n"
    assert "pysb-guards" in r.stderr and "not installed" in r.stderr
    (tmp_path / ".pysb.yaml").write_text("version: 1\nimports: [json]\n")
    r = _run(
        core_only_env, "run", *NAMED, "--provider", "subprocess", "-c", "print(1)", cwd=tmp_path
    )
    assert r.returncode == 125, r.stderr
    assert ".pysb.yaml:2: 'imports: json' is not enforced" in r.stderr
    assert "pip install pysb-guards" in r.stderr and "--no-python-guards" in r.stderr
    assert "Traceback" not in r.stderr
    r = _run(
        core_only_env,
        "run",
        *NAMED,
        "--provider",
        "subprocess",
        "--no-python-guards",
        "-c",
        "print(1)",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1\n"


def test_core_and_one_provider_run_a_files_only_profile(
    core_and_bwrap_env: Path, tmp_path: Path
) -> None:
    """Issue 27: pysb-core + pysb-bwrap, no pysb-guards: a files-only profile was refused for
    the `<default>` imports and api rules nobody wrote. It runs under the default (auto:
    bwrap), warned that the Python layer is absent, and bwrap alone confines it."""
    from pysb_core.testing import require_provider

    require_provider("bwrap")
    env_dir = core_and_bwrap_env  # tests/conftest.py
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.txt").write_text("visible\n")
    (tmp_path / "secret.txt").write_text("s3cr3t\n")
    (project / ".pysb.yaml").write_text("version: 1\nfiles:\n  expose-ro: [.]\n")
    code = (
        "print(open('data.txt').read().strip())\n"
        f"try:\n    open({str(tmp_path / 'secret.txt')!r})\nexcept OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    r = _run(env_dir, "run", *NAMED, "--verbose", "-c", code, cwd=project)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "visible\nrefused 2\n"
    assert "provider 'bwrap' chosen by 'auto'" in r.stderr
    assert "pysb-guards" in r.stderr and "not installed" in r.stderr
    r = _run(env_dir, "check", *NAMED, cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "<default>" in r.stdout  # reported, not refused


def test_third_party_provider_installs_and_runs(core_only_env: Path, tmp_path: Path) -> None:
    offline_pip(core_only_env, str(ROOT / "docs" / "examples" / "pysb-nnp"))
    r = _run(core_only_env, "providers", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    nnp = next(p for p in json.loads(r.stdout) if p["name"] == "nnp")
    assert nnp["distribution"] == "pysb-nnp" and nnp["available"] is True
    assert sorted(nnp["enforces"]) == ["env", "limits"]
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    r = _run(
        core_only_env,
        "run",
        "--profile",
        ".pysb.yaml",
        "--provider",
        "nnp",
        "--no-python-guards",
        "-c",
        "print([l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].split()[1])",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"  # the provider's own mechanism really ran
    r = _run(core_only_env, "plugins", "--json", cwd=tmp_path)
    assert any(p["name"] == "nnp" and p["kind"] == "provider" for p in json.loads(r.stdout))


def test_core_alone_names_the_first_party_packages_it_lacks(
    core_only_env: Path, tmp_path: Path
) -> None:
    from pysb_core.launch.catalog import FIRST_PARTY

    r = _run(core_only_env, "providers", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Not installed (first-party packages):" in r.stdout
    for package in FIRST_PARTY:
        assert f"pip install {package.distribution}" in r.stdout


# ---------------------------------------------------------------------------------------
# Built distributions
# ---------------------------------------------------------------------------------------

PROJECTS = {
    "pysb-core": ROOT,
    **{p.name: p for p in sorted((ROOT / "plugins").glob("pysb-*"))},
}
#: Python packages of each distribution (what its sdist may hold besides the boilerplate).
PACKAGES = {name: name.replace("-", "_") for name in PROJECTS}
SDIST_BOILERPLATE = {"PKG-INFO", "pyproject.toml", "README.md", "LICENSE", ".gitignore"}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist + wheel (built from the sdist) of every distribution, in one directory."""
    out = tmp_path_factory.mktemp("dist")
    for name, project in PROJECTS.items():
        r = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(project)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert r.returncode == 0, f"{name}: {r.stdout[-2000:]}{r.stderr[-2000:]}"
    return out


def _wheel(dists: Path, name: str) -> Path:
    (found,) = dists.glob(f"{PACKAGES[name]}-*.whl")
    return found


def _sdist(dists: Path, name: str) -> Path:
    (found,) = dists.glob(f"{PACKAGES[name]}-*.tar.gz")
    return found


def _metadata(wheel: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(z.read(meta).decode())
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    fields["_body"] = [message.get_payload()]
    return fields


def test_twine_check_strict_passes_for_every_file(dists: Path) -> None:
    files = sorted(str(p) for p in dists.iterdir())
    assert len(files) == 2 * len(PROJECTS)
    r = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_metadata_a_pypi_reviewer_expects(dists: Path, name: str) -> None:
    meta = _metadata(_wheel(dists, name))
    assert meta["License-Expression"] == ["MIT"]
    assert meta["License-File"] == ["LICENSE"]
    assert meta["Requires-Python"] == [">=3.11"]
    assert meta["Description-Content-Type"] == ["text/markdown"]
    urls = dict(u.split(", ", 1) for u in meta["Project-URL"])
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls)
    classifiers = set(meta["Classifier"])
    for wanted in ("Operating System :: POSIX :: Linux", "Typing :: Typed"):
        assert wanted in classifiers
    pythons = {c.rsplit(" :: ", 1)[1] for c in classifiers if re.search(r":: 3\.\d+$", c)}
    assert pythons == {"3.11", "3.12", "3.13"}
    body = meta["_body"][0]
    assert len(body) > 200
    # links must work on PyPI, where relative ones break
    assert not re.search(r"\]\((?!https?://|#)[^)]*\)", body), "relative link in the readme"


def test_core_version_has_one_source(dists: Path) -> None:
    import pysb_core

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in data["project"] and "version" in data["project"]["dynamic"]
    assert _metadata(_wheel(dists, "pysb-core"))["Version"] == [pysb_core.__version__]


def test_build_backend_writes_license_expression_correctly() -> None:
    """hatchling before 1.27 wrote License-Expression under Metadata-Version 2.1, which
    twine rejects."""
    for project in PROJECTS.values():
        data = tomllib.loads((project / "pyproject.toml").read_text())
        assert data["build-system"]["requires"] == ["hatchling>=1.27"], project


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_wheel_has_its_package_typed_and_licensed(dists: Path, name: str) -> None:
    package = PACKAGES[name]
    with zipfile.ZipFile(_wheel(dists, name)) as z:
        names = z.namelist()
    assert f"{package}/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {package, next(t for t in tops if t.endswith(".dist-info"))}


def test_runtime_package_holds_no_test_helpers(dists: Path) -> None:
    with zipfile.ZipFile(_wheel(dists, "pysb-core")) as z:
        names = set(z.namelist())
    assert "pysb_core/remote/testkit.py" not in names
    assert "pysb_core/remote/bench.py" not in names
    # the pytest plugin is shipped, behind the `testing` extra that brings pytest
    assert "pysb_core/testing/__init__.py" in names
    extras = _metadata(_wheel(dists, "pysb-core"))["Requires-Dist"]
    assert "pytest>=8; extra == 'testing'" in extras


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_sdist_holds_only_its_own_package(dists: Path, name: str) -> None:
    with tarfile.open(_sdist(dists, name)) as t:
        members = [m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name]
    files = {m for m in members if m}
    code = {f for f in files if f not in SDIST_BOILERPLATE}
    prefix = f"{PACKAGES[name]}/" if name == "pysb-core" else f"src/{PACKAGES[name]}/"
    assert code and all(f.startswith(prefix) for f in code), sorted(code - {""})
    assert {"PKG-INFO", "pyproject.toml", "README.md", "LICENSE"} <= files
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)


# ---------------------------------------------------------------------------------------
# Fresh installs of the built wheels
# ---------------------------------------------------------------------------------------


def _oldest_pins() -> list[str]:
    """``name==lower-bound`` for every runtime dependency of pysb-core."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = []
    for requirement in data["project"]["dependencies"]:
        name, low = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+),<[0-9.]+", requirement).groups()
        pins.append(f"{name}=={low}")
    return pins


def _fresh_env(where: Path, python: str, dists: Path, *requirements: str, online: bool) -> Path:
    env_dir = where / "venv"
    subprocess.run([python, "-m", "venv", str(env_dir)], check=True, timeout=120)
    index = [] if online else ["--no-index"]
    cmd = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", *index]
    cmd += ["--find-links", str(dists), "--find-links", str(WHEELHOUSE), *requirements]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return env_dir


def _works(env_dir: Path, tmp_path: Path) -> None:
    """The installed pysb lists every provider and enforces a profile under two of them."""
    from pysb_core.launch.catalog import FIRST_PARTY

    r = _run(env_dir, "providers", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    names = {p["name"] for p in json.loads(r.stdout)}
    assert names == {"subprocess", *(p.provider for p in FIRST_PARTY if p.provider)}
    assert "Not installed" not in _run(env_dir, "providers", cwd=tmp_path).stdout
    (tmp_path / ".pysb.yaml").write_text("version: 1\nimports: [json]\n")
    for provider in ("subprocess", "landlock"):
        ok = _run(
            env_dir, "run", *NAMED, "--provider", provider, "-c", "import json; print(1)",
            cwd=tmp_path,
        )  # fmt: skip
        if provider != "subprocess" and "unavailable" in ok.stderr:
            continue  # this machine's kernel; tests/ of the provider cover it
        assert (ok.returncode, ok.stdout) == (0, "1\n"), ok.stderr
        denied = _run(
            env_dir, "run", *NAMED, "--provider", provider, "-c", "import csv", cwd=tmp_path
        )
        assert denied.returncode == 1 and "csv" in denied.stderr
    python = str(env_dir / "bin" / "python")
    no_pytest = subprocess.run(
        [python, "-c", "import pysb_core.testing"], capture_output=True, text=True, timeout=60
    )
    assert "pip install 'pysb-core[testing]'" in no_pytest.stderr


@pytest.mark.slow
def test_all_wheels_install_and_work_with_the_newest_dependencies(
    dists: Path, tmp_path: Path
) -> None:
    if not WHEELHOUSE.is_dir():
        pytest.skip("no wheelhouse: run `make dev` (it builds one for offline installs)")
    env_dir = _fresh_env(tmp_path, sys.executable, dists, "pysb-core[all]", online=False)
    _works(env_dir, tmp_path)


@pytest.mark.slow
def test_all_wheels_work_with_the_oldest_dependencies_allowed(dists: Path, tmp_path: Path) -> None:
    if not WHEELHOUSE.is_dir():
        pytest.skip("no wheelhouse: run `make dev` (it builds one for offline installs)")
    pins = _oldest_pins()
    env_dir = _fresh_env(tmp_path, sys.executable, dists, "pysb-core[all]", *pins, online=False)
    freeze = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    for pin in pins:
        assert pin.lower() in freeze
    _works(env_dir, tmp_path)


def _other_pythons() -> list[str]:
    """The interpreters of the classifiers' versions other than this one, when installed."""
    import glob

    found = []
    for version in ("3.12", "3.13"):
        candidates = sorted(
            glob.glob(str(Path.home() / f".pyenv/versions/{version}.*/bin/python3"))
        )
        candidates += (
            [f"/usr/bin/python{version}"] if Path(f"/usr/bin/python{version}").exists() else []
        )
        if candidates:
            found.append(candidates[-1])
    return found


@pytest.mark.slow
@pytest.mark.parametrize("python", _other_pythons() or ["none"])
def test_all_wheels_work_on_each_python_the_classifiers_name(
    python: str, dists: Path, tmp_path: Path
) -> None:
    if python == "none":
        pytest.skip("no other Python 3.12/3.13 interpreter here")
    env_dir = _fresh_env(tmp_path, python, dists, "pysb-core[all]", online=True)
    _works(env_dir, tmp_path)
