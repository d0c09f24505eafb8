"""pysb's state directory (probe, profile, entry-point caches) is never writable from a sandbox.

What is cached there steers the *next* run on the host (which bwrap binary to run, which
parsed profile to trust). A sandbox that exposes the cache's parent read-write must still
not be able to write it, nor rename it (or a directory above it) away and put another in
its place -- through the Python layer and, with ``--no-python-guards``, the OS layer.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pysb_core.launch import probecache
from pysb_core.profile import cache as profile_cache
from pysb_core.provider import ProviderStatus
from pysb_core.testing import Project, require_provider


def _setup(project: Project) -> tuple[Path, Path]:
    """A cache home inside the project, exposed read-write; returns (cache home, state dir)."""
    home = project.root / "cache-home"
    home.mkdir()
    return home, home / "pysb"


def test_python_layer_refuses_writes_to_the_state_dir(project: Project) -> None:
    home, state = _setup(project)
    project.profile("version: 1\nfiles: {expose-rw: [./cache-home]}\nimports: [os]\n")
    code = f"""
import os
ok = open({str(home / "other.txt")!r}, "w").write("fine")  # the rest of the exposure works
for attempt in (
    lambda: open({str(state / "profiles" / "poison.marshal")!r}, "wb"),
    lambda: open({str(state / "entrypoints" / "poison.marshal")!r}, "wb"),
    lambda: open({str(state / "new.json")!r}, "w"),
    lambda: os.rename({str(state)!r}, {str(home / "moved")!r}),
    lambda: os.rename({str(home)!r}, {str(project.root / "moved-home")!r}),
    lambda: os.rmdir({str(state / "probes")!r}),
):
    try:
        attempt()
    except PermissionError as e:
        print(type(e).__name__, "cache directory" in str(e))
    else:
        print("ALLOWED")
"""
    (state / "probes").mkdir(parents=True)
    res = project.run("run", "-c", code, env={"XDG_CACHE_HOME": str(home)})
    assert res.returncode == 0, res.stderr
    assert "ALLOWED" not in res.stdout
    assert res.stdout.splitlines() == ["WriteDeniedError True"] * 6, res.stdout
    assert (home / "other.txt").read_text() == "fine"
    # pysb's own caches only (the entry points' once their files have settled: entrycache;
    # the command started ahead, remembered after a launch it can start: prestart)
    assert {p.name for p in state.iterdir()} - {"entrypoints", "prestart"} == {"probes", "profiles"}


@pytest.mark.parametrize("provider", ["bwrap", "unshare", "firejail"])
def test_os_layer_keeps_the_state_dir_read_only(project: Project, provider: str) -> None:
    require_provider(provider)
    home, state = _setup(project)
    project.profile(
        "version: 1\nfiles: {expose-rw: [./cache-home]}\n"
        'imports: ["*"]\napi: {allow: [process-exec]}\n'
    )
    script = (
        f"echo ok > {home}/other.txt; "
        f"echo evil > {state}/probes/poison.json && echo WROTE-STATE; "
        f"mv {state} {home}/moved && echo MOVED-STATE; true"
    )
    code = f"import subprocess; subprocess.run(['/bin/sh', '-c', {script!r}])"
    res = project.run(
        "run", "--provider", provider, "--no-python-guards", "-c", code,
        env={"XDG_CACHE_HOME": str(home)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "WROTE-STATE" not in res.stdout and "MOVED-STATE" not in res.stdout, res.stdout
    assert (home / "other.txt").read_text() == "ok\n"
    assert not (state / "probes" / "poison.json").exists()
    assert state.is_dir()


def test_profile_cache_ignores_entries_others_could_write(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_bytes(b"version: 1\n")
    st = profile.stat()
    directory = tmp_path / "profiles"
    profile_cache.store(str(directory), str(profile), st, b"version: 1\n", ("tree",))
    assert profile_cache.load(str(directory), str(profile), st, b"version: 1\n") == ("tree",)
    os.chmod(directory, 0o777)
    assert profile_cache.load(str(directory), str(profile), st, b"version: 1\n") is None
    os.chmod(directory, 0o700)
    for entry in directory.iterdir():
        os.chmod(entry, entry.stat().st_mode | stat.S_IWOTH)
    assert profile_cache.load(str(directory), str(profile), st, b"version: 1\n") is None


def test_probe_cache_never_returns_another_binary(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    binary = "/bin/true"
    calls: list[int] = []

    def probe() -> ProviderStatus:
        calls.append(1)
        return ProviderStatus.ok(version="1", binary=binary)

    assert probecache.cached_probe("demo", [binary], probe).details["binary"] == binary
    assert probecache.cached_probe("demo", [binary], probe).details["binary"] == binary
    assert len(calls) == 1  # the second answer came from the cache
    entry = tmp_path / "pysb" / "probes" / "demo.txt"
    text = entry.read_text().replace(binary, "/tmp/evil")
    entry.write_text(text)
    assert probecache.cached_probe("demo", [binary], probe).details["binary"] == binary
    assert len(calls) == 2  # the tampered entry was not used
