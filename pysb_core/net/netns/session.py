"""The host side of a filtered namespace network: compile, load the filter, attach the helper.

Order matters and is what makes it fail closed::

    sandbox process created in its own user+net namespace, blocked before the program
    -> attach(pid):  1. nft ruleset loaded INTO that namespace (nft started in its user and
                        network namespaces with CAP_NET_ADMIN ambient: netns.enter), checked
                        by exit status
                     2. user-mode helper started; tap0 appears only now, already filtered
                     3. inbound ports forwarded
    -> caller releases the sandbox (the program starts)

If any step fails, :meth:`NetnsNetwork.attach` stops what it started and raises
:class:`SandboxError`; the caller must then kill the sandbox, which never ran the program.

Why one module: it is the ordered attach sequence written once (filter, helper, forwarded ports)
with the undo of each step in the same class; the fail-closed argument is only readable when
every step and its clean-up sit together. The helpers it starts live in :mod:`.usernet`, the
namespace entry in :mod:`.enter`.
"""

from __future__ import annotations

import os

from pysb_core.errors import ProviderUnavailableError, SandboxError

# Neither ``subprocess`` nor ``re`` at import: this module is on every unshare run, with
# or without network rules, and they are needed only to load a filter (``subprocess``
# brings ``locale``, ``re``, ``selectors``, ``signal``... : docs/performance.md, 2026-12-07).
TYPE_CHECKING = False  # no typing import: this module is on every unshare run
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from pysb_core.net.netfilter import CompiledNetwork, FilterTarget
    from pysb_core.net.netns.enter import SandboxNamespaces
    from pysb_core.net.netns.usernet import UserNet
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import NetworkRule

_SBIN = ":/usr/sbin:/sbin:/usr/bin:/bin"
#: The last ``(rules, pins, target)`` compiled, and its result: a large profile costs
#: seconds to compile, and ``pysb check`` asks twice (preflight, then describe).
_LAST_COMPILED: dict[object, CompiledNetwork] = {}


def _which(name: str) -> str | None:
    from pysb_core.launch.probecache import which

    return which(name, _SBIN)


