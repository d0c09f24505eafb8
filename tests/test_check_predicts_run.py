"""``pysb check`` says valid exactly when ``pysb run`` can start (issue 27 item 3), under the
providers that load a packet filter into their own network namespace (bwrap, unshare).

Found: 400+ network rules made every launch fail (``netlink: Error: Could not process
rule: Message too long``, no FILE:LINE, no hint) while ``check`` said valid; an ``in``
rule whose port another program holds on the host, and unshare's mount plan, failed the
same way. ``check`` now does what the launch does short of starting the program
(``Provider.preflight``): the ruleset loaded into a throwaway namespace, the forwarded
ports tried, the mount plan built.

The 10,000-rule profile allows 9,000 single loopback ports (among them three servers the
test starts), prefixes with port ranges, IPv6, udp, denies and ``in`` rules; a fourth
server is on a port no rule allows. Python guards off: the kernel alone must decide
(the Python layer would answer ``NetworkDeniedError`` before the kernel saw anything).
Traffic on the host's loopback only. Runs as root and as a normal user (CI).
"""

from __future__ import annotations

import os
import shutil
import socket

import pytest

from pysb_core.testing import LoopbackServer, Project, require_provider

PROVIDERS = ["bwrap", "unshare"]  # and firejail as root (a normal user's is refused)

CLIENT = """
import socket, sys
for port in map(int, sys.argv[1:]):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            print(port, c.recv(16).decode().strip())
    except OSError as exc:
        print(port, "refused", type(exc).__name__)
"""


def ten_thousand_rules(allowed: list[int], refused: int) -> list[str]:
    """10,000 rules: ``allowed`` and 9,000 - len(allowed) more single loopback ports (never
    ``refused``), then prefixes, ranges, IPv6, udp, denies and ``in`` rules."""
    rules = [f"allow tcp 127.0.0.1 {p} out" for p in allowed]
    taken = {*allowed, refused}
    port = 1024
    while len(rules) < 9000:
        if port not in taken:
            rules.append(f"allow tcp 127.0.0.1 {port} out")
            taken.add(port)
        port = port + 7 if port + 7 <= 65535 else port + 7 - 65535 + 1024
    rules += [
        f"allow tcp 10.{i % 200}.{i // 200}.0/24 {2000 + i}-{2010 + i},80 out" for i in range(500)
    ]
    rules += [f"allow udp 2001:db8:{i:x}::/48 {4000 + i} out" for i in range(200)]
    rules += [f"deny tcp 10.{i}.0.0/16 {2005 + i} out" for i in range(100)]
    rules += [f"deny any 10.{i}.{i}.0/24 * out" for i in range(100)]
    rules += [f"allow tcp 203.0.113.1 {7000 + i} in" for i in range(100)]
    assert len(rules) == 10_000
    return rules


def _profile(project: Project, rules: list[str], extra: str = "") -> None:
    body = "".join(f"  - {r}\n" for r in rules)
    project.profile(f"version: 1\nimports: [socket, sys]\n{extra}network:\n{body}")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("provider", "helper"),
    [("bwrap", None), ("unshare", None), ("unshare", "pasta"), ("firejail", None)],
)
def test_ten_thousand_rules_check_valid_and_run_enforced(
    project: Project, provider: str, helper: str | None
) -> None:
    """With pasta as the helper, the 9,000 ports go to pasta (``-T``) too: one spec of
    52 KiB was "Invalid port specifier" (pasta reads 8 KiB), now several ``-T`` options."""
    require_provider(provider)
    if helper is not None and shutil.which(helper) is None:
        pytest.skip(f"{helper} is not installed")
    servers = [LoopbackServer() for _ in range(4)]
    try:
        allowed, refused = [s.port for s in servers[:3]], servers[3].port
        extra = f"providers:\n  {provider}: {{network-helper: {helper}}}\n" if helper else ""
        _profile(project, ten_thousand_rules(allowed, refused), extra)
        project.file("client.py", CLIENT)
        # check is asked about the run it predicts: the same provider and flags.
        check = project.run("check", "--provider", provider, "--no-python-guards")
        ports = [str(p) for p in [*allowed, refused]]
        res = project.run("run", "--provider", provider, "--no-python-guards", "client.py", *ports)
        if provider == "firejail" and os.getuid() != 0:
            # Only root can filter the namespace firejail runs in: both refuse, alike.
            assert check.returncode == 125 and res.returncode == 125, (check, res)
            assert "needs root with firejail" in check.stderr, check.stderr
            assert "needs root with firejail" in res.stderr, res.stderr
            return
        assert check.returncode == 0, check.stderr[-3000:]
        assert check.stdout.rstrip().endswith("valid")
        assert res.returncode == 0, res.stderr[-3000:]
        lines = res.stdout.splitlines()
        assert lines[:3] == [f"{p} ok" for p in allowed], res.stdout
        assert lines[3] == f"{refused} refused ConnectionRefusedError", res.stdout
        assert servers[3].accepted == 0
    finally:
        for s in servers:
            s.close()


