"""Unit tests of the pure parts: the command builder (for a described host), the options
and the refusal of network allow rules."""

from __future__ import annotations

import pytest
from pysb_firejail import network, options
from pysb_firejail.argv import CHILD_MODULE, build_argv
from pysb_firejail.hostfs import HostLayout
from pysb_firejail.network import bridge_network

from pysb_core.errors import ProviderUnavailableError, SandboxError
from pysb_core.plan import ChildSetup, LaunchPlan
from pysb_core.policy import Exposure, Limits, NetworkRule, Policy, PortRange
from pysb_core.providerkit import compile_iptables

LAYOUT = HostLayout(
    top_level={
        "/usr": "dir",
        "/bin": "link",
        "/etc": "dir",
        "/home": "dir",
        "/opt": "dir",
        "/proc": "dir",
        "/run": "dir",
        "/sys": "dir",
        "/tmp": "dir",
        "/work": "dir",
        "/vmlinuz": "link",
        "/notes.txt": "file",
    },
    etc=frozenset({"/etc/passwd", "/etc/ld.so.cache", "/etc/hosts", "/etc/resolv.conf"}),
    existing=frozenset({"/work/app/.env", "/work/app/.pysb.yaml"}),
)


def exp(path: str, writable: bool = False) -> Exposure:
    return Exposure(path=path, target=path, writable=writable, source="t.yaml:1")


def plan(exposures, *, cwd="/work/app", hidden=(), protected=(), limits=None, network=()):
    policy = Policy(
        exposures=tuple(exposures),
        provider="firejail",
        limits=limits or Limits(),
        network=tuple(network),
        cwd=cwd,
    )
    return LaunchPlan(
        policy=policy,
        python="/usr/bin/python3",
        argv=["/usr/bin/python3", "-c", "pass"],
        env={},
        cwd=cwd,
        exposures=list(exposures),
        hidden=list(hidden),
        protected=list(protected),
        pass_fds=[5, 3],
    )


def test_view_is_reduced_to_the_exposures() -> None:
    p = plan(
        [exp("/work/app", True), exp("/work/app/out", True), exp("/home/u/data")],
        hidden=["/work/app/.env"],
        protected=["/work/app/.pysb.yaml"],
    )
    argv = build_argv(p, LAYOUT).argv
    # no "--": firejail would start the program through bash -c
    assert argv[-4:] == ["--private-cwd=/work/app", "/usr/bin/python3", "-c", "pass"]
    assert "--" not in argv
    for opt in (
        "--noprofile",
        "--caps.drop=all",
        "--nonewprivs",
        "--seccomp",
        "--net=none",
        "--private-dev",
        "--private-tmp",
        "--keep-fd=3,5",
        "--private-cwd=/work/app",
    ):
        assert opt in argv
    # tops without exposures, top-level files and /sys are blacklisted; links and the
    # system are left alone.
    assert {"--blacklist=/opt", "--blacklist=/sys", "--blacklist=/notes.txt"} <= set(argv)
    for kept in ("/usr", "/bin", "/vmlinuz"):
        assert f"--blacklist={kept}" not in argv
    # tops with exposures are whitelisted down to them; /etc to what CPython needs
    for wl in ("/work/app", "/home/u/data", "/etc/passwd"):
        assert f"--whitelist={wl}" in argv
    assert "--whitelist=/work/app/out" not in argv  # visible through /work/app
    assert "--whitelist=/etc/resolv.conf" not in argv  # no network
    assert "--whitelist=/run/firejail" in argv
    # read-only everywhere, read-write only where the profile says, profile file ro again,
    # the ignored file blacklisted; then the unexposed tops, and the root mount read-only
    # last (every read-write exposure lies in a whitelisted tree: none needs it earlier).
    rw = argv.index("--read-write=/work/app")
    assert argv.index("--read-only=/work") < rw
    assert "--read-write=/work/app/out" not in argv  # inherited from /work/app
    assert "--read-only=/home/u/data" not in argv  # inherited from /home
    assert (
        rw
        < argv.index("--read-only=/work/app/.pysb.yaml")
        < argv.index("--blacklist=/work/app/.env")
        < argv.index("--blacklist=/opt")
        < argv.index("--read-only=/")
        == argv.index("--private-cwd=/work/app") - 1
    )


def test_read_only_inside_read_write_stays_read_only() -> None:
    argv = build_argv(plan([exp("/work/app/in"), exp("/work/app", True)]), LAYOUT).argv
    assert argv.index("--read-write=/work/app") < argv.index("--read-only=/work/app/in")


