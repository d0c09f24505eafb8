"""A smoke run of the compatibility benchmark (benchmarks/compat.py): a few quick modules
of CPython's regression suite, plain and under the subprocess provider, give the same
results -- among them ``test_dataclasses``, which a future flag of pysb's own broke."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


QUICK_MODULES = ("test_textwrap", "test_dataclasses", "test_copy")


def _has_test_package() -> bool:
    """The regression-test runner and the quick modules themselves: Debian's python3 ships
    ``test.support`` and ``test.libregrtest`` but not the test modules (those are in
    ``libpython3.X-testsuite``), so importing the runner alone is no proof."""
    modules = ", ".join(f"test.{m}" for m in QUICK_MODULES)
    probe = [sys.executable, "-c", f"import test.support, test.libregrtest, {modules}"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(
    not _has_test_package(),
    reason="this Python has no `test` package with CPython's test modules "
    "(Debian: the libpython3.X-testsuite package)",
)
def test_quick_modules_match_plain_python(tmp_path: Path) -> None:
    out = tmp_path / "compat.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "compat.py"),
            "--providers",
            "subprocess",
            "--modules",
            ",".join(QUICK_MODULES),
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "compat.md"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(out.read_text())
    for module, row in data["results"].items():
        assert row["plain"]["result"] == "SUCCESS", (module, row)
        assert row["subprocess"]["result"] == "SUCCESS", (module, row)
        assert row["subprocess"]["run"] == row["plain"]["run"] > 0, (module, row)
    assert data["differences"] == []
    assert "| test_dataclasses |" in (tmp_path / "compat.md").read_text()


def _compat_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("compat", ROOT / "benchmarks" / "compat.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["compat"] = module  # dataclasses looks its module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["compat"]
    return module


def test_a_known_difference_explains_only_the_counts_it_names() -> None:
    """Errors count (3.11's Total line leaves them out); a KNOWN entry explains its own
    counts only, so a difference that changes is flagged instead of waved through."""
    compat = _compat_module()
    out = compat.parse(
        "test_os failed (1 error)\nTotal tests: run=317 skipped=55\nResult: FAILURE\n"
    )
    assert (out["errors"], out.get("failures", 0), out["skipped"]) == (1, 0, 55)
    plain = {"result": "SUCCESS", "run": 317, "skipped": 51}
    assert compat.deltas(plain, out) == (1, 4)
    assert compat.explain("landlock", "test_os", plain, out)  # KNOWN: +1 failed, +4 skipped
    assert not compat.explain("unshare", "test_os", plain, out)  # expects +1, +1
    two = compat.parse(
        "test_os failed (1 error, 1 failure)\n"
        "Total tests: run=317 failures=1 skipped=55\nResult: FAILURE\n"
    )
    assert (two["errors"], two["failures"]) == (1, 1)  # errors count beside failures
    assert not compat.explain("landlock", "test_os", plain, two)  # +2: not the known +1
    assert not compat.explain("subprocess", "test_os", plain, out)  # nothing known
    assert not compat.explain("landlock", "test_json", plain, out)  # nothing known
    hung = {"result": "TIMEOUT", "run": 0}
    assert not compat.explain("landlock", "test_os", plain, hung)


def test_a_filtered_run_keeps_its_counts() -> None:
    """A module run with ``-i`` (MODULE_ARGS: test_socket) says ``run=712 (filtered)``:
    its skips count all the same (they read as 0, hiding a difference)."""
    compat = _compat_module()
    out = compat.parse(
        "test_socket failed (5 errors)\n"
        "Total tests: run=712 (filtered) skipped=104\nResult: FAILURE\n"
    )
    assert (out["run"], out["skipped"], out["errors"]) == (712, 104, 5)
    assert compat.MODULE_ARGS["test_socket"][0] == ("-i", "*VSOCK*")


def test_a_range_of_failures_is_explained_only_within_it() -> None:
    """test_socket's UDP-Lite tests err once or twice each (a race in CPython's
    ThreadableTest) where the OS layer carries no UDP-Lite: KNOWN gives a range there, and
    counts outside it, or other skips, are unexplained."""
    compat = _compat_module()
    plain = {"result": "SUCCESS", "run": 712, "skipped": 104}

    def boxed(failed: int, skipped: int) -> dict:
        return {"result": "FAILURE", "run": 712, "errors": failed, "skipped": 104 + skipped}

    for failed in (113, 181, 226):
        assert compat.explain("landlock", "test_socket", plain, boxed(failed, 1))
    assert not compat.explain("landlock", "test_socket", plain, boxed(112, 1))
    assert not compat.explain("landlock", "test_socket", plain, boxed(227, 1))
    assert not compat.explain("landlock", "test_socket", plain, boxed(181, 3))
    assert compat.explain("bwrap", "test_socket", plain, boxed(174, 3))
    assert "+113 to +226 failed" in compat.expected_text("bwrap", "test_socket")
    # Nothing explains a difference under subprocess (the abstract-socket errors are gone).
    assert not compat.explain("subprocess", "test_socket", plain, boxed(5, 0))


def test_an_entry_about_one_python_version_applies_to_that_version_alone() -> None:
    """KNOWN entries may name the Python versions whose tests they are about (3.13's
    test_pathlib lchown errors): looked up for a run of that version only."""
    compat = _compat_module()
    plain = {"result": "SUCCESS", "run": 1510, "skipped": 504}
    boxed = {"result": "FAILURE", "run": 1510, "errors": 6, "skipped": 504}
    saved = compat.RUN_PYTHON
    try:
        compat.RUN_PYTHON = "3.13"
        assert compat.explain("bwrap", "test_pathlib", plain, boxed)
        assert not compat.explain("subprocess", "test_pathlib", plain, boxed)
        compat.RUN_PYTHON = "3.11"
        assert not compat.explain("bwrap", "test_pathlib", plain, boxed)
    finally:
        compat.RUN_PYTHON = saved


def test_a_run_of_3_12_which_counts_skips_apart_is_the_same_tests() -> None:
    """3.12's regrtest leaves skipped tests out of ``run``: a sandboxed run in which 48
    tests that skip as root run instead has a larger ``run`` and the same tests; one that
    stopped part-way (fewer in all) is never explained."""
    compat = _compat_module()
    plain = {"result": "SUCCESS", "run": 98, "skipped": 3}
    more = {"result": "SUCCESS", "run": 99, "skipped": 2}  # test_import: 1 more runs
    assert compat.same_tests(plain, more)
    assert compat.explain("bwrap", "test_import", plain, more)
    short = {"result": "FAILURE", "run": 60, "skipped": 2}
    assert not compat.same_tests(plain, short)
    assert not compat.explain("bwrap", "test_import", plain, short)
    assert not compat.same_tests(plain, {"result": "CRASHED", "run": 0})


def test_a_difference_under_subprocess_fails_the_run_even_when_known(tmp_path: Path) -> None:
    """The Python layer alone must give plain Python's result (issue 28): a KNOWN entry
    explains a difference of an OS provider, never one under ``subprocess``."""
    compat = _compat_module()
    # an entry for every provider ("*"), as KNOWN may hold
    known = compat.Known(("*",), "test_pathlib", 0, 2, "a documented difference")
    compat.KNOWN = (*compat.KNOWN, known)
    module = known.module
    plain = {"result": "SUCCESS", "run": 456, "skipped": 137}
    boxed = {"result": "FAILURE" if known.failed else "SUCCESS", "run": 456,
             "skipped": 137 + known.skipped, "failures": known.failed}  # fmt: skip

    def data(provider: str, boxed: dict = boxed) -> dict:
        return {
            "when": "now",
            "python": "3",
            "modules": [module],
            "providers": [provider],
            "unavailable": {},
            "qemu_modules": [],
            "results": {module: {"plain": plain, provider: boxed}},
            "differences": [
                {"module": module, "provider": provider, "plain": plain, "sandboxed": boxed}
            ],
        }  # fmt: skip

    md = str(tmp_path / "out.md")
    # explained, and still a failure of the run under subprocess
    assert compat.explain("subprocess", module, plain, boxed)
    assert compat.report(data("subprocess"), md) == 1
    assert compat.explain("bwrap", module, plain, boxed)
    assert compat.report(data("bwrap"), md) == 0
    # the same counts without a KNOWN entry: unexplained, under any provider
    assert not compat.explain("bwrap", "test_json", plain, boxed)


ZIPFILE_CHECK = r"""
import email, os, test
# test_zipfile's PyZipFileTests.requiresWriteAccess, for the two packages it compiles in place
print([os.access(os.path.dirname(m.__file__), os.W_OK,
                 effective_ids=os.access in os.supports_effective_ids) for m in (test, email)])
