"""The plugin guides walk through: the example plugin of docs/writing-providers.md and of
docs/writing-guards.md, taken from the page's blocks, is built as a wheel, installed into a
fresh virtual environment (offline, from the wheelhouse) next to pysb-core, and its own
tests run there with pysb_core.testing -- what a third party following the page gets.

The blocks are also the files of docs/examples/<distribution>: one example, not two.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, offline_venv, wheelhouse

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

sys.path.insert(0, str(Path(__file__).parent))
from test_docs import blocks  # noqa: E402

#: page -> (distribution, extra requirements of its test environment, tests expected)
GUIDES = {
    "writing-providers.md": ("pysb-nnp", (), 5),
    "writing-guards.md": ("pysb-signals", (str(ROOT / "plugins" / "pysb-guards"),), 4),
}


def _files(page: str, dist: str) -> dict[str, str]:
    """``relative path -> text`` of every ``doc-test: file DIST/...`` block of ``page``."""
    out = {}
    for block in blocks(DOCS / page):
        name = block.argument.split()[0] if block.action == "file" else ""
        if name.startswith(f"{dist}/"):
            out[name.removeprefix(f"{dist}/")] = block.code
    return out


@pytest.mark.parametrize("page", sorted(GUIDES))
def test_the_page_shows_every_file_of_its_example(page: str) -> None:
    dist, _, _ = GUIDES[page]
    shown = _files(page, dist)
    example = DOCS / "examples" / dist
    on_disk = {
        str(p.relative_to(example)): p.read_text()
        for p in example.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
    }
    assert set(shown) == set(on_disk), set(shown) ^ set(on_disk)
    for rel, text in shown.items():
        assert text == on_disk[rel], f"{page}: the block of {rel} differs from {example / rel}"


@pytest.mark.parametrize("page", sorted(GUIDES))
def test_the_example_plugin_builds_installs_and_passes_its_tests(page: str, tmp_path: Path) -> None:
    dist, extra, expected = GUIDES[page]
    source = tmp_path / dist
    for rel, text in _files(page, dist).items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
         "--find-links", str(wheelhouse()), "-w", str(wheels), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("*.whl")
    env = offline_venv(tmp_path / "venv", f"{ROOT}[testing]", *extra, str(wheel))
    r = subprocess.run(
        [str(env / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests"],
        cwd=source,
        env={**BASE_ENV, "PATH": f"{env / 'bin'}:{BASE_ENV['PATH']}"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith(f"{expected} passed in "), r.stdout
