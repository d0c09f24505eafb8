"""pysb_core.net.netns.enter on the real kernel, as whoever runs the tests (root, or a normal
user in CI's second pass): the owner of a network namespace is found even when the process
has moved on to a nested user namespace (what an unprivileged bwrap does), and a program
started through ``entering()`` gets ``CAP_NET_ADMIN`` there (nsenter gave a normal user
"setgroups failed", and no capability with --preserve-credentials)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysb_core.net.netns.enter import SandboxNamespaces


def _tool(name: str) -> str:
    path = shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


@pytest.fixture
def nested() -> Iterator[int]:
    """A process in a nested user namespace whose network namespace belongs to the outer
    one (``unshare -Urn`` then ``unshare -U``, each exec'ing the next: one PID)."""
    unshare = _tool("unshare")
    proc = subprocess.Popen(
        [unshare, "--user", "--map-root-user", "--net", unshare, "--user", "sleep", "60"]
    )
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"sleep"):
            assert proc.poll() is None and time.monotonic() < deadline, "unshare failed"
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()  # our own child, by PID
        proc.wait()


def _inode(path: str | int) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def test_owner_of_the_network_is_found_and_entered_with_net_admin(nested: int) -> None:
    nft = _tool("nft")
    with SandboxNamespaces(nested) as ns:
        assert ns.user_fd is not None
        assert _inode(ns.user_fd) != _inode(f"/proc/{nested}/ns/user")  # the outer one
        assert not ns.pid_in_owner()
        enter = ns.entering()
        try:
            done = subprocess.run(
                [nft, "-f", "-"],
                input=b"table inet pysb_enter_test { }\n",
                capture_output=True,
                preexec_fn=enter,
                check=False,
            )
        finally:
            enter.parent_done()  # type: ignore[attr-defined]
            ns.read_maps()
        assert done.returncode == 0, done.stderr
        # uid and gid 0 of the owner are whoever runs the tests (unshare -r)
        assert ns.owner_root_is(os.geteuid(), os.getegid()), ns.maps
        enter = ns.entering()
        try:
            listed = subprocess.run(
                [nft, "list", "tables"], capture_output=True, preexec_fn=enter, check=False
            )
        finally:
            enter.parent_done()  # type: ignore[attr-defined]
            ns.read_maps()
        assert b"pysb_enter_test" in listed.stdout, listed.stderr
    # the host's own ruleset never saw it
    if os.geteuid() == 0:
        host = subprocess.run([nft, "list", "tables"], capture_output=True, check=False)
        assert b"pysb_enter_test" not in host.stdout


def test_holder_sits_in_the_owner_and_the_network(nested: int) -> None:
    with SandboxNamespaces(nested) as ns:
        with ns.holder() as pid:
            assert _inode(f"/proc/{pid}/ns/user") == _inode(ns.user_fd)
            assert _inode(f"/proc/{pid}/ns/net") == _inode(f"/proc/{nested}/ns/net")
        assert not os.path.exists(f"/proc/{pid}/ns") or _is_zombie_or_gone(pid)


def _is_zombie_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
