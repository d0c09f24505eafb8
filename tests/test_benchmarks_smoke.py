"""Smoke test of the benchmark suite: a quick startup-only run produces a valid report.

It runs the real harness (real `pysb run` children under every available provider,
hyperfine when installed) and checks the shape of what it writes, never a timing: the
machine is shared and timings are not tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path, str]:
    out = tmp_path_factory.mktemp("bench")
    json_path, md_path = out / "latest.json", out / "performance.md"
    outputs = ["--json", str(json_path), "--markdown", str(md_path)]
    proc = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--only", "startup", "--no-reference", *outputs],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert json_path.exists(), proc.stderr[-2000:]
    return proc.returncode, json.loads(json_path.read_text()), md_path, proc.stderr


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
    # Every available provider, plus variants ("landlock/no-python-guards") of those.
    assert {name.partition("/")[0] for name in startup["pysb"]} == available
    for entry in startup["pysb"].values():
        assert ("median_s" in entry) != ("error" in entry), entry


@pytest.mark.slow
def test_quick_run_writes_markdown_below_the_marker_and_keeps_the_header(quick_run) -> None:
    _, data, md_path, _ = quick_run
    # The harness's modules are top-level names (report, targets, common): import them
    # for this test only, so that they never shadow another test's modules.
    before = set(sys.modules)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import report
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        for name in set(sys.modules) - before:
            del sys.modules[name]
    text = md_path.read_text()
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
