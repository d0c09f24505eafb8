"""Network allow rules the way bwrap and unshare enforce them, for a root pysb.

The profile's rules mean the same on every provider (SPEC §4): ``allow tcp 127.0.0.1 P
out`` reaches the host's own service on port P, ``in`` lets the host reach a server bound
inside. firejail's own network (``--net=BRIDGE`` + ``--netfilter``) cannot give that: a
bridged namespace never reaches the host's loopback. So, when no bridge is configured,
pysb builds the network itself with the shared layer (:mod:`pysb_core.net.netns`) and firejail
runs in it:

1. a process of pysb's own (``sleep``) is started in a new network namespace with ``lo``
   up (:func:`pysb_firejail.netns.enter_new`);
2. ``NetnsNetwork.attach`` loads the nftables ruleset into that namespace, then attaches
   slirp4netns (or pasta) and the inbound forwards -- exactly what it does for bwrap and
   unshare; any failure raises (exit 125) before firejail is even started;
3. pysb keeps the namespace open (a descriptor) and stops the ``sleep`` (its own child,
   by PID);
4. firejail is started with no network option, after ``setns`` into that namespace
   between ``fork`` and ``exec`` (where a run without rules ``unshare``-s a new empty
   one: :mod:`pysb_firejail.netns`), and keeps it for the sandbox; the program's only
   way out is ``tap0``, filtered before it existed.

Only root can do this: the namespace is owned by the host's user namespace (firejail is
set-uid root and would not start in a user namespace of the user's making), and a normal
user cannot configure it. For a normal user such a profile is refused with that reason;
bwrap and unshare enforce the same rules without root.
"""

from __future__ import annotations

import os

from pysb_core.providerkit import ProviderUnavailableError, SandboxError, memoize

TYPE_CHECKING = False  # imported only by runs with network allow rules
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from pysb_core.providerkit import LaunchPlan

NOT_ROOT = (
    "firejail: network allow rules are enforced by a network namespace pysb builds and "
    "filters itself, which needs root with firejail (firejail is set-uid root: it cannot "
    "start in a user namespace of yours, and only root can configure the network "
    "namespace it runs in)"
)
NOT_ROOT_FIX = (
    "use the bwrap or unshare provider (same rules, no root needed), run pysb as root, or "
    "configure a host bridge for firejail's own filtering: providers: {firejail: {bridge: NAME}}"
)


@memoize
def layer_usable() -> bool:
    """nft and a user-mode network helper are installed (a quick look, once per process:
    ``enforced()`` asks it six times a run; the shared layer's own ``check()`` is the
    authority at launch)."""
    from pysb_core.providerkit import which

    have = lambda name: which(name, ":/usr/sbin:/sbin:/usr/bin:/bin") is not None  # noqa: E731
    return have("nft") and (have("slirp4netns") or have("pasta"))


def refusal_for_user(policy_rules: str) -> ProviderUnavailableError:
    return ProviderUnavailableError(
        f"{NOT_ROOT}; the profile allows network traffic ({policy_rules})", fix=NOT_ROOT_FIX
    )


class NamespaceNetwork:
    """The filtered network namespace of one launch, held open until :meth:`close`."""

    def __init__(self, net: Any) -> None:
        self.net = net  # pysb_core.net.netns.NetnsNetwork
        self.net_fd: int | None = None
        self.directory: str | None = None
        self.options: list[str] = []

    @classmethod
    def checked(cls, plan: LaunchPlan) -> NamespaceNetwork:
        """The network of ``plan``, its helpers checked (ProviderUnavailableError with the
        fix when nft or slirp4netns/pasta are missing); nothing started yet."""
        from pysb_core.providerkit import NetnsNetwork

        net = NetnsNetwork.from_plan(plan)
        net.check()
        self = cls(net)
        self._write_files(plan)
        return self

    def _write_files(self, plan: LaunchPlan) -> None:
        """``--hosts-file`` (the pinned names) and ``--dns`` (slirp's resolver, only when
        a rule allows a wide network): firejail copies them into the sandbox's /etc."""
        import tempfile

        self.directory = tempfile.mkdtemp(prefix="pysb-firejail-net-")
        hosts = plan.hosts_file if plan.hosts_file is not None else self.net.hosts_text()
        path = os.path.join(self.directory, "hosts")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(hosts)
        self.options = [f"--hosts-file={path}"]
        if self.net.compiled.dns:
            self.options.append(f"--dns={self.net.layout.resolver}")

    def describe(self) -> list[str]:
        return self.net.describe()

    def start(self) -> None:
        """Steps 1-3 of the module docstring; raises :class:`SandboxError` (nothing left
        running) when the namespace cannot be made, filtered or connected."""
        import shutil
        import subprocess  # only with network rules: not on the start path

        from pysb_firejail import netns

        sleep = shutil.which("sleep", path="/usr/bin:/bin") or "/bin/sleep"
        try:
            holder = subprocess.Popen(
                [sleep, "3600"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                preexec_fn=netns.enter_new(),
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(
                f"firejail: cannot make the sandbox's network namespace: {exc}"
            ) from exc
        try:
            self.net_fd = os.open(f"/proc/{holder.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            self.net.attach(holder.pid, checked=True)
        except BaseException:
            self.close()
            raise
        finally:
            holder.kill()  # our own child, by PID
            holder.wait()

    def enter_step(self) -> Callable[[], None]:
        """The ``preexec_fn`` step that puts firejail into the namespace."""
        from pysb_firejail.netns import setns_function

        assert self.net_fd is not None
        return setns_function(self.net_fd)

    def close(self) -> None:
        """Stop the helper, close the namespace, remove the files (idempotent)."""
        self.net.close()
        if self.net_fd is not None:
            os.close(self.net_fd)
            self.net_fd = None
        if self.directory is not None:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
