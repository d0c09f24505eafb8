"""Smoke test of the benchmark suite: a quick startup-only run produces a valid report.

It runs the real harness (real `pysb run` children under every available provider,
hyperfine when installed) and checks the shape of what it writes, never a timing: the
machine is shared and timings are not tests.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


#: Providers whose every run boots a VM (conftest.py's ``COSTLY``): two boots were most of
#: the quick run's time, so the run of ``make test`` leaves them out and the rest tier
#: measures them on their own (:func:`test_quick_startup_run_measures_a_costly_provider`).
COSTLY = ("qemu",)


def _provider_names() -> list[str]:
    from pysb_core.testing import pysb_command

    r = subprocess.run(
        [*pysb_command(), "providers", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [p["name"] for p in json.loads(r.stdout)]


def _quick(out: Path, providers: list[str]) -> tuple[int, dict, Path, str]:
    """A quick startup-only run of the harness measuring ``providers``."""
    json_path, md_path = out / "latest.json", out / "performance.md"
    outputs = ["--json", str(json_path), "--markdown", str(md_path)]
    command = [sys.executable, str(RUN), "--quick", "--only", "startup", "--no-reference"]
    proc = subprocess.run(
        [*command, "--providers", ",".join(providers), *outputs],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert json_path.exists(), proc.stderr[-2000:]
    return proc.returncode, json.loads(json_path.read_text()), md_path, proc.stderr


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path, str]:
    names = [n for n in _provider_names() if n not in COSTLY]
    return _quick(tmp_path_factory.mktemp("bench"), names)


@pytest.mark.slow
def test_quick_startup_run_writes_the_expected_json(quick_run) -> None:
    rc, data, _, stderr = quick_run
    # 0: everything measured; 1: something failed, and then it is listed (never on timing).
    assert rc in (0, 1), stderr[-2000:]
    assert (rc == 1) == bool(data["errors"]), data["errors"]
    meta = data["meta"]
    for key in ("date", "quick", "machine", "load_before", "load_after", "duration_s"):
        assert key in meta
    assert meta["quick"] is True and meta["sections"] == ["startup"]
    for key in ("cpu", "cores", "kernel", "python"):
        assert meta["machine"][key]
    assert data["reference_install"] == {"installed": False, "error": "--no-reference"}
    assert set(data["sections"]) == {"startup"}
    assert data["targets"]["startup_ratio"]["subprocess"] == ["<=", 6.0]
    startup = data["sections"]["startup"]
    assert startup["python"]["median_s"] > 0
    assert startup["python"]["runs"] >= 1
    assert startup["reference"] == {}
    # The subprocess provider exists everywhere: it must have a figure and a ratio.
    sub = startup["pysb"]["subprocess"]
    assert "error" not in sub, sub
    assert sub["median_s"] > 0
    assert sub["baseline_s"] > 0
    assert sub["ratio"] == pytest.approx(sub["median_s"] / sub["baseline_s"])
    assert sub["cpu_s"] > 0
    available = {n for n, i in data["providers"]["pysb"].items() if i["available"]}
    # Every available provider named, plus variants ("landlock/no-python-guards") of those.
    assert {name.partition("/")[0] for name in startup["pysb"]} == available - set(COSTLY)
    for entry in startup["pysb"].values():
        assert ("median_s" in entry) != ("error" in entry), entry
    # Each provider's floor measured in the same run (benchmarks/_spawn_floor.py): two
    # interpreters at least, so above python -c pass alone.
    floor = startup["floor"]["subprocess"]
    assert "error" not in floor, floor
    assert floor["ratio"] > 1.0 and "_spawn_floor.py" in floor["command"]


@pytest.mark.slow
@pytest.mark.full  # the rest tier (scripts/test.sh --rest): a VM boot per run
def test_quick_startup_run_measures_a_costly_provider(tmp_path: Path) -> None:
    rc, data, _, stderr = _quick(tmp_path, list(COSTLY))
    assert rc in (0, 1), stderr[-2000:]
    assert (rc == 1) == bool(data["errors"]), data["errors"]
    available = {n for n, i in data["providers"]["pysb"].items() if i["available"]}
    measured = data["sections"]["startup"]["pysb"]
    assert {name.partition("/")[0] for name in measured} == available & set(COSTLY)
    for entry in measured.values():
        assert ("median_s" in entry) != ("error" in entry), entry


def _report() -> ModuleType:
    """benchmarks/report.py, imported for one test only.

    The harness's modules are top-level names (report, targets, common): they are removed
    from sys.modules again so that they never shadow another test's modules.
    """
    before = set(sys.modules)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("report")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        for name in set(sys.modules) - before:
            del sys.modules[name]


@pytest.mark.slow
def test_quick_run_writes_markdown_below_the_marker_and_keeps_the_header(quick_run) -> None:
    _, data, md_path, _ = quick_run
    report = _report()
    text = md_path.read_text()
    assert "## The budget at a glance" in text
    assert report.MARKER in text
    assert "## Startup: `-c pass`" in text.split(report.MARKER, 1)[1]
    assert "| subprocess |" in text
    # A hand-written header (with someone's notes) survives regeneration; the old
    # generated part does not.
    custom = "# Performance\n\n## Notes\n\n- bwrap: a note someone wrote by hand.\n\n"
    md_path.write_text(custom + report.MARKER + "\n\nOLD GENERATED TABLE\n")
    report.write(md_path, data)
    regenerated = md_path.read_text()
    assert regenerated.startswith(custom)
    assert "OLD GENERATED TABLE" not in regenerated
    assert regenerated.count(report.MARKER) == 1
    # A file without the marker: its text is kept in the default header's Notes section.
    md_path.write_text("# Performance\n\n## bwrap start-up\n\nabout 4 ms over python\n")
    report.write(md_path, data)
    header = md_path.read_text().split(report.MARKER, 1)[0]
    assert header.startswith(report.DEFAULT_HEADER.rstrip())
    notes = header.split("## Notes", 1)[1]
    assert "### bwrap start-up\n\nabout 4 ms over python" in notes


def _results() -> dict:
    """Results shaped as a full run writes them, with each kind of failure in them."""
    meta = {
        "date": "2026-01-01 00:00 UTC",
        "quick": False,
        "machine": {
            "cpu": "CPU",
            "cores": 2,
            "memory": "24 GiB",
            "kernel": "6.1",
            "os": "Debian",
            "python": "3.11.7",
            "python_path": "/x/python",
        },
        "load_before": "1.00 / 1.00 / 1.00",
        "load_after": "2.00 / 2.00 / 2.00",
        "duration_s": 100.0,
        "section_durations_s": {"startup": 10.0},
        "pysb_version": "0.1.0",
    }
    fast = {"median_s": 0.05, "min_s": 0.04, "max_s": 0.06, "cpu_s": 0.04, "runs": 5}
    startup = {
        "python": {**fast, "median_s": 0.01, "cpu_s": 0.01, "tool": "hyperfine"},
        "pysb": {
            "subprocess": {**fast, "ratio": 5.0, "cpu_ratio": 4.0, "baseline_s": 0.01},
            "landlock": {**fast, "ratio": 9.0, "cpu_ratio": 9.0, "baseline_s": 0.01},
            "landlock/no-python-guards": {**fast, "ratio": 4.0, "baseline_s": 0.01},
            "unshare": {"error": "pysb: error: unshare: broken (rc 125)"},
        },
        "reference": {"subprocess": {**fast, "median_s": 0.5, "ratio": 50.0}},
        "floor": {"landlock": {**fast, "median_s": 0.025, "ratio": 2.5}},
    }
    call = {"p50_s": 4e-05, "p99_s": 0.0009, "min_s": 3e-05, "max_s": 0.001, "calls": 10}
    payload = {"median_s": 0.02, "min_s": 0.02, "reps": 3}
    ours = {
        "start_stop": {"start_s": 0.1, "stop_s": 0.003, "first_call_s": 0.002},
        "latency": call,
        "calls_per_s_1_thread": 20000.0,
        "calls_per_s_8_threads": 25000.0,
        "calls_per_s_8_tasks": 15000.0,
        "argument_1mib": payload,
        "result_1mib": payload,
        "argument_10mib": payload,
        "result_10mib": {**payload, "median_s": 0.2},
    }
    limit = {"error": "SandBoxProtocolError: the reply is 1 bytes, above the limit"}
    ref = {**ours, "result_1mib": limit, "result_10mib": limit}
    op = {"median_s": 1e-05, "plain_s": 1e-05, "ratio": 1.0}
    guards = {
        "plain": {
            k: {"median_s": 1e-05} for k in ("open", "stat", "import_module", "connect", "environ")
        },
        "pysb": {
            "subprocess": {
                "open": op,
                "stat": op,
                "import_module": {**op, "ratio": 3.0},
                "connect": {"error": "not measured: pysb refuses a loopback rule under x"},
                "environ": op,
            },
            "qemu": {"error": "not measured: TCG"},
        },
        "reference": {"subprocess": {"error": "Guard network connection DENIED (rc 1)"}},
    }
    rss = {"parent_kib": 16000, "child_kib": 13000, "child_name": "python3", "runs": 3}
    memory = {
        "python_c_pass": {"parent_kib": 8700, "child_kib": None, "child_name": None},
        "run_c_pass": {"pysb": {"subprocess": rss, "bwrap": {"error": "boom"}}, "reference": {}},
        "idle_sandboxes": {"pysb": {"subprocess": {**rss, "parent_before_kib": 20000}}},
    }
    return {
        "meta": meta,
        "reference_install": {"installed": True, "version": "0.7.0", "venv": "b/.venv-ref"},
        "providers": {
            "pysb": {
                "subprocess": {"available": True},
                "firejail": {"available": False, "reason": "no"},
            },
            "reference": {"qemu": {"available": False, "reason": "not run: downloads"}},
        },
        "sections": {
            "startup": startup,
            "partial": {"pysb": {"subprocess": ours}, "reference": {"subprocess": ref}},
            "guards": guards,
            "memory": memory,
        },
        "errors": ["startup: pysb run under unshare failed: broken"],
    }


def test_report_renders_figures_targets_and_failures() -> None:
    text = _report().render(_results())
    # Targets beside figures, met or missed.
    assert "| subprocess | 50.0 ms | 5.00x ✓ | 4.00x | — | — | ≤ 6.00x | ≤ 3.00x ✗ |" in text
    # the floor beside the figure: 2.50x python, pysb 2.00x its floor; issue 30's goal
    assert "| landlock | 50.0 ms | 9.00x ✗ | 9.00x | 2.50x | 2.00x | ≤ 8.00x | ≤ 3.00x ✗ |" in text
    assert "| landlock, no Python guards | 50.0 ms | 4.00x ✓ |" in text
    assert "200 ms ✗" in text  # the 10 MiB result over its 50 ms target
    # Failures and refusals are shown with their reason, never as a number.
    assert "failed: pysb: error: unshare: broken (rc 125)" in text
    assert "| reference, subprocess |" in text and "refused" in text
    assert "not measured: pysb refuses a loopback rule under x" in text
    assert "failed: Guard network connection DENIED (rc 1)" in text
    assert "| pysb `-c pass` | bwrap | failed: boom |" in text
    assert "(19.5 MiB before entering)" in text
    # The reference's speed-up, the budget summary and the run's errors.
    assert "How many times faster pysb is than the reference" in text
    assert "| calls/s, 8 threads, subprocess | 25,000/s | 25,000/s | ≥ 20,000/s | yes |" in text
    assert "## Errors in this run" in text and "unshare failed: broken" in text
    assert "not available: firejail (no)" in text


@pytest.mark.slow
def test_the_proxy_benchmark_measures_every_path(tmp_path: Path) -> None:
    """benchmarks/proxy.py runs (loopback servers, the real proxy) and reports each path."""
    out = tmp_path / "proxy.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "proxy.py"), "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert set(figures) == {
        "http direct",
        "http via proxy",
        "https direct",
        "https tunnelled",
        "https intercepted",
    }
    for row in figures.values():
        assert row["p50_ms"] > 0 and row["mib_per_s"] > 0


@pytest.mark.slow
def test_startup_gate_prints_the_figure_and_the_module_counts() -> None:
    """CI's per-commit start-up figure (benchmarks/startup_gate.py) runs and says what it
    measured; a bound no run can exceed, so that timing never decides this test."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "startup_gate.py"),
            "--rounds",
            "1",
            "--bound",
            "100000",
            "--providers",
            "subprocess",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any("÷ python -c pass, subprocess:" in ln and "x CPU" in ln for ln in lines), lines
    counts = next(ln for ln in lines if "modules imported:" in ln)
    assert "python " in counts and "pysb " in counts and "(subprocess)" in counts


@pytest.mark.slow
def test_startup_gate_fails_above_its_bound() -> None:
    """A bound every run exceeds fails the gate (exit 1): the gate can fail."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "startup_gate.py"),
            "--rounds",
            "1",
            "--bound",
            "0.01",
            "--providers",
            "subprocess",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "ABOVE the bound of 0.01x" in proc.stdout
