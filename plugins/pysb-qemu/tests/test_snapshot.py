"""Runs started from a snapshot (pysb_qemu.snapshot) under real QEMU (TCG on this host).

Each test runs with its own cache (XDG_CACHE_HOME): the first run builds the guest assets
and the snapshot, the others restore it. PYSB_QEMU_DEBUG's host stamps say which way a
run started ("snapshot restored", or "snapshot restore failed: ...; booting").
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pysb_qemu.reseed import reseed_program

from pysb_core.policy import Exposure

pytestmark = pytest.mark.slow

RESTORED = "snapshot restored"
FELL_BACK = "snapshot restore failed"


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("PYSB_QEMU_DEBUG", "1")
    monkeypatch.delenv("PYSB_QEMU_SNAPSHOT", raising=False)
    return cache


def snapshot_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("pysb/qemu/*/snapshots/*.bin"))


def program_output(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("out:")]


def test_the_reseed_program_is_refused_without_privilege(tmp_path: Path) -> None:
    """The hand-written ELF runs and reports the kernel's answer: EPERM (exit 255) for a
    user without CAP_SYS_ADMIN in the initial user namespace."""
    prog = tmp_path / "reseed"
    prog.write_bytes(reseed_program())
    prog.chmod(0o755)
    argv = [str(prog)]
    if os.geteuid() == 0:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
        tmp_path.chmod(0o755)
    assert subprocess.run(argv).returncode == 255


def test_a_restored_run_enforces_the_profile(run_vm, own_cache: Path, tmp_path: Path) -> None:
    exposed = tmp_path / "exposed"
    exposed.mkdir()
    (exposed / "allowed.txt").write_text("ALLOWED")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    code = (
        "import os, sys\n"
        # The end marker is deleted before the program starts, as after a boot.
        "left = ('/pysb/marker', '/run/pysb.cpio')\n"
        "print('out: left', [p for p in left if os.path.exists(p)])\n"
        f"print('out:', open({str(exposed / 'allowed.txt')!r}).read())\n"
        "try:\n"
        f"    print('out:', open({str(secret)!r}).read())\n"
        "except OSError as e:\n"
        "    print('out: refused', e.errno)\n"
        "try:\n"
        f"    open({str(exposed / 'allowed.txt')!r}, 'w').write('changed')\n"
        "except OSError as e:\n"
        "    print('out: read-only', e.errno)\n"
        "sys.exit(7)\n"
    )
    exposures = [Exposure(str(exposed), str(exposed), False)]
    first = run_vm(code, exposures=exposures)  # builds the snapshot, then restores it
    again = run_vm(code, exposures=exposures)
    for r in (first, again):
        assert RESTORED in r.stderr, r.stderr[-3000:]
        assert r.returncode == 7, r.stderr[-3000:]
        assert program_output(r.stdout) == [
            "out: left []",
            "out: ALLOWED",
            "out: refused 2",
            "out: read-only 30",
        ]
    assert (exposed / "allowed.txt").read_text() == "ALLOWED"
    assert len(snapshot_files(own_cache)) == 1


def test_two_restored_runs_draw_different_randomness(run_vm, own_cache: Path) -> None:
    code = (
        "import os, random, time\n"
        "print('out:', os.urandom(16).hex(), random.getrandbits(64), hash('pysb'), time.time())\n"
    )
    runs = [run_vm(code) for _ in range(3)]
    values = []
    for r in runs:
        assert RESTORED in r.stderr, r.stderr[-3000:]
        assert r.returncode == 0, r.stderr[-3000:]
        (line,) = program_output(r.stdout)
        _, urandom, bits, hashed, clock = line.split()
        # The guest's clock is set on restore, not left at the time the snapshot was taken.
        assert abs(float(clock) - time.time()) < 30
        values.append((urandom, bits, hashed))
    for i in range(3):  # os.urandom, random's seed and the str hash seed: all per run
        assert len({v[i] for v in values[1:]}) == 2, values
        assert len({v[i] for v in values}) == 3, values


def test_a_restored_guest_sees_this_runs_shares(run_vm, own_cache: Path, tmp_path: Path) -> None:
    """The snapshot names no host path: the same guest path shows run A's directory, then
    run B's; writable in one run, read-only (on the host: readonly=on) in the next."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "id.txt").write_text(d.name)
    target = "/data"
    code = (
        f"print('out:', open('{target}/id.txt').read())\n"
        "try:\n"
        f"    open('{target}/made.txt', 'w').write('x')\n"
        "    print('out: written')\n"
        "except OSError as e:\n"
        "    print('out: refused', e.errno)\n"
    )
    ra = run_vm(code, exposures=[Exposure(str(a), target, True)])
    rb = run_vm(code, exposures=[Exposure(str(b), target, False)])
    ra2 = run_vm(code, exposures=[Exposure(str(a), target, False)])
    for r in (ra, rb, ra2):
        assert RESTORED in r.stderr, r.stderr[-3000:]
    assert program_output(ra.stdout) == ["out: a", "out: written"]
    assert program_output(rb.stdout) == ["out: b", "out: refused 30"]
    assert program_output(ra2.stdout) == ["out: a", "out: refused 30"]
    assert (a / "made.txt").exists()
    assert not (b / "made.txt").exists()