def test_tmp_exposures_and_unexposed_cwd() -> None:
    cmd = build_argv(plan([exp("/tmp/x/data")], cwd="/srv/elsewhere"), LAYOUT)
    assert "--whitelist=/tmp/x/data" in cmd.argv
    assert "--private-tmp" not in cmd.argv
    assert "--read-only=/tmp/x/data" in cmd.argv  # /tmp itself stays writable
    assert "--private-cwd=/" in cmd.argv and cmd.notes
    # an ancestor of a whitelisted path exists inside (firejail creates it)
    cmd = build_argv(plan([exp("/tmp/x/data")], cwd="/tmp/x"), LAYOUT)
    assert "--private-cwd=/tmp/x" in cmd.argv


def test_writable_tmp_and_run_exposures_say_so() -> None:
    """Whitelisted into the private /tmp or /run, a path has its source mount's state:
    read-only when pysb made the root mount read-only first (mountns), so a writable
    exposure there always gets --read-write, a read-only one --read-only."""
    p = plan([exp("/tmp/x/out", True), exp("/tmp/x/in"), exp("/run/user/0/s", True)])
    argv = build_argv(p, LAYOUT).argv
    assert "--read-write=/tmp/x/out" in argv
    assert "--read-only=/tmp/x/in" in argv
    assert "--read-write=/run/user/0/s" in argv
    # below a writable exposure, a writable path inherits: no entry
    argv = build_argv(plan([exp("/tmp/x", True), exp("/tmp/x/y", True)]), LAYOUT).argv
    assert "--read-write=/tmp/x" in argv and "--read-write=/tmp/x/y" not in argv


def test_limits_become_rlimits() -> None:
    limits = Limits(memory=256 * 1024**2, open_files=64, cpu_time=5, processes=10)
    argv = build_argv(plan([], limits=limits), LAYOUT).argv
    assert f"--rlimit-as={256 * 1024**2}" in argv
    assert "--rlimit-nofile=64" in argv
    assert "--rlimit-cpu=6" in argv  # one second of slack: SIGXCPU before SIGKILL
    assert "--rlimit-nproc=10" in argv


def test_namespaces_restricted_by_firejail_unless_the_child_filter_does_it() -> None:
    p = plan([exp("/work/app")])
    assert "--restrict-namespaces" in build_argv(p, LAYOUT).argv  # no child set-up
    p.add_child_setup(ChildSetup(module=CHILD_MODULE, function="setup", args={}))
    assert "--restrict-namespaces" in build_argv(p, LAYOUT).argv  # not asked to
    p.child_setups[0].args["namespaces"] = True
    assert "--restrict-namespaces" not in build_argv(p, LAYOUT).argv
    other = ChildSetup(module="elsewhere", function="setup", args={"namespaces": True})
    assert "--restrict-namespaces" in build_argv(plan([exp("/work/app")]), LAYOUT).argv
    p.child_setups[:] = [other]
    assert "--restrict-namespaces" in build_argv(p, LAYOUT).argv


def test_noroot_only_when_not_root() -> None:
    assert "--noroot" not in build_argv(plan([]), LAYOUT, as_root=True).argv
    assert "--noroot" in build_argv(plan([]), LAYOUT, as_root=False).argv


@pytest.mark.parametrize("bad", ["/work/a,b", "/work/*", "relative", "/proc/1"])
def test_paths_firejail_would_misread_are_refused(bad: str) -> None:
    with pytest.raises(SandboxError):
        build_argv(plan([exp(bad)]), LAYOUT)


def test_relative_program_is_refused() -> None:
    p = plan([])
    p.argv = ["python3", "-c", "pass"]
    with pytest.raises(SandboxError, match="absolute"):
        build_argv(p, LAYOUT)


def test_options() -> None:
    assert options.validate({}) == []
    assert options.validate({"hostname": "box", "bridge": "br0", "share-net": False}) == []
    assert "did you mean 'hostname'" in options.validate({"hostnme": "x"})[0]
    assert options.validate({"share-net": True})
    assert options.validate({"bridge": "a/b"})
    assert options.validate([])  # not a mapping


