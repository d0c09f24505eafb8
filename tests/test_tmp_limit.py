"""The private temporary directory and /dev/shm are bounded (SPEC §4 "temporary files").

Issue 26 item 6: under bwrap, unshare and firejail the private /tmp was a tmpfs without a
size (3 GiB written with ``limits: {memory: 256M}``), and under subprocess and landlock
TMPDIR filled the host's disk. ``limits: tmp`` (default 512M, or ``memory`` when smaller)
bounds it: a tmpfs of that size where the provider has a mount namespace (``ENOSPC``
past it), pysb's parent watching the host directory elsewhere (the run ends, status 153).

Issue 28 item 8: one profile using multiprocessing (a Pool, a Semaphore) runs on every
provider: ``expose-rw: [/dev/shm]`` is the host's shared directory under landlock and
subprocess, and each provider's own private, bounded /dev/shm under the others (bwrap and
firejail refused to start with it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from pysb_core.errors import ProfileError
from pysb_core.policy import DEFAULT_TMP, Limits
from pysb_core.profile import load_policy
from pysb_core.testing import EVERY_PROVIDER, Project, require_provider

PROVIDERS = EVERY_PROVIDER
#: Providers whose private /tmp and /dev/shm are tmpfs mounts pysb sizes (the others:
#: a host directory, or firejail's unsized tmpfs, watched by pysb's parent).
TMPFS = {"bwrap", "unshare", "qemu"}

#: Writes 1 MiB every 20 ms (a pace the parent's watch sees) into WHERE, up to 40 MiB.
WRITES = """
import errno, os, sys, time
where = sys.argv[1] if len(sys.argv) > 1 else os.environ["TMPDIR"]
n = 0
try:
    with open(os.path.join(where, "big"), "wb") as f:
        for _ in range(40):
            f.write(b"x" * (1 << 20))
            f.flush()
            n += 1
            time.sleep(0.02)
    print("wrote", n, flush=True)
except OSError as exc:
    print("refused", errno.errorcode.get(exc.errno), "after", n, flush=True)
