"""Unit tests of the command builder, against described (not real) hosts."""

from __future__ import annotations

import pytest
from pysb_bwrap.argv import build_argv, etc_copies, sandbox_path
from pysb_bwrap.hostfs import HostLayout

from pysb_core.errors import SandboxError
from pysb_core.plan import LaunchPlan
from pysb_core.policy import Exposure, Policy

MERGED = HostLayout(
    top_level={"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"},
    etc=frozenset({"/etc/passwd", "/etc/localtime", "/etc/hosts", "/etc/resolv.conf"}),
    symlinks={"/etc/localtime": "/usr/share/zoneinfo/Europe/Paris"},
    dirs=frozenset({"/p/.git"}),
)
PY = "/opt/py/bin/python3.11"


def plan(*exposures: Exposure, **kw) -> LaunchPlan:
    return LaunchPlan(
        policy=Policy(exposures=exposures, provider="bwrap"),
        python=PY,
        argv=[PY, "-c", "pass"],
        env={"SECRET": "s3cr3t"},
        cwd=kw.pop("cwd", "/p"),
        exposures=list(exposures),
        **kw,
    )


def E(path: str, target: str | None = None, rw: bool = False) -> Exposure:
    return Exposure(path=path, target=target or path, writable=rw, source="x.yaml:1")


def pairs(argv: list[str], opt: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == opt]


def test_namespaces_hardening_and_program_last():
    argv = build_argv(plan(E("/p")), MERGED).argv
    for flag in (
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
    ):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert "--share-net" not in argv
    assert argv[-4:] == ["--", PY, "-c", "pass"]


def test_environment_is_never_on_the_command_line():
    argv = build_argv(plan(E("/p")), MERGED).argv
    assert "--setenv" not in argv and "--clearenv" not in argv
    assert not any("s3cr3t" in a for a in argv)


def test_system_as_on_host_and_only_some_of_etc():
    argv = build_argv(plan(E("/p")), MERGED).argv
    assert ("/usr", "/usr") in pairs(argv, "--ro-bind")
    assert ("usr/bin", "/bin") in pairs(argv, "--symlink")
    assert ("/usr/share/zoneinfo/Europe/Paris", "/etc/localtime") in pairs(argv, "--symlink")
    assert ("/etc/passwd", "/etc/passwd") in pairs(argv, "--ro-bind")
    assert ("/etc/hosts", "/etc/hosts") in pairs(argv, "--ro-bind")
    assert not any(a == "/etc" for a in argv)
    assert "/etc/resolv.conf" not in argv  # no network rule


def test_real_directories_are_bound_not_linked():
    layout = HostLayout(top_level={"/bin": "dir", "/lib": "usr/lib"})
    argv = build_argv(plan(E("/p")), layout).argv
    assert ("/bin", "/bin") in pairs(argv, "--ro-bind")
    assert ("usr/lib", "/lib") in pairs(argv, "--symlink")


def test_network_shows_resolver_and_generated_files():
    p = plan(E("/p"), hosts_file="/run/h")
    argv = build_argv(p, MERGED, network=True, resolv_file="/run/r", info_fd=7, block_fd=8).argv
    assert ("/run/h", "/etc/hosts") in pairs(argv, "--ro-bind")
    assert ("/run/r", "/etc/resolv.conf") in pairs(argv, "--ro-bind")
    assert ("/etc/resolv.conf", "/etc/resolv.conf") not in pairs(argv, "--ro-bind")
    assert argv[argv.index("--info-fd") + 1] == "7"
    assert argv[argv.index("--block-fd") + 1] == "8"