def test_network_allow_rule_is_refused_with_the_host_setting() -> None:
    rule = NetworkRule("allow", ("tcp",), "127.0.0.1", (PortRange(80, 80),), "out", "p:4")
    p = plan([], network=[rule])
    assert network.needs_network(p.policy)
    err = network.refusal(p.policy, None, as_root=True)
    assert isinstance(err, ProviderUnavailableError)
    assert "bridge" in str(err) and "p:4" in str(err) and "loopback" in str(err)
    err = network.refusal(p.policy, "lo", as_root=True)  # lo exists; the rule is the problem
    assert err is not None and "loopback" in str(err) and "no bridge" not in str(err)
    deny = NetworkRule("deny", ("tcp",), "*", (PortRange(0, 65535),), "any", "p:5")
    assert not network.needs_network(plan([], network=[deny]).policy)


def test_without_a_bridge_network_rules_are_the_namespace_layers(monkeypatch) -> None:
    """No bridge: root gets the shared layer's filtered namespace (network capabilities
    when nft and a user-mode helper are installed), a normal user a refusal with the fix."""
    from pysb_firejail import FirejailProvider, nsnet, provider

    monkeypatch.setattr(nsnet, "layer_usable", lambda: True)
    monkeypatch.setattr(provider, "uid_is_root", lambda: True)
    assert FirejailProvider({}).enforced() >= network.NETWORK_CAPABILITIES
    monkeypatch.setattr(provider, "uid_is_root", lambda: False)
    assert not network.NETWORK_CAPABILITIES & FirejailProvider({}).enforced()
    rule = NetworkRule("allow", ("tcp",), "127.0.0.1", (PortRange(80, 80),), "out", "p:4")
    with pytest.raises(ProviderUnavailableError) as err:
        FirejailProvider({})._namespace_network(plan([], network=[rule]))
    assert "p:4" in str(err.value) and "bwrap or unshare" in (err.value.fix or "")


def test_netfilter_rulesets() -> None:
    """firejail's --netfilter files come from the core compiler for a bridge: denies first,
    the sandbox's own loopback open, ``in`` rules judged by the real local address, IPv6
    neighbour discovery, no user-mode helper addresses and no NAT."""
    rules = [
        NetworkRule("allow", ("tcp",), "api.example.com", (PortRange(443, 443),), "out", "a"),
        NetworkRule("allow", ("tcp", "udp"), "*", (PortRange(53, 53),), "out", "b"),
        NetworkRule("deny", ("tcp",), "10.0.2.0/24", (PortRange(0, 65535),), "any", "c"),
        NetworkRule("allow", ("tcp",), "*", (PortRange(8000, 8100),), "in", "d"),
        NetworkRule("allow", ("tcp",), "::ffff:10.0.2.9", (PortRange(1, 1),), "out", "e"),
        NetworkRule("allow", ("tcp",), "192.0.2.5", (PortRange(80, 80),), "in", "f"),
    ]
    pins = {"api.example.com": ("10.0.2.15", "2001:db8::1")}
    v4_text, v6_text = compile_iptables(rules, pins, bridge_network())
    v4 = [line.split(" -m comment")[0] for line in v4_text.splitlines()]
    assert v4[:4] == ["*filter", ":INPUT DROP [0:0]", ":FORWARD DROP [0:0]", ":OUTPUT DROP [0:0]"]
    deny = v4.index(
        "-A OUTPUT -m conntrack --ctorigdst 10.0.2.0/24 -p tcp -j REJECT --reject-with tcp-reset"
    )
    loopback = v4.index("-A OUTPUT -o lo -j ACCEPT")
    allow = v4.index(
        "-A OUTPUT -m conntrack --ctorigdst 10.0.2.15/32 -p tcp -m multiport --dports 443 -j ACCEPT"
    )
    assert deny < loopback < allow
    assert "-A INPUT -d 10.0.2.0/24 -p tcp -j REJECT --reject-with tcp-reset" in v4
    assert "-A OUTPUT -p udp -m multiport --dports 53 -j ACCEPT" in v4
    assert "-A INPUT -p tcp -m multiport --dports 8000:8100 -j ACCEPT" in v4
    assert "-A INPUT -d 192.0.2.5/32 -p tcp -m multiport --dports 80 -j ACCEPT" in v4
    mapped = (
        "-A OUTPUT -m conntrack --ctorigdst 10.0.2.9/32 -p tcp -m multiport --dports 1 -j ACCEPT"
    )
    assert mapped in v4  # IPv4 written as IPv6 is judged as IPv4
    assert v4[-3:] == [
        "-A INPUT -p tcp -j REJECT --reject-with tcp-reset",
        "-A INPUT -j REJECT",
        "COMMIT",
    ]
    assert "*nat" not in v4 and "--ctorigdst 10.0.2.0/24 -j REJECT" not in v4_text  # no helper
    v6 = v6_text.splitlines()
    assert "-A INPUT -p ipv6-icmp --icmpv6-type 135 -j ACCEPT" in v6
    assert any(
        line.startswith("-A OUTPUT -m conntrack --ctorigdst 2001:db8::1/128 ") for line in v6
    )
    assert not any("10.0.2" in line for line in v6)
    # an unresolved name allows nothing
    assert "443" not in compile_iptables(rules[:1], {}, bridge_network())[0]