class NetnsNetwork:
    """The network of one sandbox that has its own network namespace.

    ``enabled`` is false when no rule allows anything: the namespace then keeps only its own
    loopback and nothing here needs to run.
    """

    def __init__(
        self,
        rules: Iterable[NetworkRule],
        pins: Mapping[str, Sequence[str]] | None = None,
        *,
        helper: str | None = None,
    ) -> None:
        self.rules = tuple(rules)
        self.pins = {k: tuple(v) for k, v in (pins or {}).items()}
        self.enabled = any(r.action == "allow" for r in self.rules)
        self._helper_name = helper
        self._helper_cls: type[UserNet] | None = None
        self._compiled: CompiledNetwork | None = None
        self.helper: UserNet | None = None

    @classmethod
    def from_plan(cls, plan: LaunchPlan, *, helper: str | None = None) -> NetnsNetwork:
        return cls(plan.policy.network, plan.policy.pins, helper=helper)

    # -- what will be loaded -------------------------------------------------------------

    @property
    def helper_class(self) -> type[UserNet]:
        if self._helper_cls is None:
            from pysb_core.net.netns.usernet import choose_helper

            self._helper_cls = choose_helper(self._helper_name)
        return self._helper_cls

    @property
    def layout(self) -> FilterTarget:
        try:
            return self.helper_class.layout
        except ProviderUnavailableError:
            from pysb_core.net.netfilter.target import SLIRP4NETNS

            return SLIRP4NETNS

    @property
    def compiled(self) -> CompiledNetwork:
        if self._compiled is None:
            from pysb_core.net.netfilter.nft import compile_nft

            key = (compile_nft, self.rules, tuple(sorted(self.pins.items())), self.layout)
            if key in _LAST_COMPILED:
                self._compiled = _LAST_COMPILED[key]
            else:
                self._compiled = compile_nft(self.rules, self.pins, self.layout)
                _LAST_COMPILED.clear()  # `pysb check` compiles twice: keep the last one
                _LAST_COMPILED[key] = self._compiled
        return self._compiled

    def problems(self) -> list[tuple[str, str]]:
        """What is missing on this machine for these rules: ``[(reason, fix)]``."""
        if not self.enabled:
            return []
        out: list[tuple[str, str]] = []
        try:
            self.helper_class  # noqa: B018 - probing
        except ProviderUnavailableError as exc:
            from pysb_core.net.netns.usernet import INSTALL_HINT

            out.append((exc.reason, exc.fix or INSTALL_HINT))
        if self.backend is None:
            out.append(
                (
                    "network rules need nftables (nft), or iptables-restore, inside the namespace",
                    "apt-get install slirp4netns nftables",
                )
            )
        return out

    def check(self) -> None:
        """Raise :class:`ProviderUnavailableError` when the rules cannot be enforced here."""
        problems = self.problems()
        if problems:
            raise ProviderUnavailableError("; ".join(p[0] for p in problems), fix=problems[0][1])

    def describe(self) -> list[str]:
        """Human-readable lines for ``pysb check``: helper, forwards, then the ruleset."""
        if not self.enabled:
            return ["network: no allow rule -> own network namespace, loopback only"]
        c = self.compiled
        kind = "iptables" if self.backend == "iptables" else "nftables"
        lines = [f"network: own namespace + {self.layout.name} + {kind} (loaded before start)"]
        for protos, ports in c.host_loopback:
            lines.append(
                f"  host loopback reachable: {protos} 127.0.0.1 {','.join(str(p) for p in ports)}"
            )
        for fwd in c.inbound:
            lines.append(
                f"  inbound: host 127.0.0.1:{fwd.port}/{fwd.proto} -> sandbox port {fwd.port}"
            )
        lines.append(
            "  DNS: namespace resolver allowed (a rule allows a wide network)"
            if c.dns
            else "  DNS: none (names resolve only through the pinned /etc/hosts)"
        )
        lines += [f"  note: {n}" for n in c.notes]
        lines += ["  " + ln for ln in self.ruleset_text().rstrip().splitlines()]
        return lines

    # -- what a launch would find -------------------------------------------------------

    def preflight(self) -> None:
        """Do what :meth:`attach` will do, short of a sandbox: raise :class:`SandboxError`
        (``FILE:LINE`` of the rule first, and what to do) when it would fail here.

        The ruleset is loaded, input by input as at launch, into a throwaway user and
        network namespace of pysb's own (an unprivileged namespace: the narrowest socket
        buffer any launch meets), so it is the kernel's own checker that judges it; and
        each host port an ``in`` rule forwards must be free on the host's loopback (the
        helper binds it there). For ``pysb check`` (``Provider.preflight``)."""
        if not self.enabled:
            return
        self.check()
        from pysb_core.net.netns.enter import SandboxNamespaces, scratch_namespace

        try:
            with scratch_namespace() as pid, SandboxNamespaces(pid) as namespaces:
                self.load_filter(pid, namespaces=namespaces)
        except OSError as exc:
            raise SandboxError(
                f"cannot make a network namespace to check the network filter in: {exc}"
            ) from exc
        self._check_forwards()

    def _check_forwards(self) -> None:
        import socket

        for fwd in self.compiled.inbound:
            kind = socket.SOCK_STREAM if fwd.proto == "tcp" else socket.SOCK_DGRAM
            with socket.socket(socket.AF_INET, kind) as probe:
                if kind == socket.SOCK_STREAM:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("127.0.0.1", fwd.port))
                except OSError as exc:
                    rule = self._rule_forwarding(fwd.proto, fwd.port)
                    where = f"{rule.source}: rule '{rule}': " if rule is not None else ""
                    raise SandboxError(
                        f"{where}port {fwd.port}/{fwd.proto} of the host's loopback cannot "
                        f"be forwarded into the sandbox ({exc.strerror}: another program "
                        "holds it): stop that program, or serve on another port"
                    ) from exc

    def _with_rule(self, message: str) -> str:
        """``message`` of a helper that could not forward a port, after the line of the
        rule that asked for it (``FILE:LINE: rule '...': ``), when it names one."""
        for fwd in self.compiled.inbound:
            if f"127.0.0.1:{fwd.port}/{fwd.proto}" in message:
                rule = self._rule_forwarding(fwd.proto, fwd.port)
                if rule is not None:
                    return f"{rule.source}: rule '{rule}': {message}"
        return message

    def _rule_forwarding(self, proto: str, port: int) -> NetworkRule | None:
        for rule in self.rules:
            inbound = rule.action == "allow" and rule.direction in ("in", "any")
            if inbound and proto in rule.protocols and any(port in p for p in rule.ports):
                return rule
        return None

    # -- files for a sandbox with its own /etc --------------------------------------------

    def hosts_text(self) -> str:
        from pysb_core.linux.sysfiles import hosts_file_text

        return hosts_file_text(self.pins)

    def resolv_text(self) -> str:
        if self.enabled and self.compiled.dns:
            return f"# generated by pysb\nnameserver {self.layout.resolver}\n"
        return "# generated by pysb: no resolver; pinned names are in /etc/hosts\n"

    # -- runtime --------------------------------------------------------------------------

    def attach(self, pid: int, *, route_localnet_set: bool = False, checked: bool = False) -> None:
        """Filter, then connect, the network namespace of ``pid`` (see the module docstring).

        ``pid`` must already be inside its new user and network namespaces. Raises
        :class:`SandboxError` with nothing left running when any step fails.
        ``route_localnet_set``: the sandbox's own set-up sets ``route_localnet`` (before
        the program can start), so no shell is needed around ``nft``. ``checked``: the
        caller ran :meth:`check` already.
        """
        if not self.enabled:
            return
        if not checked:
            self.check()
        from pysb_core.net.netns.enter import SandboxNamespaces

        try:
            namespaces = SandboxNamespaces(pid)
        except OSError as exc:
            raise SandboxError(
                f"cannot open the sandbox's network namespace (the program was not started): {exc}"
            ) from exc
        with namespaces:
            self.load_filter(pid, route_localnet_set=route_localnet_set, namespaces=namespaces)
            self._start_helper(pid, namespaces)

    def _start_helper(self, pid: int, namespaces: SandboxNamespaces) -> None:
        from pysb_core.net.netns.usernet import Pasta

        c = self.compiled
        cls = self.helper_class
        kwargs: dict[str, object] = {}
        if cls is Pasta:
            ports: dict[str, list[str]] = {"tcp": [], "udp": []}
            for protos, rng in c.host_loopback:
                for proto in protos.split(","):
                    ports[proto] += [str(p) for p in rng if str(p) != "*"]
            kwargs["loopback_ports"] = ports
        helper = cls(dns=c.dns, host_loopback=bool(c.host_loopback), inbound=c.inbound, **kwargs)
        try:
            helper.start(pid, namespaces)
        except SandboxError as exc:
            raise SandboxError(self._with_rule(str(exc))) from exc
        self.helper = helper

    @property
    def backend(self) -> str | None:
        """``nft``, else ``iptables`` (iptables-restore and ip6tables-restore), else None."""
        if _which("nft"):
            return "nft"
        if _which("iptables-restore") and _which("ip6tables-restore"):
            return "iptables"
        return None

    def ruleset_text(self) -> str:
        """What :meth:`load_filter` loads, as text (for ``pysb check``)."""
        if self.backend == "iptables":
            from pysb_core.net.netfilter.iptables import compile_iptables

            v4, v6 = compile_iptables(self.rules, self.pins, self.layout)
            return f"# iptables-restore\n{v4}# ip6tables-restore\n{v6}"
        return self.compiled.ruleset

    @property
    def needs_route_localnet(self) -> bool:
        """Whether the filter DNATs to the user-mode network's gateway, which the kernel
        routes only with ``net.ipv4.conf.all.route_localnet=1`` in the namespace."""
        return self.compiled.nat

    def load_filter(
        self,
        pid: int,
        *,
        route_localnet_set: bool = False,
        namespaces: SandboxNamespaces | None = None,
    ) -> None:
        """Load the ruleset into the namespace of ``pid``; raise :class:`SandboxError` if not.

        ``nft`` is started alone in the sandbox's namespaces (:mod:`pysb_core.net.netns.enter`)
        once per input of the compiled ruleset (``CompiledNetwork.batches``: a large
        ruleset is several, :mod:`pysb_core.net.netfilter.ruleset`), in order; a shell only
        when ``route_localnet`` must be set first (``route_localnet_set`` false) or for the
        two iptables-restore commands. An input the kernel finds too long for one netlink
        batch is loaded in two halves (the batch was refused whole: nothing of it is in)."""
        from pysb_core.net.netns.enter import SandboxNamespaces

        backend = self.backend
        if backend is None:
            raise SandboxError(
                "cannot load the network filter: both nft and iptables-restore are missing "
                "(apt-get install nftables)"
            )
        owned = namespaces is None
        try:
            if namespaces is None:
                namespaces = SandboxNamespaces(pid)
            if backend == "nft":
                self._load_nft(namespaces, route_localnet_set)
            else:
                self._load_iptables(namespaces, route_localnet_set)
        except OSError as exc:
            raise SandboxError(
                "the network filter could not be loaded into the sandbox (the program was not "
                f"started): {exc}"
            ) from exc
        finally:
            if owned and namespaces is not None:
                namespaces.close()

    def _route_localnet_prefix(self, route_localnet_set: bool) -> str:
        if self.needs_route_localnet and not route_localnet_set:
            # 127.0.0.1 may only be routed out of tap0 (and accepted from it) with this on.
            return "echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet && "
        return ""

    def _load_nft(self, namespaces: SandboxNamespaces, route_localnet_set: bool) -> None:
        nft = str(_which("nft"))
        prefix = self._route_localnet_prefix(route_localnet_set)
        c = self.compiled
        pending = list(reversed(c.batches if len(c.batches) > 1 else [c.ruleset]))
        while pending:
            text = pending.pop()
            shell = ["/bin/sh", "-c", prefix + 'exec "$0" -f -'] if prefix else []
            argv = [*shell, nft] if prefix else [nft, "-f", "-"]
            returncode, err = _run_in(namespaces, argv, text.encode())
            if returncode == 0:
                prefix = ""  # set once
                continue
            lines = text.splitlines()
            if "Message too long" in err and len(lines) > 1 and not text.startswith("table"):
                half = len(lines) // 2
                pending += ["\n".join(lines[half:]) + "\n", "\n".join(lines[:half]) + "\n"]
                continue
            raise SandboxError(filter_error(err, returncode))

    def _load_iptables(self, namespaces: SandboxNamespaces, route_localnet_set: bool) -> None:
        """Both restores in one shell, each input in order (a large ruleset is several:
        the first makes the tables, the others append with ``--noflush``)."""
        import shlex
        import shutil
        import tempfile

        from pysb_core.net.netfilter.iptables import compile_iptables, split_restore

        v4, v6 = compile_iptables(self.rules, self.pins, self.layout)
        tmpdir = tempfile.mkdtemp(prefix="pysb-ipt-")
        try:
            steps = []
            for tool, text in (("iptables-restore", v4), ("ip6tables-restore", v6)):
                for i, part in enumerate(split_restore(text)):
                    path = os.path.join(tmpdir, f"{tool}.{i}")
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(part)
                    flag = " --noflush" if i else ""
                    steps.append(f"{shlex.quote(str(_which(tool)))}{flag} {shlex.quote(path)}")
            script = self._route_localnet_prefix(route_localnet_set) + " && ".join(steps)
            returncode, err = _run_in(namespaces, ["/bin/sh", "-c", script], b"")
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
        if returncode != 0:
            raise SandboxError(filter_error(err, returncode))

    def close(self) -> None:
        """Stop the user-mode helper (idempotent)."""
        helper, self.helper = self.helper, None
        if helper is not None:
            helper.stop()


