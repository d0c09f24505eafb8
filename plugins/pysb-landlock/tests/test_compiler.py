"""The plan -> ruleset compiler and the provider contract (no kernel needed here)."""

from __future__ import annotations

import ctypes
import errno
import json
import os

import pysb_landlock
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pysb_landlock import LandlockProvider, compiler, rofs, ruleset
from pysb_landlock.compiler import WILDCARD_BIND, compile_plan, merge, subtract

from pysb_core.plan import LaunchPlan, LaunchSpec
from pysb_core.policy import Exposure, IgnoreRule, Policy
from pysb_core.policy.netrules import parse_rule
from pysb_core.provider import Capability as C


def make_plan(exposures=(), net=(), ignore=(), protected=(), hidden=()):
    exps = tuple(exposures)
    policy = Policy(
        exposures=exps,
        network=tuple(parse_rule(r, source=f"p.yaml:{i + 1}") for i, r in enumerate(net)),
        ignore=tuple(IgnoreRule(g, "p.yaml:9") for g in ignore),
        provider="landlock",
    )
    return LaunchPlan(
        policy=policy,
        python="/usr/bin/python3",
        argv=["/usr/bin/python3", "-c", "stub", "3"],
        env={"A": "1"},
        cwd="/work",
        exposures=list(exps),
        protected=list(protected),
        hidden=list(hidden),
        pass_fds=[3, 4],
    )


def ro(path, **kw):
    return Exposure(path, kw.pop("target", path), False, "p.yaml:2", **kw)


def rw(path, **kw):
    return Exposure(path, kw.pop("target", path), True, "p.yaml:3", **kw)


def test_merge_and_subtract():
    assert merge([(5, 6), (1, 2), (3, 3), (10, 12)]) == [(1, 3), (5, 6), (10, 12)]
    assert merge([(4, 4), (1, 3), (5, 9)]) == [(1, 9)]
    assert subtract([(0, 65535)], [(22, 22)]) == [(0, 21), (23, 65535)]
    assert subtract([(80, 80), (443, 443)], [(443, 443)]) == [(80, 80)]
    assert subtract([(1, 10)], [(0, 100)]) == []


_span = st.tuples(st.integers(0, 300), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1]))


@given(st.lists(_span, max_size=6), st.lists(_span, max_size=6))
def test_subtract_matches_set_arithmetic(keep, drop):
    def points(ranges):
        return {p for lo, hi in ranges for p in range(lo, hi + 1)}

    got = subtract(merge(keep), merge(drop))
    assert points(got) == points(keep) - points(drop)
    assert got == merge(got)


def test_exposures_become_read_and_write_rules():
    c = compile_plan(make_plan([ro("/srv/ro"), rw("/srv/rw")]), 7)
    assert "/srv/ro" in c.read and "/srv/ro" not in c.write
    assert "/srv/rw" in c.write
    assert "/usr/lib" in c.read and "/proc/self" in c.read and "/etc/ld.so.cache" in c.read
    assert "/dev/null" in c.devices and "/dev/ptmx" in c.devices
    assert not any(p.startswith("/dev/pts") for p in c.devices + c.write + c.read)
    assert "/etc/resolv.conf" not in c.read  # no network rule: no name-service files
    assert c.scope is True


@pytest.mark.parametrize(
    ("net", "scoped"),
    [
        ([], True),
        (["allow tcp 127.0.0.1 * any", "allow udp * * out"], True),
        (["allow any * * in"], True),  # a bind never leaves the scope's domain
        (["allow any * * out"], False),
        (["allow any * * any"], False),
        (["allow any * * any", "deny any * * out"], True),
    ],
)
def test_abstract_sockets_unscoped_only_when_the_profile_allows_them_out(net, scoped):
    """The Python guard allows abstract Unix sockets out only under a rule over every
    address (pysb_core.policy.netmatch.abstract_decision); the scope would refuse exactly
    those connections to the host's sockets, so it is dropped for them alone."""
    c = compile_plan(make_plan(net=net), 7)
    assert c.scope is True and c.abstract_scope is scoped
    assert c.args()["abstract_scope"] is scoped
    text = "\n".join(c.describe())
    assert ("abstract unix sockets not scoped" in text) is not scoped, text