def test_restricted_network_setting_is_read(tmp_path) -> None:
    conf = tmp_path / "firejail.config"
    conf.write_text("# comment\nrestricted-network yes\n")
    assert network.restricted_network(str(conf))
    conf.write_text("restricted-network no\n")
    assert not network.restricted_network(str(conf))
    assert not network.restricted_network(str(tmp_path / "missing"))


def test_firejail_run_dir_and_other_mounts_are_read_only() -> None:
    layout = HostLayout(
        top_level=dict(LAYOUT.top_level),
        etc=LAYOUT.etc,
        mounts=frozenset({"/", "/usr/local", "/opt/data", "/proc", "/run/user/0", "/work"}),
    )
    argv = build_argv(plan([exp("/work/app")]), layout).argv
    assert "--read-only=/run/firejail" in argv
    assert argv.index("--read-only=/run/firejail") < argv.index("--read-write=/run/firejail/mnt")
    assert "--read-only=/usr/local" in argv  # a separate mount in the visible system
    for hidden in ("/opt/data", "/proc", "/run/user/0"):  # blacklisted or firejail's
        assert f"--read-only={hidden}" not in argv
    assert argv.count("--read-only=/work") == 1  # the whitelisted top covers it


def test_whole_tmp_exposed_read_write_is_the_hosts() -> None:
    argv = build_argv(plan([exp("/tmp", True)]), LAYOUT).argv
    assert "--private-tmp" not in argv
    assert "--read-write=/tmp" in argv  # the host's /tmp, under the read-only /


def test_root_exposed_read_only() -> None:
    cmd = build_argv(plan([exp("/"), exp("/work/app/out", True)]), LAYOUT)
    assert not cmd.blacklisted
    assert "--private-tmp" not in cmd.argv
    assert cmd.whitelisted == ["/run/firejail"]  # /run reduced even then
    assert "--read-write=/work/app/out" in cmd.argv
    with pytest.raises(SandboxError, match="/run"):
        build_argv(plan([exp("/run")]), LAYOUT)


def test_root_mount_read_only_before_a_read_write_on_it() -> None:
    """firejail skips a --read-write whose target is writable already, so a read-write
    exposure still on the root mount (not in a whitelisted tree) needs / read-only first."""
    argv = build_argv(plan([exp("/"), exp("/work/app/out", True)]), LAYOUT).argv
    assert argv.index("--read-only=/") < argv.index("--read-write=/work/app/out")
    argv = build_argv(plan([exp("/tmp", True)]), LAYOUT).argv
    assert argv.index("--read-only=/") < argv.index("--read-write=/tmp")
    argv = build_argv(plan([exp("/work/app", True)]), LAYOUT).argv
    assert argv.index("--read-write=/work/app") < argv.index("--read-only=/")


def test_root_exposed_read_write_has_no_root_remount() -> None:
    argv = build_argv(plan([exp("/", True), exp("/work/app/in")]), LAYOUT).argv
    assert "--read-only=/" not in argv and "--read-write=/" not in argv
    assert "--read-only=/work/app/in" in argv
    assert "--read-write=/work/app/in" not in argv


def test_no_network_option_only_when_the_caller_makes_the_namespace() -> None:
    assert "--net=none" in build_argv(plan([]), LAYOUT).argv
    argv = build_argv(plan([]), LAYOUT, own_netns=True).argv
    assert not [o for o in argv if o.startswith("--net")]
    bridged = ["--net=br0", "--netfilter=/x"]
    argv = build_argv(plan([]), LAYOUT, network=bridged, own_netns=True).argv
    assert "--net=br0" in argv and "--net=none" not in argv


def test_only_root_makes_the_namespace_itself() -> None:
    from pysb_firejail import netns

    assert netns.usable(as_root=True)
    assert not netns.usable(as_root=False)  # firejail keeps --net=none


def test_option_values_must_match_whole() -> None:
    assert options.validate({"hostname": "box\n"})  # no trailing newline slips through
    assert options.validate({"bridge": "br0\n"})
    assert options.validate({"hostname": 5})
    assert options.validate({"hostname": "a" * 64})
    assert not options.validate({"hostname": "a" * 63, "bridge": "br_0.1"})


