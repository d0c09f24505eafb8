"""The two tiers of the suite (conftest.py): ``make test`` runs the fast complete pass
(``--fast``), ``make test-full`` every cell; and a run that skipped every test of a
required provider fails (pysb_core.testing)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]


def _conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@given(st.sets(st.tuples(st.integers(0, 12), st.sampled_from("ABCDEF")), min_size=1, max_size=60))
def test_the_covering_holds_every_case_and_every_provider(cells: set) -> None:
    ordered = sorted(cells)
    chosen = _conftest()._covering(ordered)
    assert chosen <= cells
    assert {c for c, _ in chosen} == {c for c, _ in cells}
    assert {p for _, p in chosen} == {p for _, p in cells}
    cases, providers = {c for c, _ in cells}, {p for _, p in cells}
    assert len(chosen) <= len(cases) + len(providers)


def _collect(*args: str) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return [line for line in r.stdout.splitlines() if "::" in line]


def test_the_fast_tier_runs_every_program_and_every_provider_of_the_corpus() -> None:
    full = _collect("tests/test_learning_corpus.py")
    fast = _collect("--fast", "tests/test_learning_corpus.py")
    cells = [t for t in fast if "runs_unchanged[" in t]
    programs = {t.split("[")[1].rsplit("-", 1)[0] for t in full if "runs_unchanged[" in t}
    providers = {t.rsplit("-", 1)[1].rstrip("]") for t in full if "runs_unchanged[" in t}
    assert {t.split("[")[1].rsplit("-", 1)[0] for t in cells} == programs
    assert {t.rsplit("-", 1)[1].rstrip("]") for t in cells} == providers
    assert len(cells) == max(len(programs), len(providers)) < len(programs) * len(providers)
    # what is not a provider x program cell stays
    assert [t for t in fast if "runs_unchanged[" not in t] == [
        t for t in full if "runs_unchanged[" not in t
    ]


def test_the_fast_tier_runs_every_attack_and_every_interpreter_of_the_seal_corpus() -> None:
    """A test naming no provider but an interpreter (``python``) and a case is a matrix too:
    each attack of the corpus on one interpreter, each interpreter at least once; the
    interpreter-only tests of the same file keep all their cells."""
    path = "plugins/pysb-guards/tests/test_judge_seal.py"
    full, fast = _collect(path), _collect("--fast", path)
    corpus = "test_no_program_code_under_a_judge["

    def split(nodeid: str) -> tuple[str, str]:
        python, _, attack = nodeid.split("[", 1)[1].rstrip("]").partition("-")
        return attack, python

    cells = {split(t) for t in fast if corpus in t}
    every = {split(t) for t in full if corpus in t}
    assert {a for a, _ in cells} == {a for a, _ in every}
    assert {p for _, p in cells} == {p for _, p in every}
    assert len(cells) == max(len({a for a, _ in every}), len({p for _, p in every}))
    assert len(cells) < len(every) or len({p for _, p in every}) == 1
    assert [t for t in fast if "[" not in t] == [t for t in full if "[" not in t]


def test_qemu_runs_its_own_tests_in_full_and_only_chosen_cells_elsewhere() -> None:
    paths = ("plugins/pysb-qemu/tests", "tests/test_compat_repl.py")
    full, fast = _collect(*paths), _collect("--fast", *paths)
    own = [t for t in full if t.startswith("plugins/pysb-qemu/")]
    assert own and set(own) <= set(fast)
    assert [t for t in fast if "compat_repl" in t and "qemu" in t] == []
    assert {t for t in full if "compat_repl" in t and "qemu" not in t} <= set(fast)


def test_a_required_provider_whose_every_test_skipped_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["pysb_core.testing"]\n')
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n"
        "from pysb_core.testing import note_provider\n"
        "def test_one():\n"
        "    note_provider('bwrap')\n"
        "    pytest.skip('not as this user')\n"
    )
    env = {**os.environ, "PYSB_REQUIRE_PROVIDERS": "bwrap"}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tmp_path)]
    r = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "every test of bwrap was skipped" in r.stdout, r.stdout
    env["PYSB_REQUIRE_PROVIDERS"] = ""  # not required: a skip is a skip
    r = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