def test_network_ports_any_host():
    plan = make_plan(
        net=[
            "allow tcp example.com 443 out",
            "allow tcp 127.0.0.1 8000-8002 out",
            "allow tcp 127.0.0.1 9000 in",
            "allow udp * 53 out",
        ]
    )
    c = compile_plan(plan, 7)
    assert c.connect == [(443, 443), (8000, 8002)]
    assert c.bind == [(9000, 9000)]
    assert "/etc/resolv.conf" in c.read
    text = "\n".join(c.gaps)
    assert "for every host, not only example.com" in text
    assert "cannot filter udp" in text


def test_no_network_rule_denies_all_tcp():
    c = compile_plan(make_plan(), 4)
    assert c.connect == [] and c.bind == []
    assert c.args()["connect"] == [] and c.args()["bind"] == []


def test_all_ports_leaves_operation_unhandled_and_deny_star_subtracts():
    c = compile_plan(make_plan(net=["allow tcp * * any"]), 7)
    assert c.connect is None and c.bind is None
    c = compile_plan(make_plan(net=["allow tcp * * out", "deny any * 25 out"]), 7)
    assert c.connect == [(0, 24), (26, 65535)]
    c = compile_plan(make_plan(net=["allow tcp * * out", "deny tcp 10.0.0.0/8 * out"]), 7)
    assert c.connect is None
    assert any("cannot deny by host" in g for g in c.gaps)


def test_a_rule_on_the_wildcard_address_binds_every_local_address():
    """In an ``in`` rule the wildcard (``0.0.0.0``, ``::``) is every local address: a deny
    there is a port rule for bind, and ``::`` (both families) leaves no gap. A connection
    to the wildcard is one address: an ``out`` deny stays with the Python layer."""
    c = compile_plan(make_plan(net=["allow tcp * * in", "deny tcp 0.0.0.0 25 in"]), 7)
    assert c.bind == [(0, 24), (26, 65535)] and c.gaps == []
    c = compile_plan(make_plan(net=["allow tcp :: 8000 in"]), 7)
    assert c.bind == [(8000, 8000)] and c.gaps == []
    c = compile_plan(make_plan(net=["allow tcp * * any", "deny tcp :: 25 any"]), 7)
    assert c.bind == [(0, 24), (26, 65535)] and c.connect is None
    assert any("cannot deny by host" in g for g in c.gaps)


def test_the_wildcard_means_what_the_guard_and_the_filters_say() -> None:
    from pysb_core.policy.netmatch import bind_scope

    for network, scope in WILDCARD_BIND.items():
        assert bind_scope(network) == scope
    assert all(bind_scope(n) == n for n in ("0.0.0.0/0", "0.0.0.0/32", "127.0.0.1", "*"))


def test_old_abi_has_no_network_and_no_scope():
    c = compile_plan(make_plan(net=["allow tcp * 80 out"]), 3)
    assert c.connect is None and c.bind is None and c.scope is False
    assert any("not restricted (needs ABI 4" in line for line in c.describe())


def test_unexpressible_file_rules_reported():
    plan = make_plan(
        [rw("/srv/app"), ro("/srv/app/conf"), ro("/data", target="/mnt/data")],
        ignore=[".env"],
        protected=["/srv/app/.pysb.yaml"],
    )
    c = compile_plan(plan, 7)
    assert "/data" in c.read  # the host path carries the OS rule
    assert any("cannot rename" in g for g in c.gaps)
    assert any("cannot hide" in g for g in c.gaps)
    assert any("profile file /srv/app/.pysb.yaml" in w for w in c.warnings)
    assert any("read-only /srv/app/conf" in w for w in c.warnings)