"""


def _run(project: Project, provider: str, *args: str):  # type: ignore[no-untyped-def]
    profile = (
        "version: 1\nimports: [errno, os, sys, time]\nlimits: {tmp: 8M}\n"
        "files:\n  expose-rw: [/dev/shm]\n"
    )
    return _run_program(project, provider, profile, WRITES, *args)


def _run_program(project: Project, provider: str, profile: str, program: str, *args: str):  # type: ignore[no-untyped-def]
    if provider != "subprocess":
        require_provider(provider)
    project.profile(profile)
    project.file("prog.py", program)
    return project.run("run", "--provider", provider, "prog.py", *args, timeout=300)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_writing_past_the_tmp_limit_fails(project: Project, provider: str) -> None:
    r = _run(project, provider)
    _bounded(r, provider)


def _bounded(r: subprocess.CompletedProcess[str], provider: str) -> None:
    if provider in TMPFS:  # the kernel: ENOSPC at the tmpfs's size
        assert r.returncode == 0, r.stderr
        assert "refused ENOSPC after" in r.stdout, r.stdout + r.stderr
        assert int(r.stdout.split("after")[1]) <= 8, r.stdout
    else:  # pysb's parent watching: the run ends
        assert r.returncode == 153, r.stdout + r.stderr
        assert "tmp limit of 8M reached (.pysb.yaml:3)" in r.stderr, r.stderr
        assert "wrote" not in r.stdout, r.stdout


@pytest.mark.parametrize("provider", PROVIDERS[2:])
def test_writing_past_the_tmp_limit_in_dev_shm_fails(project: Project, provider: str) -> None:
    """The providers with a private /dev/shm bound it as /tmp (landlock and subprocess
    have none: the rule grants the host's)."""
    r = _run(project, provider, "/dev/shm")
    _bounded(r, provider)


MULTIPROCESSING = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    sem = mp.Semaphore(2)
    with sem:
        with mp.Pool(2) as pool:
            print("pool", sum(pool.map(square, range(10))), flush=True)
"""


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_multiprocessing_profile_runs_on_every_provider(provider: str) -> None:
    """(In the home directory: with ``expose-ro: [/]`` unshare hides a project below the
    host's /tmp under its private one.)"""
    root = Path(tempfile.mkdtemp(prefix=".pysb-mp-", dir=Path.home()))
    try:
        _multiprocessing(Project(root), provider)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _multiprocessing(project: Project, provider: str) -> None:
    profile = (
        "version: 1\nimports: '*'\napi:\n  allow: ['*']\n"
        "files:\n  expose-ro: [/]\n  expose-rw: [/dev/shm]\n"
    )
    r = _run_program(project, provider, profile, MULTIPROCESSING)
    assert r.returncode == 0, r.stderr
    assert "pool 285" in r.stdout, r.stdout + r.stderr


def test_the_default_tmp_limit_and_its_memory_cap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert Limits().tmp_bytes() == DEFAULT_TMP == 512 << 20
    assert Limits(memory=64 << 20).tmp_bytes() == 64 << 20
    assert Limits(memory=4 << 30).tmp_bytes() == DEFAULT_TMP
    assert Limits(tmp=1 << 30).tmp_bytes() == 1 << 30
    profile = tmp_path / "p.yaml"
    profile.write_text("version: 1\nlimits: {tmp: 32M}\n")
    policy = load_policy(str(profile), cwd=str(tmp_path), environ=dict(os.environ))
    assert policy.limits.tmp_bytes() == 32 << 20
    profile.write_text("version: 1\nlimits: {memory: 64M, tmp: 1G}\n")
    with pytest.raises(ProfileError, match=r"limits\.tmp is larger than limits\.memory"):
        load_policy(str(profile), cwd=str(tmp_path), environ=dict(os.environ))


def test_the_watch_inside_follows_no_link_and_fails_closed_when_too_deep(tmp_path: Path) -> None:
    """The walk through the sandbox's descriptors never leaves its tree, and a tree too
    deep to measure ends the run instead of hiding what lies below."""
    from pysb_core.launch import tmpwatch

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * (4 << 20))
    inside = tmp_path / "inside"
    inside.mkdir()
    (inside / "small").write_bytes(b"y" * 8192)
    (inside / "to-outside").symlink_to(outside)
    fd = os.open(inside, os.O_RDONLY | os.O_DIRECTORY)
    try:
        used = tmpwatch.usage_fd(fd)
        assert 8192 <= used < (1 << 20)
        deep = inside
        for _ in range(tmpwatch.MAX_DEPTH + 1):
            deep = deep / "d"
            os.mkdir(deep)
        with pytest.raises(tmpwatch.TooDeep):
            tmpwatch.usage_fd(fd)
    finally:
        os.close(fd)


def test_a_watch_that_receives_no_directories_ends_the_run() -> None:
    """The sandbox's end of the channel closed without descriptors (the bootstrap never
    sent them): the watch reports the limit exceeded, with a reason, instead of watching
    nothing."""
    import socket

    from pysb_core.launch.tmpwatch import TmpWatch

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    watch = TmpWatch([], 8 << 20, "test", inside=["/tmp"], channel=ours.detach())
    assert watch.exceeded() is False  # nothing sent yet: the program has not started
    theirs.close()
    watch._next = 0.0
    assert watch.exceeded() is True
    assert "did not hand its private temporary directories" in watch.message()
    watch.close()


@pytest.mark.parametrize(
    "sent",
    [["dir"], ["file"], ["pipe"], ["dir", "file"], ["dir", "dir"], ["dir"] * 9],
    ids=lambda kinds: "+".join(kinds),
)
def test_the_watch_keeps_only_the_directories_it_expects(sent: list[str], tmp_path: Path) -> None:
    """What comes over the channel is treated as hostile: descriptors of other kinds are
    closed unused, at most eight are taken (the kernel drops the rest of a longer list),
    and any count of directories but the one expected fails the run with the reason."""
    import socket

    from pysb_core.launch.tmpwatch import TmpWatch

    (tmp_path / "f").write_text("x")
    made: list[int] = []
    for kind in sent:
        if kind == "dir":
            made.append(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY))
        elif kind == "file":
            made.append(os.open(tmp_path / "f", os.O_RDONLY))
        else:
            r, w = os.pipe()
            os.close(w)
            made.append(r)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    watch = TmpWatch([], 8 << 20, "test", inside=["/tmp"], channel=ours.detach())
    try:
        socket.send_fds(theirs, [b"d"], made)
        watch._next = 0.0
        exceeded = watch.exceeded()
        kept = list(watch._inside_fds)
        assert all(os.path.samestat(os.fstat(fd), os.stat(tmp_path)) for fd in kept)
        assert len(kept) == min(sent.count("dir"), 8)
        if sent.count("dir") == 1:
            assert exceeded is False and watch.failure is None
        else:
            assert exceeded is True
            assert "did not hand its private temporary directories" in watch.message()
    finally:
        watch.close()
        theirs.close()
        for fd in made:
            os.close(fd)
