"""The ``unshare`` provider: util-linux ``unshare`` namespaces, a root built from explicit
binds, and a kernel-filtered user-mode network.

``unshare --user --map-root-user --mount --net --ipc --uts --cgroup --pid`` execs
:mod:`pysb_unshare.nsinit` (standalone, run with ``-I -S``), which builds the root, becomes
the PID namespace's init and starts the program with no capabilities (see its docstring).
Network rules are enforced by :class:`pysb_core.net.netns.NetnsNetwork` (nftables inside the
namespace + slirp4netns/pasta), loaded before the program is released.

Why one module: it is the provider class (the plugin's entry point) and the host side of its
start-up hand-shake with :mod:`pysb_unshare.nsinit`: waiting for the namespaces, reading the
status pipe and raising the early errors are the same protocol and change with it; the root's
layout (:mod:`pysb_unshare.rootfs`) and the init already live in their own modules.
"""

from __future__ import annotations

import marshal
import os
import select
import sys
import time

from pysb_core.providerkit import (
    Capability,
    LaunchPlan,
    LaunchSpec,
    Provider,
    ProviderStatus,
    ProviderUnavailableError,
    SandboxError,
    memoize,
    seccomp_child_setup,
    seccomp_describe,
    set_pre_exec,
    start_process,
)

#: The provider kit this plugin is written against (:mod:`pysb_core.kitversion`).
PYSB_PROVIDERKIT = "1.7"

# Not ``subprocess`` (nor ``contextlib``) on the start path: it brings ``locale``, ``re``,
# ``selectors``, ``signal``, ``threading``... (~30 modules) for one fork and one exec;
# ``start_process`` starts ``unshare`` without it (docs/performance.md, 2026-12-07).
TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from typing import Any

    from pysb_core.providerkit import NetnsNetwork

__all__ = ["UnshareProvider"]

_HERE = os.path.dirname(os.path.abspath(__file__))
#: How the namespace init starts: imported (cached bytecode; compiling it costs ~8 ms),
#: standard library only, no site, no environment.
NSINIT_BOOT = f"import sys;sys.path.insert(0,{_HERE!r});import nsinit;nsinit.main()"
_SBIN = ":/usr/sbin:/sbin:/usr/bin:/bin"
_USERNS_FIX = (
    "allow unprivileged user namespaces: sysctl -w kernel.unprivileged_userns_clone=1 "
    "(Debian) or kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu); in a container "
    "run it with --privileged"
)
START_TIMEOUT = 15.0


def _which(name: str) -> str | None:
    from pysb_core.providerkit import which  # not shutil: it imports the compressors

    return which(name, _SBIN)


@memoize
def _network_tools() -> bool:
    """A user-mode network helper and nft are installed (a quick look, once per process:
    ``enforced()`` is asked six times a run; the layer's ``check()`` decides at launch)."""
    return bool((_which("slirp4netns") or _which("pasta")) and _which("nft"))


def _tempdir() -> str:
    """``tempfile.gettempdir()`` without importing ``tempfile`` (``random``, ``shutil``:
    ~2 ms): ``tempfile.tempdir`` if a caller set it, else the first writable directory
    among ``$TMPDIR``, ``$TEMP``, ``$TMP``, /tmp, /var/tmp, /usr/tmp."""
    chosen = getattr(sys.modules.get("tempfile"), "tempdir", None)
    if isinstance(chosen, str):
        return chosen
    names = [os.environ.get(v) for v in ("TMPDIR", "TEMP", "TMP")]
    for path in (*names, "/tmp", "/var/tmp", "/usr/tmp"):
        if path and os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK):
            return os.path.abspath(path)
    return os.getcwd()


