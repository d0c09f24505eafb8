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
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence

from pysb_core.errors import ProviderUnavailableError, SandboxError

TYPE_CHECKING = False  # no typing import: this module is on every unshare run
if TYPE_CHECKING:
    from pysb_core.net.netfilter import CompiledNetwork, FilterTarget
    from pysb_core.net.netns.enter import SandboxNamespaces
    from pysb_core.net.netns.usernet import UserNet
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import NetworkRule

_SBIN = ":/usr/sbin:/sbin:/usr/bin:/bin"


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

            self._compiled = compile_nft(self.rules, self.pins, self.layout)
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
        helper.start(pid, namespaces)
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
        when nothing else is needed; a shell only when ``route_localnet`` must be set first
        (``route_localnet_set`` false) or for the two iptables-restore commands."""
        c = self.compiled
        backend = self.backend
        if backend is None:
            raise SandboxError(
                "cannot load the network filter: both nft and iptables-restore are missing "
                "(apt-get install nftables)"
            )
        prefix = ""
        if self.needs_route_localnet and not route_localnet_set:
            # 127.0.0.1 may only be routed out of tap0 (and accepted from it) with this on.
            prefix = "echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet && "
        tmpdir = None
        stdin = b""
        script: str | None
        if backend == "nft":
            args = [str(_which("nft"))]
            stdin = c.ruleset.encode()
            if prefix:
                script = prefix + 'exec "$0" -f -'
            else:
                script = None  # nft alone
                args += ["-f", "-"]
        else:
            import tempfile

            from pysb_core.net.netfilter.iptables import compile_iptables

            v4, v6 = compile_iptables(self.rules, self.pins, self.layout)
            tmpdir = tempfile.mkdtemp(prefix="pysb-ipt-")
            files = []
            for name, text in (("v4", v4), ("v6", v6)):
                path = os.path.join(tmpdir, name)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                files.append(path)
            script = prefix + '"$0" "$2" && exec "$1" "$3"'
            args = [str(_which("iptables-restore")), str(_which("ip6tables-restore")), *files]
        argv = ["/bin/sh", "-c", script] if script is not None else []
        from pysb_core.net.netns.enter import SandboxNamespaces

        owned = namespaces is None
        try:
            if namespaces is None:
                namespaces = SandboxNamespaces(pid)
            enter = namespaces.entering()
            try:
                proc = subprocess.Popen(
                    [*argv, *args],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    preexec_fn=enter,
                )
            finally:
                enter.parent_done()  # type: ignore[attr-defined]
                namespaces.read_maps()
            try:
                _, stderr = proc.communicate(stdin, timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()  # our own child, by PID
                proc.wait()
                raise
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(
                "the network filter could not be loaded into the sandbox (the program was not "
                f"started): {exc}"
            ) from exc
        finally:
            if owned and namespaces is not None:
                namespaces.close()
            if tmpdir is not None:
                import shutil

                shutil.rmtree(tmpdir, ignore_errors=True)
        if proc.returncode != 0:
            err = stderr.decode(errors="replace").strip()
            raise SandboxError(
                f"the network filter could not be loaded into the sandbox (the program was not "
                f"started): {err or f'exit {proc.returncode}'}"
            )

    def close(self) -> None:
        """Stop the user-mode helper (idempotent)."""
        helper, self.helper = self.helper, None
        if helper is not None:
            helper.stop()