def _run_in(namespaces: SandboxNamespaces, argv: list[str], stdin: bytes) -> tuple[int, str]:
    """Run ``argv`` in the sandbox's namespaces with ``CAP_NET_ADMIN``: (status, stderr).
    Raises :class:`OSError` (or a subprocess error, as one) when it cannot run or hangs."""
    import subprocess

    enter = namespaces.entering()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=enter,
        )
    except subprocess.SubprocessError as exc:
        raise OSError(str(exc)) from exc
    finally:
        enter.parent_done()  # type: ignore[attr-defined]
        namespaces.read_maps()
    try:
        _, stderr = proc.communicate(stdin, timeout=20)
    except subprocess.TimeoutExpired as exc:
        proc.kill()  # our own child, by PID
        proc.wait()
        raise OSError(f"{argv[0]} did not finish in 20 s") from exc
    return proc.returncode, stderr.decode(errors="replace").strip()


#: The profile line an nft statement's comment names (``comment "FILE:LINE: rule"``).
_COMMENT = r'comment "(?:\.\.\.)?([^"]*?:\d+): ([^"]*)"'


def filter_error(err: str, returncode: int) -> str:
    """One paragraph for a filter the kernel refused: the profile line the refused
    statement comes from first (its comment names it), then the kernel's words, then
    what to do."""
    import re

    where = ""
    found = re.search(_COMMENT, err)
    if found:
        where = f"{found.group(1)}: rule '{found.group(2)}': "
    first = err.splitlines()[0] if err else f"exit {returncode}"
    hint = ""
    if "Message too long" in err:
        hint = (
            " (one statement is larger than a netlink batch may be: split the rule's "
            "addresses or ports over several rules)"
        )
    elif found:
        hint = " (change or remove that rule; `pysb check` shows the ruleset)"
    return (
        f"{where}the network filter could not be loaded into the sandbox (the program was "
        f"not started): {first}{hint}"
    )