def _staging_dir() -> str:
    """An empty directory the new root's tmpfs is mounted on (only inside the namespace)."""
    path = os.path.join(_tempdir(), f"pysb-unshare-root-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except PermissionError as exc:
        raise SandboxError(f"cannot create the staging directory {path}: {exc.strerror}") from None
    except FileExistsError:
        st = os.lstat(path)
        import stat

        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise SandboxError(f"{path} exists and is not a directory owned by us") from None
    return path


class UnshareProvider(Provider):
    name = "unshare"
    partial_pipes = True  # a local process: partial mode over two pipes
    description = (
        "util-linux unshare: user/mount/pid/net/ipc/uts namespaces, explicit binds, nftables"
    )
    capabilities = frozenset(
        {
            Capability.FILES,
            Capability.FILES_WRITE,
            Capability.IGNORE,
            Capability.RENAME,
            Capability.TCP_PORT,
            Capability.TCP_HOST,
            Capability.UDP_PORT,
            Capability.UDP_HOST,
            Capability.ENV,
            Capability.LIMITS,
        }
    )
    install_hint = "apt-get install util-linux slirp4netns nftables"
    #: ``limits: processes`` as root: the program joins the pids cgroup itself, from inside
    #: (``nsinit``), so that pysb's helpers in the namespace are not counted.
    manages_process_limit = True
    private_tmp = "/tmp"  # a tmpfs of its own (pysb_unshare.rootfs)
    private_shm = "/dev/shm"  # a tmpfs of its own, bounded like /tmp (pysb_unshare.rootfs)
    private_pts = "/dev/pts"  # a devpts instance of its own (pysb_unshare.rootfs)

    _probe_cache: dict[str, ProviderStatus] = {}

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = []
        for key, value in options.items():
            if key == "network-helper":
                if value not in ("slirp4netns", "pasta"):
                    problems.append(f"network-helper must be slirp4netns or pasta, not {value!r}")
            else:
                problems.append(
                    f"unknown option '{key}' for provider 'unshare' (known: network-helper)"
                )
        return problems

    # -- discovery ------------------------------------------------------------------

    def probe(self) -> ProviderStatus:
        cached = self._probe_cache.get("status")
        if cached is not None:
            return cached
        status = self._probe()
        self._probe_cache["status"] = status
        return status

    def _probe(self) -> ProviderStatus:
        unshare = _which("unshare")
        if unshare is None:
            return ProviderStatus.missing(
                "unshare is not installed", fix="apt-get install util-linux"
            )
        from pysb_core.providerkit import cached_probe

        status = cached_probe("unshare", [unshare], lambda: self._probe_namespaces(unshare))
        if not status.available:
            return status
        details: dict[str, Any] = {}
        net_tools = [t for t in ("slirp4netns", "pasta") if _which(t)]
        details["network-helper"] = net_tools[0] if net_tools else None
        details["nft"] = _which("nft")
        if not net_tools or not _which("nft"):
            details["network"] = (
                "network rules cannot be enforced until you run: "
                "apt-get install slirp4netns nftables"
            )
        return ProviderStatus.ok(None, **details)

    @staticmethod
    def _probe_namespaces(unshare: str) -> ProviderStatus:
        """Create the namespaces a launch needs, once (remembered across runs on success)."""
        import subprocess

        try:
            done = subprocess.run(
                [
                    unshare,
                    "--user",
                    "--map-root-user",
                    "--mount",
                    "--net",
                    "--pid",
                    "--fork",
                    "/bin/true",
                ],
                capture_output=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return ProviderStatus.missing(f"unshare cannot run: {exc}", fix=_USERNS_FIX)
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()
            low = err.lower()
            fix = _USERNS_FIX
            if "no space left" in low or "enospc" in low:  # the count limit, not a policy
                fix = "raise the user namespace limit: sysctl -w user.max_user_namespaces=15000"
            return ProviderStatus.missing(
                f"user namespaces are not permitted here ({err or done.returncode})", fix=fix
            )
        return ProviderStatus.ok()

    def enforced(self) -> frozenset[Capability]:
        """Network capabilities only when a helper and nft exist (else the rules would be
        unenforced and ``pysb check`` must say so)."""
        if _network_tools():
            return self.capabilities
        return self.capabilities - {
            Capability.TCP_PORT,
            Capability.TCP_HOST,
            Capability.UDP_PORT,
            Capability.UDP_HOST,
        }

    def network(self, plan: LaunchPlan) -> NetnsNetwork:
        from pysb_core.providerkit import NetnsNetwork

        return NetnsNetwork.from_plan(plan, helper=self.options.get("network-helper"))

    def preflight(self, plan: LaunchPlan) -> None:
        """What :meth:`launch` does before the sandbox exists: the network filter, loaded
        into a throwaway namespace (``NetnsNetwork.preflight``), and the mount plan."""
        from pysb_unshare.rootfs import build_ops

        net = self.network(plan)
        if net.enabled:
            net.preflight()
        boot = [p for p in plan.payload.get("sys_path", []) if isinstance(p, str)]
        build_ops(plan, hosts=net.hosts_text(), resolv=net.resolv_text(), extra_ro=boot)

    def describe(self, plan: LaunchPlan) -> list[str]:
        lines = [
            "namespaces: user (uid 0 mapped to you, no capabilities), mount, pid, net, ipc, "
            "uts, cgroup",
            "root: tmpfs with read-only /usr, /lib*, generated /etc (hosts, resolv.conf, passwd), "
            "/dev (null zero full random urandom tty, a devpts of its own), private /tmp and "
            "/dev/shm, fresh /proc",
            seccomp_describe(),
        ]
        for e in plan.exposures:
            if e.implicit:
                continue
            mode = "rw" if e.writable else "ro"
            where = e.path if not e.renamed else f"{e.path} -> {e.target}"
            lines.append(f"  bind {mode}: {where}")
        for h in plan.hidden:
            lines.append(f"  masked: {h}")
        try:
            net = self.network(plan)
            lines += [
                f"network: rules cannot be enforced here: {reason} (fix: {fix})"
                for reason, fix in net.problems()
            ]
            lines += net.describe()
        except ProviderUnavailableError as exc:
            lines.append(f"network: cannot be enforced: {exc}")
        return lines

    # -- launch ---------------------------------------------------------------------

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        """The host command (config travels separately, see :meth:`launch`)."""
        unshare = _which("unshare")
        if unshare is None:
            raise ProviderUnavailableError(
                "unshare is not installed", fix="apt-get install util-linux"
            )
        filter_setup = seccomp_child_setup()  # ptrace, vsock, TCP Fast Open... (own IPC ns)
        if filter_setup is not None:
            plan.add_child_setup(filter_setup)
        argv = [
            unshare,
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
            "--net",
            "--ipc",
            "--uts",
            "--cgroup",
            "--pid",
            "--",
            sys.executable,
            "-I",
            "-S",
            "-c",
            NSINIT_BOOT,
        ]
        return LaunchSpec(argv=argv, env={}, cwd="/", pass_fds=list(plan.pass_fds))

    def _config(
        self, plan: LaunchPlan, net: NetnsNetwork, fds: dict[str, int], cgroup: str | None
    ) -> bytes:
        from pysb_unshare.rootfs import build_ops

        boot = [p for p in plan.payload.get("sys_path", []) if isinstance(p, str)]
        ops = build_ops(plan, hosts=net.hosts_text(), resolv=net.resolv_text(), extra_ro=boot)
        cfg = {
            "root": _staging_dir(),
            "ops": ops,
            "argv": list(plan.argv),
            "env": dict(plan.env),
            "cwd": plan.cwd,
            "pass_fds": list(plan.pass_fds),
            "network": net.enabled,
            "hostname": "sandbox",
            "ctl_fd": fds["ctl"],
            "status_fd": fds["status"],
            "trace": bool(os.environ.get("PYSB_UNSHARE_TRACE")),
            "cgroup_procs": cgroup,
        }
        if net.enabled and net.needs_route_localnet:
            cfg["route_localnet"] = True  # set by the init itself: no shell around nft
        return marshal.dumps(cfg)

    def launch(self, plan: LaunchPlan, **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Start the namespaces, filter and attach the network, release the program.

        Returns once the program has been exec'd inside; raises :class:`SandboxError` (with
        nothing left running) if any step before that failed.
        """
        net = self.network(plan)
        if net.enabled:
            net.check()
        cgroup = self.pids_cgroup(plan)
        spec = self.prepare(plan)
        plan.cleanups.extend(spec.cleanups)
        plan.seal()
        ctl_r, ctl_w = os.pipe()
        status_r, status_w = os.pipe()
        cfg_fd = os.memfd_create("pysb-unshare", 0)
        proc: subprocess.Popen[bytes] | None = None
        try:
            data = self._config(
                plan, net, {"ctl": ctl_r, "status": status_w}, cgroup.procs if cgroup else None
            )
            os.write(cfg_fd, data)
            os.lseek(cfg_fd, 0, os.SEEK_SET)
            argv = [*spec.argv, str(cfg_fd)]
            set_pre_exec(popen_kwargs, plan)
            proc = start_process(  # a light Process, or a Popen when the kwargs need one
                argv,
                env=spec.env,
                cwd=spec.cwd,
                pass_fds=(*spec.pass_fds, cfg_fd, ctl_r, status_w),
                **popen_kwargs,
            )
            for fd in (cfg_fd, ctl_r, status_w):
                os.close(fd)
            cfg_fd = ctl_r = status_w = -1
            if net.enabled:
                # The filter and the user-mode network go in while the init's interpreter
                # starts; the program is released ("G") only after both, and after the
                # init is ready ("R": loopback up, route_localnet set).
                _wait_for_namespaces(proc)
                try:
                    net.attach(proc.pid, route_localnet_set=True, checked=True)
                except SandboxError:
                    _raise_early_error(status_r, proc)
                    raise
                ready = _read_status(status_r, proc)
                if ready != b"R":
                    if ready == b"E":
                        early = _read_status(status_r, proc, until_eof=True)
                        raise SandboxError(early.decode(errors="replace").strip())
                    raise SandboxError("unshare: the sandbox did not start its namespaces")
            os.write(ctl_w, b"G")
            answer = _read_status(status_r, proc, until_eof=True)
            if not answer.startswith(b"S"):
                msg = answer[1:].decode(errors="replace").strip() if answer else ""
                raise SandboxError(
                    msg or f"unshare: the sandbox exited ({proc.poll()}) before the program started"
                )
        except BaseException:
            _close(ctl_w)
            if proc is not None and proc.poll() is None:
                proc.kill()  # our own child, by PID; the PID namespace dies with it
            if proc is not None:
                proc.wait()
            net.close()
            raise
        finally:
            for fd in (cfg_fd, ctl_r, status_w, status_r):
                if fd >= 0:
                    _close(fd)

        def cleanup() -> None:
            _close(ctl_w)
            net.close()

        plan.add_cleanup(cleanup)
        # The program is in a session of its own (nsinit: no TIOCSTI into the user's
        # shell), so it can never be in the terminal's foreground group: pysb keeps the
        # terminal and forwards a Ctrl-C (pysb_core.launch.execute, pysb_core.launch.jobcontrol).
        proc.pysb_own_session = True  # type: ignore[attr-defined]
        return proc


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _wait_for_namespaces(proc: subprocess.Popen[bytes]) -> None:
    """Return once ``unshare`` has made the namespaces and written the id maps (it then
    execs the init), so that nsenter and slirp4netns can join them -- long before the
    init's interpreter is up."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            if os.readlink(f"/proc/{proc.pid}/ns/net") != own:
                # Read through the new user namespace: empty until unshare writes the maps.
                with open(f"/proc/{proc.pid}/uid_map") as u, open(f"/proc/{proc.pid}/gid_map") as g:
                    if u.read().strip() and g.read().strip():
                        return
        except OSError:
            pass
        if proc.poll() is not None:
            raise SandboxError(f"unshare exited ({proc.returncode}) before making its namespaces")
        if time.monotonic() > deadline:
            raise SandboxError("unshare: the namespaces were not made in time")
        time.sleep(0.0002)


def _raise_early_error(fd: int, proc: subprocess.Popen[bytes]) -> None:
    """If the init already failed and said why ("E..."), raise that rather than the error
    of a step that could not join its namespaces."""
    if proc.poll() is None:
        return
    answer = _read_status(fd, proc, until_eof=True)
    if answer.startswith(b"E"):
        raise SandboxError(answer[1:].decode(errors="replace").strip())


def _read_status(fd: int, proc: subprocess.Popen[bytes], *, until_eof: bool = False) -> bytes:
    """Read one status message from the sandbox (1 byte, or everything until EOF)."""
    deadline = time.monotonic() + START_TIMEOUT
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxError("unshare: the sandbox did not start in time")
        ready, _, _ = select.select([fd], [], [], min(left, 0.1))
        if not ready:
            if proc.poll() is not None:
                ready, _, _ = select.select([fd], [], [], 0)
                if not ready:
                    return data
            continue
        chunk = os.read(fd, 1 if not until_eof else 4096)
        if not chunk:
            return data
        data += chunk
        if not until_eof:
            return data
