"""The parsed-profile cache: identical results, no yaml import when warm, never stale."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pysb_core.profile import load_policy
from pysb_core.profile.cache import cache_dir
from pysb_core.profile.loader import load_files

ROOT = Path(__file__).resolve().parents[1]

PROFILE = """\
version: 1
include: [inc.yaml]
provider: ${P:-bwrap}
env:
  TERM: ${TERM}
  "*_KEY": ${*_KEY}
files:
  expose-ro: [., d]
imports: [json, os]   # comment
limits: {memory: 512M, wall-time: 1m}
providers: {qemu: {memory: 2048M, flag: true, n: 1.5, none: null}}
"""


def _setup(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "d").mkdir()
    (tmp_path / ".pysb.yaml").write_text(PROFILE)
    (tmp_path / "inc.yaml").write_text("imports: [re]\nunenv: [B_KEY]\n")
    return {
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "TERM": "dumb",
        "A_KEY": "a",
        "B_KEY": "b",
    }


def test_cache_gives_identical_results(tmp_path: Path) -> None:
    env = _setup(tmp_path)
    cold = load_policy(".pysb.yaml", cwd=str(tmp_path), environ=env)
    entries = os.listdir(cache_dir(env))
    assert len(entries) == 2  # one per file
    warm = load_policy(".pysb.yaml", cwd=str(tmp_path), environ=env)
    assert warm == cold
    files_cold, _ = load_files(str(tmp_path / ".pysb.yaml"), cwd=str(tmp_path), environ=env)
    files_nocache, _ = load_files(
        str(tmp_path / ".pysb.yaml"), cwd=str(tmp_path), environ=env, use_cache=False
    )
    assert [f.tree for f in files_cold] == [f.tree for f in files_nocache]
    assert cold.env == {"TERM": "dumb", "A_KEY": "a"}


def test_edited_file_is_reparsed_even_with_same_size_and_mtime(tmp_path: Path) -> None:
    env = _setup(tmp_path)
    inc = tmp_path / "inc.yaml"
    assert load_policy(".pysb.yaml", cwd=str(tmp_path), environ=env).imports == (
        "json",
        "os",
        "re",
    )
    st = inc.stat()
    inc.write_text("imports: [io]\nunenv: [B_KEY]\n")  # same size as before
    os.utime(inc, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert inc.stat().st_size == st.st_size
    p = load_policy(".pysb.yaml", cwd=str(tmp_path), environ=env)
    assert p.imports == ("json", "os", "io")


def test_corrupt_cache_entry_is_ignored(tmp_path: Path) -> None:
    env = _setup(tmp_path)
    first = load_policy(".pysb.yaml", cwd=str(tmp_path), environ=env)
    directory = cache_dir(env)
    assert directory is not None
    for name in os.listdir(directory):
        Path(directory, name).write_bytes(b"\x00garbage")
    assert load_policy(".pysb.yaml", cwd=str(tmp_path), environ=env) == first


def test_cache_never_holds_environment_values(tmp_path: Path) -> None:
    env = _setup(tmp_path)
    env["A_KEY"] = "very-secret-value"
    load_policy(".pysb.yaml", cwd=str(tmp_path), environ=env)
    directory = cache_dir(env)
    assert directory is not None
    for name in os.listdir(directory):
        assert b"very-secret-value" not in Path(directory, name).read_bytes()


def test_warm_start_does_not_import_yaml(tmp_path: Path) -> None:
    env = _setup(tmp_path)
    code = (
        "import sys, os\n"
        "from pysb_core.profile import load_policy\n"
        f"p = load_policy('.pysb.yaml', cwd={str(tmp_path)!r}, environ=os.environ)\n"
        "print('yaml' in sys.modules, p.provider)\n"
    )
    run_env = {**env, "PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "")}

    def run() -> str:
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=run_env,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    assert run() == "True bwrap"  # cold: parsed with yaml
    assert run() == "False bwrap"  # warm: served from the cache
    (tmp_path / "inc.yaml").write_text("imports: [re]\n#changed\n")
    assert run() == "True bwrap"  # edited: parsed again


def test_c_and_python_loaders_agree() -> None:
    from pysb_core.profile.loader import parse_text

    samples = [
        PROFILE,
        "a: &x [1, 2.5, true, null, ~, '0x10', 0x10, 2024-01-01]\nb: *x\n"
        "c:\n  <<: {k: v}\n  d: |\n    multi\n    line\n  e: >-\n    folded\n    text\n",
        "# only a comment\n",
        "\ufeffkey: 'bom'\nü: 'ünïcode'\n",
    ]
    for text in samples:
        assert parse_text(text, "f") == parse_text(text, "f", pure=True), text
    bad = "imports: [json\nprovider: x\n"
    assert (
        parse_text(bad, "f")[1][0].split(":")[:2]
        == parse_text(bad, "f", pure=True)[1][0].split(":")[:2]
    )