def test_args_are_json_and_restrict_signature():
    import inspect

    from pysb_landlock import child

    args = compile_plan(make_plan([rw("/x")], net=["allow tcp * 1-3 out"]), 7).args()
    assert json.loads(json.dumps(args)) == args
    assert set(args) <= set(inspect.signature(child.restrict).parameters)


@pytest.fixture
def provider_with_abi(monkeypatch, tmp_path):
    made = []

    def make(abi):
        # A cache of its own per provider: a remembered ABI would hide the patched one.
        made.append(abi)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"cache{len(made)}"))
        if abi is None:
            exc = OSError(errno.EOPNOTSUPP, "Operation not supported")
            monkeypatch.setattr(ruleset, "abi_version", lambda: (_ for _ in ()).throw(exc))
        else:
            monkeypatch.setattr(ruleset, "abi_version", lambda: abi)
        return LandlockProvider()

    return make


def test_enforced_depends_on_abi(provider_with_abi):
    assert provider_with_abi(7).enforced() == {C.FILES, C.FILES_WRITE, C.TCP_PORT, C.ENV, C.LIMITS}
    assert provider_with_abi(3).enforced() == {C.FILES, C.FILES_WRITE, C.ENV, C.LIMITS}
    assert provider_with_abi(2).enforced() == {C.FILES, C.ENV, C.LIMITS}
    assert provider_with_abi(None).enforced() == frozenset()
    caps = LandlockProvider.capabilities
    for absent in (C.IGNORE, C.RENAME, C.TCP_HOST, C.UDP_HOST, C.UDP_PORT):
        assert absent not in caps


def test_probe_missing_says_how_to_fix(provider_with_abi):
    st = provider_with_abi(None).probe()
    assert not st.available
    assert "not enabled at boot" in st.reason
    assert "CONFIG_SECURITY_LANDLOCK=y" in st.fix and "lsm=landlock" in st.fix
    ok = provider_with_abi(7).probe()
    assert ok.available and ok.version == "ABI 7"


def test_prepare_runs_argv_unchanged_and_adds_child_setup(provider_with_abi):
    plan = make_plan([rw("/srv/out")], net=["allow tcp * 443 out"])
    spec = provider_with_abi(7).prepare(plan)
    assert isinstance(spec, LaunchSpec)
    assert spec.argv == plan.argv and spec.env == plan.env and spec.cwd == plan.cwd
    assert spec.pass_fds == [3, 4]
    (setup,) = plan.child_setups
    assert (setup.module, setup.function) == ("pysb_landlock.child", "restrict")
    assert setup.args["write"] == ["/srv/out"] and setup.args["connect"] == [[443, 443]]
    assert setup.args["abi"] == 7
    # framework packages stay importable after the restriction
    assert any(p.endswith("pysb_landlock") for p in setup.args["read"])


def test_prepare_without_landlock_is_refused(provider_with_abi):
    from pysb_core.errors import ProviderUnavailableError

    with pytest.raises(ProviderUnavailableError, match="not enabled at boot"):
        provider_with_abi(None).prepare(make_plan())


def test_describe_lists_the_ruleset(provider_with_abi):
    lines = provider_with_abi(7).describe(make_plan([ro("/srv/ro")], net=["allow tcp * 443 out"]))
    text = "\n".join(lines)
    assert "landlock ABI 7" in text
    assert "read+execute: /srv/ro" in text
    assert "tcp connect ports (any host): 443" in text
    assert "udp" in text and "chmod" in text


def test_options_unix_sockets_and_sysv_ipc():
    assert LandlockProvider.validate_options({}) == []
    assert LandlockProvider.validate_options({"unix-sockets": True, "sysv-ipc": False}) == []
    assert LandlockProvider.validate_options({"unix-sockets": "yes"}) == [
        "'unix-sockets' must be true or false"
    ]
    assert LandlockProvider.validate_options({"sysv-ipc": 1}) == [
        "'sysv-ipc' must be true or false"
    ]
    assert LandlockProvider.validate_options({"x": 1}) == [
        "unknown option 'x' (known: unix-sockets, sysv-ipc)"
    ]