def test_a_corrupted_snapshot_is_discarded_and_the_run_boots(run_vm, own_cache: Path) -> None:
    code = "print('out: ran')"
    assert RESTORED in run_vm(code).stderr
    (snap,) = snapshot_files(own_cache)
    data = bytearray(snap.read_bytes())
    data[len(data) // 2] ^= 1  # one bit of guest RAM: QEMU alone would not notice
    snap.chmod(0o600)
    snap.write_bytes(bytes(data))
    r = run_vm(code)
    assert f"{FELL_BACK}: the file is not the one pysb wrote" in r.stderr, r.stderr[-3000:]
    assert "; booting" in r.stderr and RESTORED not in r.stderr
    assert r.returncode == 0 and program_output(r.stdout) == ["out: ran"]
    assert not snap.exists()  # discarded: the next run writes a new one
    r = run_vm(code)
    assert RESTORED in r.stderr and program_output(r.stdout) == ["out: ran"]


def test_a_foreign_snapshot_is_rejected_by_qemu_and_the_run_boots(run_vm, own_cache: Path) -> None:
    """A file whose recorded digest matches but which is not this VM's state (written by
    someone else with the digest file beside it): QEMU refuses it; the run boots."""
    code = "print('out: ran')"
    assert RESTORED in run_vm(code).stderr
    (snap,) = snapshot_files(own_cache)
    foreign = os.urandom(1 << 20)
    snap.chmod(0o600)
    snap.write_bytes(foreign)
    digest = hashlib.sha256(foreign).hexdigest()
    snap.with_suffix(".sha256").write_text(f"{digest} {len(foreign)}\n")
    r = run_vm(code)
    assert FELL_BACK in r.stderr and "Not a migration stream" in r.stderr, r.stderr[-3000:]
    assert RESTORED not in r.stderr
    assert r.returncode == 0 and program_output(r.stdout) == ["out: ran"]


def test_a_snapshot_others_could_write_is_not_used(run_vm, own_cache: Path) -> None:
    code = "print('out: ran')"
    assert RESTORED in run_vm(code).stderr
    (snap,) = snapshot_files(own_cache)
    before = snap.stat().st_ino
    snap.chmod(0o620)  # group-writable: never trusted, a new one is written
    r = run_vm(code)
    assert RESTORED in r.stderr and "built" in r.stderr, r.stderr[-3000:]
    (snap,) = snapshot_files(own_cache)
    assert snap.stat().st_ino != before and not snap.stat().st_mode & 0o022


def test_a_run_with_network_rules_boots(run_vm, own_cache: Path) -> None:
    from pysb_core.policy import NetworkRule, PortRange

    rule = NetworkRule(
        "allow", ("tcp",), "127.0.0.1", (PortRange(9, 9),), "out", text="allow tcp 127.0.0.1 9 out"
    )
    r = run_vm("print('out: ran')", network=(rule,))
    assert r.returncode == 0, r.stderr[-3000:]
    assert RESTORED not in r.stderr and "qemu spawned" in r.stderr
    assert not snapshot_files(own_cache)


def test_snapshot_off_switch(run_vm, own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSB_QEMU_SNAPSHOT", "0")
    r = run_vm("print('out: ran')")
    assert r.returncode == 0 and RESTORED not in r.stderr
    assert not snapshot_files(own_cache)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