@pytest.mark.parametrize("provider", [*PROVIDERS, "firejail"])
def test_an_in_rule_on_a_port_the_host_holds_is_refused_by_check_as_by_run(
    project: Project, provider: str
) -> None:
    """The helper forwards the host's 127.0.0.1:P into the sandbox: when another program
    holds P, run refuses (125); check refuses too, naming the rule's line and what to do."""
    require_provider(provider)
    if provider == "firejail" and os.getuid() != 0:
        pytest.skip("firejail refuses a normal user's network rules (the test above)")
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        _profile(project, [f"allow tcp 127.0.0.1 {port} in"])
        project.file("client.py", CLIENT)
        check = project.run("check", "--provider", provider)
        assert check.returncode == 125, check.stdout
        assert f".pysb.yaml:4: rule 'allow tcp 127.0.0.1 {port} in': port {port}/tcp" in (
            check.stderr
        ), check.stderr
        assert "stop that program, or serve on another port" in check.stderr
        res = project.run("run", "--provider", provider, "client.py")
        assert res.returncode == 125, res.stderr
        assert f".pysb.yaml:4: rule 'allow tcp 127.0.0.1 {port} in': " in res.stderr, res.stderr
    finally:
        holder.close()
    check = project.run("check", "--provider", provider)  # the port is free again
    assert check.returncode == 0, check.stderr


def test_a_mount_unshare_cannot_build_is_refused_by_check_as_by_run(project: Project) -> None:
    """A renamed exposure onto / is beyond unshare's mount plan: check used to say valid."""
    require_provider("unshare")
    project.file("root/keep")
    project.profile("version: 1\nimports: [sys]\nfiles:\n  expose-ro: ['./root:/']\n")
    project.file("prog.py", "print('ran')\n")
    check = project.run("check", "--provider", "unshare")
    assert check.returncode == 125, check.stdout
    assert ".pysb.yaml:4: a renamed exposure onto '/'" in check.stderr, check.stderr
    assert "expose the directories the program needs" in check.stderr
    res = project.run("run", "--provider", "unshare", "prog.py")
    assert res.returncode == 125 and "ran" not in res.stdout, res.stderr


def test_pasta_port_specs_stay_below_its_buffer() -> None:
    from pysb_core.net.netns.usernet import PASTA_SPEC_BYTES, port_specs

    assert port_specs(["8000"]) == ["8000"]
    assert port_specs(["8001", "8002", "8004", "9000-9010", "9005-9020"]) == [
        "8001-8002,8004,9000-9020"
    ]
    specs = port_specs([str(1024 + 7 * i) for i in range(9000)])
    assert len(specs) > 1 and all(len(s) <= PASTA_SPEC_BYTES for s in specs)
    assert ",".join(specs).split(",") == [str(1024 + 7 * i) for i in range(9000)]