class _Packed(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("handled_access_fs", "handled_access_net", "scoped")]


class _OpenHow(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "mode", "resolve")]


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns")]


def test_ruleset_abi_masks_and_struct_layout():
    assert ruleset.handled_fs(1) == (1 << 13) - 1
    assert (
        ruleset.handled_fs(2) & ruleset.FS_REFER and not ruleset.handled_fs(2) & ruleset.FS_TRUNCATE
    )
    assert ruleset.handled_fs(5) == (1 << 16) - 1
    assert ruleset.handled_net(3) == 0 and ruleset.handled_net(4) == 3
    assert ruleset.scopes(5) == 0 and ruleset.scopes(6) == 3
    assert ruleset.SCOPE_ABSTRACT_UNIX_SOCKET == 1 and ruleset.SCOPE_SIGNAL == 2  # uapi values
    assert not ruleset.FS_WRITE & (ruleset.FS_MAKE_CHAR | ruleset.FS_MAKE_BLOCK)
    # The uapi structures, laid out as ctypes lays them out from the headers' fields.
    assert ruleset._path_beneath_attr(5, 7) == bytes(_Packed(5, 7))
    assert ruleset._net_port_attr(3, 8080) == bytes(_NetPort(3, 8080))
    assert ruleset._ruleset_attr(1, 2, 3) == bytes(_RulesetAttr(1, 2, 3))
    assert ruleset._open_how(os.O_PATH, 0, 4) == bytes(_OpenHow(os.O_PATH, 0, 4))
    assert rofs._mount_attr(1) == bytes(_MountAttr(1, 0, 0, 0))
    assert [len(bytes(x)) for x in (_Packed(), _NetPort(), _RulesetAttr(), _MountAttr())] == [
        12,
        16,
        24,
        32,
    ]
    assert pysb_landlock.LandlockProvider.name == "landlock"


def test_private_keys_of_implicit_exposures_are_left_out(tmp_path, monkeypatch):
    ssl = tmp_path / "ssl"
    for d in ("certs", "private"):
        (ssl / d).mkdir(parents=True)
    (ssl / "openssl.cnf").write_text("")
    implicit = Exposure(str(ssl), str(ssl), False, "<ca-certificates>", True)
    c = compile_plan(make_plan([implicit]), 7)
    assert str(ssl) in c.read  # only system configuration (/etc) is split
    monkeypatch.setattr(compiler, "SPLIT_ROOTS", (str(tmp_path),))
    c = compile_plan(make_plan([implicit]), 7)
    assert str(ssl / "certs") in c.read and str(ssl / "openssl.cnf") in c.read
    assert str(ssl) not in c.read and str(ssl / "private") not in c.read
    # an exposure the user wrote is granted as written
    c = compile_plan(make_plan([ro(str(ssl))]), 7)
    assert str(ssl) in c.read


@pytest.mark.parametrize("families", [frozenset({"files"}), frozenset()])
def test_check_reports_what_the_union_of_grants_hides(provider_with_abi, families):
    from pysb_core.check import CheckReport

    prov = provider_with_abi(7)
    policy = Policy(
        exposures=(rw("/srv/app"), ro("/srv/app/conf"), ro("/srv/other")),
        profile_files=("/srv/app/.pysb.yaml", "/etc/pysb/global.yaml"),
        provider="landlock",
    )
    report = CheckReport("landlock", python_guards=bool(families), python_families=families)
    prov.pysb_check(policy=policy, provider=prov, report=report)
    got = {r.rule: r.layers for r in report.rules}
    layers = ("python",) if families else ()
    assert got == {
        "files: profile /srv/app/.pysb.yaml stays read-only (inside expose-rw /srv/app)": layers,
        "files: expose-ro: /srv/app/conf stays read-only (inside expose-rw /srv/app)": layers,
    }
    assert bool(report.unenforced()) is not bool(families)