def test_mountinfo_escapes_are_decoded() -> None:
    from pysb_firejail.hostfs import mount_points, unescape

    assert unescape("/plain/é") == "/plain/é"
    assert unescape(r"/a\040b\011c\012d\134e") == "/a b\tc\nd\\e"
    assert unescape(r"/é\040x") == "/é x"
    assert unescape("/trailing\\04") == "/trailing\\04"  # not an escape: kept
    assert "/" in mount_points()


def test_var_tmp_keeps_the_hosts_directory() -> None:
    """firejail's own tmpfs on /var/tmp would hide a project there (issue 18)."""
    layout = HostLayout(top_level={**LAYOUT.top_level, "/var": "dir"}, etc=LAYOUT.etc)
    argv = build_argv(plan([exp("/var/tmp/p q")], cwd="/var/tmp/p q"), layout).argv
    assert "--keep-var-tmp" in argv
    assert "--whitelist=/var/tmp/p q" in argv
    assert "--private-cwd=/var/tmp/p q" in argv


def test_var_log_exposure_is_the_hosts_and_read_only() -> None:
    layout = HostLayout(top_level={**LAYOUT.top_level, "/var": "dir"}, etc=LAYOUT.etc)
    argv = build_argv(plan([exp("/var/log/app")], cwd="/var/log/app"), layout).argv
    assert "--writable-var-log" in argv
    assert "--read-only=/var/log" in argv
    # without an exposure there, firejail's skeleton stays (and /var is blacklisted)
    argv = build_argv(plan([exp("/work/app")]), layout).argv
    assert "--writable-var-log" not in argv
    # a read-write exposure below it is widened after the read-only entry
    argv = build_argv(plan([exp("/var/log/app", True)], cwd="/var/log/app"), layout).argv
    assert argv.index("--read-only=/var/log") < argv.index("--read-write=/var/log/app")


def test_lock_directory_exposure_is_refused() -> None:
    with pytest.raises(SandboxError, match="/run/lock"):
        build_argv(plan([exp("/run/lock/app")], cwd="/"), LAYOUT)


def test_normal_user_gets_no_root_remount_but_read_only_tops() -> None:
    """``--read-only=/`` covers the root directory with a mount, which makes the kernel
    refuse firejail's --noroot user namespace: a user gets per-directory entries."""
    p = plan([exp("/work/app"), exp("/opt"), exp("/home/u/out", True)])
    user = build_argv(p, LAYOUT, as_root=False).argv
    assert "--read-only=/" not in user
    # the system, a whole top-level exposure and the whitelisted tops: read-only
    for top in ("/usr", "/opt", "/work", "/home"):
        assert f"--read-only={top}" in user, top
    assert user.index("--read-only=/home") < user.index("--read-write=/home/u/out")
    # firejail's own /run/firejail: a user's --read-write on mnt/ would be ignored
    assert "--read-write=/run/firejail/mnt" not in user
    root = build_argv(p, LAYOUT, as_root=True).argv
    assert "--read-only=/" in root
    assert "--read-write=/run/firejail/mnt" in root


def test_normal_user_with_root_exposed_gets_every_top_read_only() -> None:
    user = build_argv(plan([exp("/")]), LAYOUT, as_root=False).argv
    for top in ("/usr", "/etc", "/home", "/opt", "/tmp", "/work"):
        assert f"--read-only={top}" in user, top
    for kept in ("/proc", "/sys", "/run", "/bin", "/"):
        assert f"--read-only={kept}" not in user, kept


def test_orphans_killed_by_firejail_unless_the_child_reaper_does_it() -> None:
    """``--deterministic-shutdown`` costs a fixed 100 ms sleep at every exit: it is left
    out only when the plan's child set-up starts pysb's reaper."""
    p = plan([exp("/work/app")])
    assert "--deterministic-shutdown" in build_argv(p, LAYOUT).argv  # no child set-up
    p.add_child_setup(ChildSetup(module=CHILD_MODULE, function="setup", args={}))
    assert "--deterministic-shutdown" in build_argv(p, LAYOUT).argv  # not asked to
    p.child_setups[0].args["reaper"] = 4026531836  # the host's PID namespace
    assert "--deterministic-shutdown" not in build_argv(p, LAYOUT).argv
    p.child_setups[:] = [ChildSetup(module="elsewhere", function="setup", args={"reaper": 1})]
    assert "--deterministic-shutdown" in build_argv(p, LAYOUT).argv