"""


@pytest.mark.skipif(not _has_test_package(), reason="no `test` package (see above)")
def test_the_profile_lets_test_zipfile_write_where_plain_python_does(tmp_path: Path) -> None:
    """Plain Python (root here) may write into the standard library's ``test`` and ``email``
    packages, which PyZipFile's tests compile in place; under the benchmark's profile they
    were read-only, and 4 tests skipped themselves (test_zipfile differed under
    subprocess). The other modules keep the read-only standard library."""
    compat = _compat_module()
    plain = subprocess.run([sys.executable, "-c", ZIPFILE_CHECK], capture_output=True, text=True)
    results = {}
    for module in ("test_zipfile", "test_json"):
        work = tmp_path / module
        (work / "t").mkdir(parents=True)
        profile = work / "compat.pysb.yaml"
        profile.write_text(compat.profile_text(work, "subprocess", module))
        pysb = Path(sys.executable).with_name("pysb")
        run = [str(pysb), "run", "--provider", "subprocess", "--profile", str(profile)]
        r = subprocess.run([*run, "-c", ZIPFILE_CHECK], capture_output=True, text=True, cwd=work)
        assert r.returncode == 0, r.stderr
        results[module] = r.stdout.strip()
    assert results["test_zipfile"] == plain.stdout.strip() == "[True, True]", results
    assert results["test_json"] == "[False, False]", results


def test_a_rerun_replaces_its_cells_and_the_differences_follow(tmp_path: Path) -> None:
    """``--report-only --merge RERUN``: a re-run of one module under one provider (after a fix)
    replaces that cell and its plain cell in the full run's JSON, the differences are
    computed again from the merged cells, and the generated section names the re-run."""
    ok = {"result": "SUCCESS", "run": 16, "skipped": 2}
    crashed = {"result": "CRASHED", "run": 0, "skipped": 0}
    full = {
        "when": "then",
        "python": "3",
        "modules": ["test_glob", "test_json"],
        "providers": ["subprocess", "qemu"],
        "unavailable": {},
        "qemu_modules": ["test_glob"],
        "results": {
            "test_glob": {"plain": ok, "subprocess": ok, "qemu": crashed},
            "test_json": {"plain": ok, "subprocess": ok, "qemu": {"result": "NOT_RUN", "run": 0}},
        },
        "differences": [
            {"module": "test_glob", "provider": "qemu", "plain": ok, "sandboxed": crashed}
        ],
    }
    rerun = {"when": "later", "modules": ["test_glob"], "providers": ["qemu"],
             "results": {"test_glob": {"plain": ok, "qemu": dict(ok, seconds=265.0)}}}  # fmt: skip
    (tmp_path / "full.json").write_text(json.dumps(full))
    (tmp_path / "rerun.json").write_text(json.dumps(rerun))
    md = tmp_path / "out.md"
    args = ["--report-only", "--json", str(tmp_path / "full.json"), "--markdown", str(md)]
    compat = _compat_module()
    assert compat.main(args) == 1  # the crash: unexplained
    assert compat.main([*args, "--merge", str(tmp_path / "rerun.json")]) == 0
    merged = json.loads((tmp_path / "full.json").read_text())
    assert merged["results"]["test_glob"]["qemu"]["result"] == "SUCCESS"
    assert merged["differences"] == []
    assert merged["reruns"] == [{"module": "test_glob", "provider": "qemu", "when": "later"}]
    assert "test_glob under qemu (later)" in md.read_text()
    # a re-run of a module the run does not have is an error, not a silent addition
    rerun["modules"] = ["test_nosuch"]
    (tmp_path / "rerun.json").write_text(json.dumps(rerun))
    with pytest.raises(SystemExit):
        compat.main([*args, "--merge", str(tmp_path / "rerun.json")])