def test_exposures_shallowest_first_rw_and_rename():
    argv = build_argv(plan(E("/p/ro"), E("/p", rw=True), E("/d", "/data", rw=True)), MERGED).argv
    binds = [
        (a, argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")
    ]
    order = [b for b in binds if b[1].startswith(("/p", "/d"))]
    assert order == [
        ("--bind", "/p", "/p"),
        ("--bind", "/d", "/data"),
        ("--ro-bind", "/p/ro", "/p/ro"),
    ]


def test_private_tmp_always_and_before_exposures_under_it():
    """/tmp is the program's private temporary directory (pysb_core.launch.tmpdir): a fresh tmpfs
    even when exposures live below it (bound onto it), or when /tmp itself is exposed
    (bound over it, as the profile asks)."""
    argv = build_argv(plan(E("/tmp/work", rw=True), cwd="/tmp/work"), MERGED).argv
    assert argv.index("/tmp") < argv.index("/tmp/work")
    tmpfs = argv.index("/tmp")
    assert argv[tmpfs - 5 : tmpfs] == ["--perms", "1777", "--size", str(512 << 20), "--tmpfs"]
    shm = argv.index("/dev/shm")
    assert argv[shm - 5 : shm] == ["--perms", "1777", "--size", str(512 << 20), "--tmpfs"]
    argv = build_argv(plan(E("/tmp", rw=True)), MERGED).argv
    tmpfs = argv.index("/tmp") - 1
    assert argv[tmpfs] == "--tmpfs"
    assert ("/tmp", "/tmp") in pairs(argv[tmpfs:], "--bind")


def test_hidden_paths_masked_after_exposures():
    p = plan(E("/p", rw=True), hidden=["/p/.git", "/p/.env", "/elsewhere/x"])
    cmd = build_argv(p, MERGED, empty_file="/run/empty")
    argv = cmd.argv
    assert ("/run/empty", "/p/.env") in pairs(argv, "--ro-bind")
    i = argv.index("/p/.git")
    assert argv[i - 1] == "--tmpfs" and argv[i - 2] == "0000"
    assert argv.index("/p/.env") > argv.index("--bind")
    assert cmd.masked == ["/p/.env", "/p/.git"] or sorted(cmd.masked) == ["/p/.env", "/p/.git"]
    assert cmd.needs_empty_file


def test_hidden_path_below_a_renamed_exposure_is_masked_at_its_new_name():
    p = plan(E("/d", "/data"), hidden=["/d/.env"])
    argv = build_argv(p, MERGED, empty_file="/e").argv
    assert ("/e", "/data/.env") in pairs(argv, "--ro-bind")


def test_profile_file_rebound_read_only_only_under_rw():
    p = plan(
        E("/p", rw=True), E("/q"), protected=["/p/.pysb.yaml", "/q/.pysb.yaml", "/z/.pysb.yaml"]
    )
    argv = build_argv(p, MERGED).argv
    protected = [p for p in pairs(argv, "--ro-bind-try") if not p[0].startswith("/proc/")]
    assert protected == [("/p/.pysb.yaml", "/p/.pysb.yaml")]


def test_cwd_created_when_not_exposed_and_translated_when_renamed():
    cmd = build_argv(plan(E("/p"), cwd="/home/u"), MERGED)
    assert cmd.argv[cmd.argv.index("--dir") + 1] == "/home/u"
    assert cmd.argv[cmd.argv.index("--chdir") + 1] == "/home/u"
    cmd = build_argv(plan(E("/d", "/data"), cwd="/d/sub"), MERGED)
    assert "--dir" not in cmd.argv
    assert cmd.argv[cmd.argv.index("--chdir") + 1] == "/data/sub"
    # --dir and everything else come before the root is made read-only
    assert cmd.argv.index("--remount-ro") > cmd.argv.index("/data")


def test_interactive_skips_new_session():
    argv = build_argv(plan(E("/p")), MERGED, new_session=False).argv
    assert "--new-session" not in argv


def test_root_exposure_first_and_root_left_as_exposed():
    argv = build_argv(plan(E("/", rw=True)), MERGED).argv
    assert argv.index("/") < argv.index("/usr")
    assert argv[argv.index("--chdir") - 2 : argv.index("--chdir")] != ["--remount-ro", "/"]


def test_read_only_root_exposure_keeps_the_hosts_system_and_etc():
    """``expose-ro: [/]``: the host's /bin link, /usr and /etc are there already; a link
    made over them failed ("Can't make symlink at /bin: File exists"), and generated files
    are bound over the host's (a read-only host directory takes no new file)."""
    argv = build_argv(
        plan(E("/", rw=False)), MERGED, network=True, hosts_file=22, resolv_file=21
    ).argv
    assert pairs(argv, "--ro-bind")[0] == ("/", "/")
    assert "--symlink" not in argv and "/usr" not in argv and "--file" not in argv
    assert ("21", "/etc/resolv.conf") in pairs(argv, "--ro-bind-data")
    assert ("22", "/etc/hosts") in pairs(argv, "--ro-bind-data")


@pytest.mark.parametrize(
    ("exposure", "message"),
    [
        (E("/p", "/proc/x"), "bwrap mounts itself"),
        (E("/p", "/usr/pysb-nonexistent-dir"), "read-only /usr"),
        (E("/p/../q"), "normalised absolute"),
        (E("p"), "normalised absolute"),
    ],
)
def test_bad_targets_refused_with_reason(exposure, message):
    with pytest.raises(SandboxError, match=message):
        build_argv(plan(exposure), MERGED)


def test_relative_interpreter_refused():
    p = plan(E("/p"))
    p.argv = ["python3", "-c", "pass"]
    with pytest.raises(SandboxError, match="absolute path"):
        build_argv(p, MERGED)


def test_sandbox_path_mapping():
    exps = [E("/d", "/data"), E("/d/inner", "/in")]
    assert sandbox_path("/d/x/y", exps) == "/data/x/y"
    assert sandbox_path("/d/inner/z", exps) == "/in/z"
    assert sandbox_path("/d", exps) == "/data"
    assert sandbox_path("/dd", exps) is None
    assert sandbox_path("/usr/lib/x", exps) == "/usr/lib/x"


def test_host_private_keys_masked_when_an_exposure_shows_them():
    layout = HostLayout(
        always_hidden=frozenset({"/etc/ssl/private"}), dirs=frozenset({"/etc/ssl/private"})
    )
    argv = build_argv(plan(E("/etc/ssl")), layout).argv
    i = argv.index("/etc/ssl/private")
    assert argv[i - 1] == "--tmpfs" and argv[i - 2] == "0000"
    assert "/etc/ssl/private" not in build_argv(plan(E("/p")), layout).argv


def test_ignored_symlink_masks_its_visible_target_only():
    layout = HostLayout(resolved={"/p/link.pem": "/p/real.pem", "/p/.env": "/etc/shadow"})
    p = plan(E("/p"), hidden=["/p/link.pem", "/p/.env"])
    cmd = build_argv(p, layout, empty_file="/e")
    assert pairs(cmd.argv, "--ro-bind").count(("/e", "/p/real.pem")) == 1
    assert "/p/.env" not in cmd.argv and "/etc/shadow" not in cmd.argv
    assert cmd.masked == ["/p/real.pem"]


def test_interpreter_link_chain_recreated_or_left_to_its_directory():
    layout = HostLayout(
        exposure_links={
            "/repo/.venv/bin/python3": "/opt/py/bin/python3",
            "/opt/py/bin/python3": "python3.11",
        }
    )
    p = plan(E("/repo"), E("/repo/.venv/bin/python3"), E("/opt/py/bin/python3"), E(PY))
    argv = build_argv(p, layout).argv
    # inside a bound directory the link is already there: no mount on top of it
    assert "/repo/.venv/bin/python3" not in argv
    # elsewhere it is recreated as the same link, and its target is bound
    assert ("python3.11", "/opt/py/bin/python3") in pairs(argv, "--symlink")
    assert (PY, PY) in pairs(argv, "--ro-bind")


def test_paths_inside_a_masked_directory_are_not_masked_again():
    layout = HostLayout(dirs=frozenset({"/p/.git"}))
    p = plan(E("/p"), hidden=["/p/.git", "/p/.git/key.pem"])
    cmd = build_argv(p, layout, empty_file="/e")
    assert "/p/.git/key.pem" not in cmd.argv
    assert cmd.masked == ["/p/.git"]


def test_protected_file_that_is_also_ignored_stays_masked():
    p = plan(E("/p", rw=True), hidden=["/p/.pysb.yaml"], protected=["/p/.pysb.yaml"])
    argv = build_argv(p, MERGED, empty_file="/e").argv
    assert ("/e", "/p/.pysb.yaml") in pairs(argv, "--ro-bind")
    assert [p for p in pairs(argv, "--ro-bind-try") if not p[0].startswith("/proc/")] == []


def test_kernel_knobs_in_proc_are_read_only():
    """A root program is the host's uid 0: /proc/sys must not be writable (core_pattern)."""
    argv = build_argv(plan(E("/p")), MERGED).argv
    knobs = pairs(argv, "--ro-bind-try")
    assert ("/proc/sys", "/proc/sys") in knobs and (
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
    ) in knobs
    assert all(argv.index(k[0]) > argv.index("--proc") for k in knobs if k[0].startswith("/proc/"))


def binds(argv: list[str]) -> list[tuple[str, str, str]]:
    return [
        (a, argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")
    ]


def test_a_bind_that_changes_nothing_is_left_out():
    """Each bind costs bwrap a pass over the mount table: a read-only exposure already shown
    read-only at the same place by an enclosing bind is not bound again."""
    layout = HostLayout(canonical=frozenset({"/p/ro", "/p/rw/ro", "/usr/share/x", "/q/a"}))
    exposures = (
        E("/p"),
        E("/p/ro"),  # inside read-only /p: left out
        E("/p/rw", rw=True),
        E("/p/rw/ro"),  # inside a read-write bind: must stay read-only, so bound
        E("/usr/share/x"),  # inside the read-only /usr: left out
        E("/q"),
        E("/q/a", "/q/b"),  # renamed: bound
        E("/q/link"),  # not canonical (not in layout.canonical): bound
    )
    got = binds(build_argv(plan(*exposures), layout).argv)
    assert ("--ro-bind", "/p", "/p") in got
    assert ("--bind", "/p/rw", "/p/rw") in got
    assert ("--ro-bind", "/p/rw/ro", "/p/rw/ro") in got
    assert ("--ro-bind", "/q/a", "/q/b") in got
    assert ("--ro-bind", "/q/link", "/q/link") in got
    for left_out in ("/p/ro", "/usr/share/x"):
        assert not any(b[2] == left_out for b in got)


def test_a_bind_below_the_private_tmp_is_kept():
    layout = HostLayout(canonical=frozenset({"/tmp/a"}))
    got = binds(build_argv(plan(E("/tmp/a")), layout).argv)
    assert ("--ro-bind", "/tmp/a", "/tmp/a") in got


def test_etc_files_an_exposure_covers_are_not_bound_first():
    layout = HostLayout(etc=frozenset({"/etc/passwd", "/etc/ssl/certs", "/etc/ssl/openssl.cnf"}))
    got = binds(build_argv(plan(E("/etc/ssl")), layout).argv)
    assert ("--ro-bind", "/etc/passwd", "/etc/passwd") in got
    assert ("--ro-bind", "/etc/ssl", "/etc/ssl") in got
    assert not any(b[2].startswith("/etc/ssl/") for b in got)


def test_etc_files_as_copies():
    layout = HostLayout(
        etc=frozenset({"/etc/passwd", "/etc/hosts", "/etc/ssl/certs", "/etc/localtime"}),
        symlinks={"/etc/localtime": "/usr/share/zoneinfo/UTC"},
        dirs=frozenset({"/etc/ssl/certs"}),
    )
    p = plan(E("/p"))
    assert etc_copies(p, layout, network=False) == ["/etc/passwd", "/etc/hosts"]
    # network: /etc/hosts and /etc/resolv.conf are generated, never the host's
    assert etc_copies(p, layout, network=True) == ["/etc/passwd"]
    # pinned names: core's hosts file is bound instead
    assert etc_copies(plan(E("/p"), hosts_file="/run/h"), layout, network=False) == ["/etc/passwd"]
    argv = build_argv(p, layout, copies={"/etc/passwd": 11, "/etc/hosts": 12}).argv
    i = argv.index("/etc/passwd")
    assert argv[i - 4 : i] == ["--perms", "0444", "--file", "11"]
    i = argv.index("/etc/hosts")
    assert argv[i - 4 : i] == ["--perms", "0444", "--file", "12"]
    assert ("/etc/ssl/certs", "/etc/ssl/certs") in pairs(argv, "--ro-bind")
    assert argv.index("--remount-ro") > i  # the root holding the copies ends read-only


def test_no_copies_when_the_root_is_a_host_directory():
    """With ``/`` exposed, bwrap's root is a host directory: a copy would write into it."""
    layout = HostLayout(etc=frozenset({"/etc/passwd"}))
    p = plan(E("/", rw=True))
    assert etc_copies(p, layout, network=False) == []
    argv = build_argv(p, layout, copies={"/etc/passwd": 11}).argv
    assert "--file" not in argv
    assert ("/etc/passwd", "/etc/passwd") not in pairs(argv, "--ro-bind")  # the host's, as is


def test_generated_files_from_fds():
    argv = build_argv(
        plan(E("/p")), MERGED, network=True, resolv_file=21, hosts_file=22, info_fd=7
    ).argv
    i = argv.index("/etc/resolv.conf")
    assert argv[i - 2 : i + 1] == ["--file", "21", "/etc/resolv.conf"]
    i = argv.index("/etc/hosts")
    assert argv[i - 2 : i + 1] == ["--file", "22", "/etc/hosts"]
