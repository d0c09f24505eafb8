"""Builders and parsers of the qemu provider, checked against real tools where one exists
(busybox cpio lists our archives, nft checks our rulesets), without booting a VM."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from pysb_qemu import QemuProvider, assets, guest, netfilter, vm
from pysb_qemu.cpio import CpioWriter
from pysb_qemu.supervisor import _marker_prefix_len

from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, NetworkRule, Policy, PortRange


def test_cpio_archive_is_read_by_busybox(tmp_path: Path) -> None:
    w = CpioWriter()
    w.add_dir("etc")
    w.add_file("etc/hosts", b"127.0.0.1 localhost\n", 0o644)
    w.add_symlink("bin", "usr/bin")
    archive = tmp_path / "a.cpio"
    archive.write_bytes(w.finish())
    assert archive.stat().st_size % 512 == 0
    out = subprocess.run(
        ["busybox", "cpio", "-i", "-d", "-F", str(archive)],
        cwd=tmp_path,
        capture_output=True,
        check=True,
    )
    assert out.returncode == 0
    assert (tmp_path / "etc/hosts").read_bytes() == b"127.0.0.1 localhost\n"
    assert os.readlink(tmp_path / "bin") == "usr/bin"


def test_cache_key_follows_kernel_busybox_and_template() -> None:
    kernel = assets.find_kernel()
    busybox = assets.find_busybox()
    template = assets.init_template()
    key = assets.cache_key(kernel, busybox, template)
    assert key == assets.cache_key(kernel, busybox, template)
    assert key != assets.cache_key(kernel, busybox, template + "# changed\n")
    other = assets.Kernel(kernel.version + "-x", kernel.image, kernel.modules)
    assert key != assets.cache_key(other, busybox, template)


def test_cached_vmlinux_is_a_pvh_elf() -> None:
    cached = assets.ensure_assets(progress=False)
    head = cached.vmlinux.read_bytes()
    assert head[:4] == b"\x7fELF"
    assert assets.has_pvh_note(head)
    assert not assets.has_pvh_note(Path("/bin/true").read_bytes())


def test_extract_vmlinux_refuses_an_image_without_xz() -> None:
    with pytest.raises(Exception, match="not xz-compressed"):
        assets.extract_vmlinux(b"\0" * 4096)


def test_module_order_puts_dependencies_first() -> None:
    kernel = assets.find_kernel()
    order = [name for name, _ in assets.module_order(kernel.modules, ("9p",))]
    assert order[-1] == "9p"
    assert order.index("9pnet") < order.index("9p")
    assert order.index("netfs") < order.index("fscache") < order.index("9p")


def test_missing_module_names_the_apt_fix(tmp_path: Path) -> None:
    (tmp_path / "modules.dep").write_text("kernel/a.ko:\n")
    with pytest.raises(Exception) as info:
        assets.module_order(tmp_path, ("nosuch",))
    assert "apt-get install qemu-system-x86 linux-image-amd64 busybox-static" in str(info.value)


def test_find_kernel_without_kernels_is_unavailable(tmp_path: Path) -> None:
    from pysb_core.errors import ProviderUnavailableError

    with pytest.raises(ProviderUnavailableError) as info:
        assets.find_kernel(tmp_path, tmp_path)
    assert info.value.fix == assets.APT_FIX


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"memory": "512M", "accel": "tcg", "cpus": 2}, None),
        ({"memory": "lots"}, "memory"),
        ({"memory": "64M"}, "at least"),
        ({"accel": "hvf"}, "accel"),
        ({"cpus": 0}, "cpus"),
        ({"cpus": True}, "cpus"),
        ({"disk": "1G"}, "unknown option 'disk'"),
    ],
)
def test_validate_options(options: dict, problem: str | None) -> None:
    problems = QemuProvider.validate_options(options)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]


def test_parse_size() -> None:
    assert vm.parse_size_mib("2G") == 2048
    assert vm.parse_size_mib("512M") == 512
    assert vm.parse_size_mib(256 << 20) == 256
    with pytest.raises(ValueError):
        vm.parse_size_mib("12 parsecs")


def test_accel_choice_never_trusts_a_bare_dev_kvm() -> None:
    usable, why = vm.kvm_status()
    accel = vm.choose_accel("auto")
    assert accel.name == ("kvm" if usable else "tcg")
    assert why in accel.reason
    assert vm.choose_accel("tcg").name == "tcg"


def _rule(text: str) -> NetworkRule:
    action, proto, net, ports, direction = text.split()
    protos = ("tcp", "udp") if proto == "any" else tuple(proto.split(","))
    ranges = []
    for p in ports.split(","):
        if p == "*":
            ranges.append(PortRange(0, 65535))
        else:
            low, _, high = p.partition("-")
            ranges.append(PortRange(int(low), int(high or low)))
    return NetworkRule(action, protos, net, tuple(ranges), direction, text=text)  # type: ignore[arg-type]


def test_guest_ruleset_comes_from_the_core_compiler_and_is_valid_nft() -> None:
    """The guest's filter is the unshare/bwrap filter for QEMU's slirp (eth0, 10.0.2.15):
    denies first, the guest's own loopback open after them, slirp's addresses refused but
    through loopback rules, the host's 127.0.0.1:P NATed to 10.0.2.2, ``in`` ports forwarded
    from the host's loopback and NATed to the guest's."""
    policy = Policy(
        network=(
            _rule("allow tcp 0.0.0.0/0 80,443 out"),
            _rule("deny any 192.0.2.0/24 * out"),
            _rule("allow udp 2001:db8::/32 53 out"),
            _rule("allow tcp api.example.com 443 out"),
            _rule("allow tcp 127.0.0.1 8000 in"),
            _rule("allow tcp 127.0.0.1 9000 out"),
        ),
        pins={"api.example.com": ("198.51.100.7",)},
    )
    compiled = netfilter.compile_guest_filter(policy)
    text = compiled.ruleset
    body = [line.strip().split(" comment ")[0] for line in text.splitlines()]
    deny_at = body.index("ip daddr { 192.0.2.0/24 } reject")
    loopback_at = body.index('oifname "lo" accept')
    allow_at = body.index("ip daddr { 0.0.0.0/0 } tcp dport { 80, 443 } accept")
    assert body.index("ip daddr 10.0.2.0/24 reject") < deny_at < loopback_at < allow_at
    assert "ip daddr { 198.51.100.7/32 } tcp dport { 443 } accept" in body
    assert "ip daddr 127.0.0.1 tcp dport { 9000 } dnat ip to 10.0.2.2" in body
    assert 'iifname "eth0" tcp dport 8000 dnat ip to 127.0.0.1' in body
    assert 'oifname "eth0" ip saddr 127.0.0.0/8 masquerade' in body
    assert [(f.proto, f.port) for f in compiled.inbound] == [("tcp", 8000)]
    assert compiled.nat
    if shutil.which("nft") is None or os.geteuid() != 0:
        pytest.skip("nft --check needs nft and root")
    check = subprocess.run(
        ["nft", "--check", "-f", "-"], input=text, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


def test_fd_direction_follows_the_fd() -> None:
    r, w = os.pipe()
    a, b = socket.socketpair()
    try:
        assert vm.fd_direction(r) == "in"
        assert vm.fd_direction(w) == "out"
        assert vm.fd_direction(a.fileno()) == "both"
    finally:
        os.close(r)
        os.close(w)
        a.close()
        b.close()


def test_marker_hold_back_is_minimal() -> None:
    marker = b"<<pysb-eof-abc>>"
    assert _marker_prefix_len(b"PING\n", marker) == 0
    assert _marker_prefix_len(b"data<<pys", marker) == 5
    assert _marker_prefix_len(b"<", marker) == 1


def _plan(tmp_path: Path, **kw) -> LaunchPlan:
    import sys

    py = sys.executable
    return LaunchPlan(
        policy=Policy(provider="qemu"),
        python=py,
        argv=[py, "-c", "pass"],
        env=kw.pop("env", {"A": "1"}),
        cwd=str(tmp_path),
        **kw,
    )


def test_layout_shares_read_only_unless_rw_and_masks(tmp_path: Path) -> None:
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    (ro / "sub").mkdir(parents=True)
    rw.mkdir()
    (ro / ".env").write_text("x")
    plan = _plan(
        tmp_path,
        exposures=[
            Exposure(str(ro), str(ro), False),
            Exposure(str(ro / "sub"), str(ro / "sub"), False),
            Exposure(str(rw), "/data", True),
        ],
        hidden=[str(ro / ".env")],
    )
    layout = guest.plan_layout(plan)
    by_guest = {s.guest: s for s in layout.shares}
    assert by_guest["/usr"].writable is False
    assert by_guest[str(ro)].writable is False and by_guest[str(ro)].cache == "loose"
    assert str(ro / "sub") not in by_guest  # covered by its read-only parent
    assert by_guest["/data"].host == str(rw) and by_guest["/data"].writable
    assert ("file", str(ro / ".env")) in layout.hide
    assert "/etc" not in by_guest  # never the host's /etc


def test_run_script_sets_exact_env_and_drops_capabilities(tmp_path: Path) -> None:
    plan = _plan(tmp_path, env={"ONLY": "it's"})
    ports = [guest.Port("fd0", 0, "in", 0), guest.Port("fd1", 1, "out", 1)]
    script = guest.run_script(plan, ports, [5])
    # stdout via /init's relay; the start FIFO's write end for pysb_qemu.started
    assert "0<&200 1>/run/out1 5</pysb/fd/5 199>/run/started 2>/dev/null" in script
    joined = guest.run_script(plan, ports, [5], stderr_joins_stdout=True)
    assert "1>/run/out1 5</pysb/fd/5 199>/run/started 2>&1 200>&-" in joined  # one terminal
    assert "/bb/env -i 'ONLY=it'\"'\"'s'" in script
    assert "--bounding-set" in script and "sys_admin" not in script
    assert "--no-new-privs" in script


def test_too_many_shares_fail_closed() -> None:
    cached = assets.ensure_assets(progress=False)
    shares = [guest.Share(f"p{i}", f"/x{i}", f"/x{i}", False) for i in range(25)]
    spec = vm.VmSpec(cached, vm.Accel("tcg", "test"), shares=shares)
    with pytest.raises(Exception, match="separate directories"):
        spec.check_devices()


def test_prune_cache_keeps_the_newest(tmp_path: Path) -> None:
    for i in range(5):
        d = tmp_path / f"key{i}"
        d.mkdir()
        (d / "meta.json").write_text("{}")
        os.utime(d / "meta.json", ns=(i * 10**9, i * 10**9))
    (tmp_path / ".key9.tmp").mkdir()  # a build in progress is never touched
    removed = assets.prune_cache(tmp_path, keep=3)
    assert sorted(p.name for p in removed) == ["key0", "key1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".key9.tmp", "key2", "key3", "key4"]


def test_a_kernel_without_pvh_is_booted_compressed(tmp_path: Path, monkeypatch) -> None:
    """Not xz (Ubuntu's zstd) or no PVH note: the cache holds the bzImage itself."""
    real = assets.find_kernel()
    image = tmp_path / "vmlinuz-test"
    image.write_bytes(b"MZ not an xz kernel" * 100)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(
        assets, "find_kernel", lambda: assets.Kernel("9.9-test", image, real.modules)
    )
    built = assets.ensure_assets(progress=False)
    assert not built.pvh
    assert built.vmlinux.name == "bzImage"
    assert built.vmlinux.read_bytes() == image.read_bytes()
    assert assets.ensure_assets(progress=False) == built  # found in the cache the second time


def _extract(archive: bytes, out: Path) -> Path:
    """Unpack a run archive into ``out`` with busybox cpio, as the guest's kernel would.

    As a normal user, extract as uid 0 of a user namespace: the archive holds a 0500
    directory (pysb/fd) with files in it, which only root's DAC override can fill."""
    out.mkdir()
    as_root = [] if os.getuid() == 0 else ["unshare", "--user", "--map-root-user"]
    subprocess.run(
        [*as_root, "busybox", "cpio", "-i", "-d"],
        input=archive,
        cwd=out,
        check=True,
        capture_output=True,
    )
    return out


def test_run_archive_carries_pins_env_and_no_host_etc(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("192.0.2.10\tapi.example.com\n")
    plan = _plan(tmp_path, env={"K": "v"})
    plan.hosts_file = str(hosts)
    layout = guest.plan_layout(plan)
    ports = [guest.Port("ctl", None, "ctl", None), guest.Port("fd1", 1, "out", 1)]
    archive = guest.build_run_archive(plan, layout, ports, {5: b"payload"}, "<<m>>", None)
    out = _extract(archive, tmp_path / "x")
    assert (out / "etc/hosts").read_text() == "192.0.2.10\tapi.example.com\n"
    assert "root:x:0:0" in (out / "etc/passwd").read_text()
    assert not (out / "etc/shadow").exists()
    assert (out / "pysb/fd/5").read_bytes() == b"payload"
    assert (out / "pysb/ports").read_text() == "fd1 1 out\n"
    assert "/bb/env -i K=v" in (out / "pysb/run").read_text()
    assert not (out / "pysb/net").exists()


def test_probe_names_the_apt_packages_when_qemu_is_missing(monkeypatch) -> None:
    monkeypatch.setattr(assets.shutil, "which", lambda name: None)
    status = QemuProvider().probe()
    assert not status.available
    assert "qemu-system-x86_64" in (status.reason or "")
    assert status.fix == "apt-get install qemu-system-x86 linux-image-amd64 busybox-static"


def test_describe_lists_accelerator_shares_and_network(tmp_path: Path) -> None:
    plan = _plan(tmp_path, exposures=[Exposure(str(tmp_path), "/work", True)])
    lines = QemuProvider().describe(plan)
    text = "\n".join(lines)
    assert "accelerator" in text and ("TCG" in text or "KVM" in text)
    assert f"qemu: share rw /work (from {tmp_path})" in text
    assert "no network device" in text
    if "accelerator TCG" in text:  # which way the VM starts, and why not from a snapshot
        assert "qemu: start: restored from a snapshot" in text


def test_describe_says_why_a_run_boots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSB_QEMU_SNAPSHOT", "0")
    lines = QemuProvider().describe(_plan(tmp_path))
    assert "qemu: start: boot (PYSB_QEMU_SNAPSHOT=0)" in lines


def test_small_read_only_trees_are_copied_when_shares_would_not_fit(tmp_path: Path) -> None:
    roots = []
    for i in range(30):
        d = tmp_path / f"root{i:02}"
        (d / "pkg").mkdir(parents=True)
        (d / "pkg" / "__init__.py").write_text(f"N = {i}\n")
        (d / "link").symlink_to("pkg")
        roots.append(d)
    (roots[0] / "pkg" / ".env").write_text("secret")
    big = tmp_path / "big"
    big.mkdir()
    (big / "blob").write_bytes(b"x" * (guest.MAX_TREE_SNAPSHOT_BYTES + 1))
    rw = tmp_path / "rw"
    rw.mkdir()
    exposures = [Exposure(str(d), str(d), False, "<python>", True) for d in roots]
    exposures += [Exposure(str(big), str(big), False), Exposure(str(rw), str(rw), True)]
    plan = _plan(tmp_path, exposures=exposures, hidden=[str(roots[0] / "pkg" / ".env")])
    layout = guest.plan_layout(plan, vm.max_shares(False))
    shared = {s.host for s in layout.shares}
    assert len(layout.shares) == vm.max_shares(False)
    assert str(big) in shared and str(rw) in shared  # too large / writable: never copied
    copied = [d for d in roots if str(d) not in shared]
    assert copied and all(str(d) in layout.dirs for d in copied)
    for d in copied:
        data, mode = layout.files[str(d / "pkg" / "__init__.py")]
        assert data == (d / "pkg" / "__init__.py").read_bytes() and mode == 0o444
        assert layout.symlinks[str(d / "link")] == "pkg"
    assert str(roots[0] / "pkg" / ".env") not in layout.files  # hidden paths are not copied
    archive = guest.build_run_archive(
        plan, layout, [guest.Port("ctl", None, "ctl", None)], {}, "m", None
    )
    out = _extract(archive, tmp_path / "x")
    inside = out / str(copied[-1] / "pkg" / "__init__.py").lstrip("/")
    assert inside.read_bytes() == (copied[-1] / "pkg" / "__init__.py").read_bytes()


def test_shares_that_cannot_be_copied_still_fail_closed(tmp_path: Path) -> None:
    exposures = []
    for i in range(25):
        d = tmp_path / f"rw{i}"
        d.mkdir()
        exposures.append(Exposure(str(d), str(d), True))
    layout = guest.plan_layout(_plan(tmp_path, exposures=exposures), vm.max_shares(False))
    spec = vm.VmSpec(
        assets.ensure_assets(progress=False), vm.Accel("tcg", "test"), shares=layout.shares
    )
    with pytest.raises(Exception, match="separate directories"):
        spec.check_devices()


def test_qemu_version_is_asked_once_per_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``qemu --version`` runs once for a binary, again when the binary changes, and on
    every start while it names no version (a failure is not remembered)."""
    from pysb_qemu.provider import qemu_version

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = tmp_path / "calls"
    qemu = tmp_path / "qemu-system-x86_64"
    script = '#!/bin/sh\necho run >> "{calls}"\necho "QEMU emulator version {v} (Debian)"\n'
    qemu.write_text(script.format(calls=calls, v="7.2.9"))
    qemu.chmod(0o755)
    assert qemu_version(str(qemu)) == "7.2.9"
    assert qemu_version(str(qemu)) == "7.2.9"
    assert calls.read_text().count("run") == 1
    qemu.write_text(script.format(calls=calls, v="8.0.10"))
    os.utime(qemu, ns=(1, 1))
    assert qemu_version(str(qemu)) == "8.0.10"
    assert calls.read_text().count("run") == 2
    qemu.write_text(f'#!/bin/sh\necho run >> "{calls}"\n')
    assert qemu_version(str(qemu)) is None
    assert qemu_version(str(qemu)) is None
    assert calls.read_text().count("run") == 4


def test_snapshot_key_names_what_shapes_the_guest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RAM, vCPUs, the assets and the QEMU binary change the key; the host's momentary
    "cpu MHz" (a boot parameter the restored guest no longer reads) does not."""
    from pysb_qemu import snapshot

    fake_qemu = tmp_path / "qemu"
    fake_qemu.write_bytes(b"x")

    def spec(memory: int = 512, cpus: int = 1, key: str = "k1") -> vm.VmSpec:
        a = assets.GuestAssets(key, tmp_path, tmp_path / "vmlinux", tmp_path / "initrd", "6.1")
        return vm.VmSpec(a, vm.Accel("tcg", "test"), memory_mib=memory, cpus=cpus)

    monkeypatch.setattr(vm, "host_tsc_khz", lambda: 2_600_000)
    base = snapshot.key(spec(), str(fake_qemu), "7.2.22")
    monkeypatch.setattr(vm, "host_tsc_khz", lambda: 2_599_123)
    assert snapshot.key(spec(), str(fake_qemu), "7.2.22") == base
    assert snapshot.key(spec(memory=256), str(fake_qemu), "7.2.22") != base
    assert snapshot.key(spec(cpus=2), str(fake_qemu), "7.2.22") != base
    assert snapshot.key(spec(key="k2"), str(fake_qemu), "7.2.22") != base
    assert snapshot.key(spec(), str(fake_qemu), "8.0.0") != base
    fake_qemu.write_bytes(b"xy")  # another binary at the same path
    assert snapshot.key(spec(), str(fake_qemu), "7.2.22") != base


def test_a_restore_answer_is_read_within_a_bound() -> None:
    """The restored guest's answer line is bounded (pysb_qemu.restoring.MAX_LINE): a line
    that never ends is no answer, and the restore fails instead of growing the buffer."""
    import contextlib
    import socket
    import threading

    from pysb_qemu import restoring

    host, guest = socket.socketpair()
    try:
        guest.sendall(b"restored\nrest")
        assert restoring.read_line(host) == ("restored", b"rest")

        def endless() -> None:
            with contextlib.suppress(OSError):  # the reader gave up and closed its end
                guest.sendall(b"x" * (restoring.MAX_LINE * 4))

        sender = threading.Thread(target=endless)
        sender.start()
        assert restoring.read_line(host) == ("", b"")
        host.close()
        sender.join()
    finally:
        host.close()
        guest.close()
