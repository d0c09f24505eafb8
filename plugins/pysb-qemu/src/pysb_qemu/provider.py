"""The ``qemu`` provider: the sandboxed interpreter runs in its own kernel, in a micro-VM.

The boundary is the VM: the guest sees only what is shared over virtio-9p (read-only
shares are read-only on the host), has no network device unless a rule allows traffic,
and talks to the host only through virtio-serial ports pysb created. See docs/qemu.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from pysb_core.providerkit import (
    Capability,
    ChildSetup,
    LaunchPlan,
    LaunchSpec,
    ProgramStart,
    Provider,
    ProviderStatus,
    ProviderUnavailableError,
    SandboxError,
    seccomp_child_setup,
    set_pre_exec,
    unknown_option,
)
from pysb_qemu import assets as assets_mod
from pysb_qemu import guest, netfilter, snapshot, started, vm
from pysb_qemu.qemubin import qemu_version

#: The provider kit this plugin is written against (:mod:`pysb_core.kitversion`).
PYSB_PROVIDERKIT = "1.7"

OPTION_KEYS = ("memory", "accel", "cpus")
ACCELS = ("auto", "kvm", "tcg")
NETWORK_CAPS = frozenset(
    {Capability.TCP_PORT, Capability.TCP_HOST, Capability.UDP_PORT, Capability.UDP_HOST}
)
SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "supervisor.py")


class QemuProvider(Provider):
    name = "qemu"
    description = "a QEMU micro-VM running its own kernel (host interpreter over virtio-9p)"
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
    install_hint = assets_mod.APT_FIX
    manages_process_limit = True  # a pids cgroup inside the guest
    private_tmp = "/tmp"  # the guest's own tmpfs (guest_init.sh)
    private_shm = "/dev/shm"  # the guest's own tmpfs, bounded like /tmp (guest_init.sh)
    private_pts = "/dev/pts"  # the guest kernel's devpts (guest_init.sh)

    # -- configuration -----------------------------------------------------------------

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> list[str]:
        problems = []
        for key, value in options.items():
            if key not in OPTION_KEYS:
                problems.append(unknown_option(key, tuple(OPTION_KEYS)))
            elif key == "memory":
                try:
                    mib = vm.parse_size_mib(value)
                except ValueError as exc:
                    problems.append(f"memory: {exc}")
                else:
                    if mib < vm.MIN_MEMORY_MIB:
                        problems.append(f"memory: at least {vm.MIN_MEMORY_MIB}M is needed")
            elif key == "accel" and value not in ACCELS:
                problems.append(f"accel: must be one of {', '.join(ACCELS)}, not {value!r}")
            elif key == "cpus" and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64
            ):
                problems.append(f"cpus: must be an integer from 1 to 64, not {value!r}")
        return problems

    # -- discovery ---------------------------------------------------------------------

    def probe(self) -> ProviderStatus:
        try:
            qemu = assets_mod.find_qemu()
            kernel = assets_mod.find_kernel()
            assets_mod.find_busybox()
        except ProviderUnavailableError as exc:
            return ProviderStatus.missing(exc.reason, fix=exc.fix)
        if not os.access(guest.SETPRIV, os.X_OK):
            return ProviderStatus.missing(
                f"qemu: {guest.SETPRIV} is missing", fix="apt-get install util-linux"
            )
        accel = vm.choose_accel(self._accel_option())
        return ProviderStatus.ok(
            qemu_version(qemu),
            kernel=kernel.version,
            accel=accel.name,
            accel_reason=accel.reason,
        )

    def enforced(self) -> frozenset[Capability]:
        """Without nft on the host (shared into the guest) network rules cannot be filtered:
        they are then not enforced, and pysb refuses a profile that has some (fail closed)."""
        if os.access("/usr/sbin/nft", os.X_OK):
            return self.capabilities
        return self.capabilities - NETWORK_CAPS

    def _accel_option(self) -> str:
        return str(self.options.get("accel", "auto"))

    def describe(self, plan: LaunchPlan) -> list[str]:
        try:
            kernel = assets_mod.find_kernel()
            accel = vm.choose_accel(self._accel_option())
        except ProviderUnavailableError as exc:
            return [f"qemu: unavailable: {exc.reason}"]
        try:
            layout = guest.plan_layout(plan, vm.max_shares(plan.policy.allows_network()))
        except SandboxError as exc:
            return [f"qemu: cannot start: {exc}"]
        lines = [
            f"qemu: kernel {kernel.version} (from {kernel.image}), accelerator {accel.reason}",
            f"qemu: {self._memory_mib(plan)} MiB RAM, {self._cpus()} vCPU(s), microvm machine",
        ]
        for s in layout.shares:
            where = s.guest if s.guest == s.host else f"{s.guest} (from {s.host})"
            lines.append(f"qemu: share {'rw' if s.writable else 'ro'} {where}  [{s.reason}]")
        lines += [f"qemu: hidden {kind} {path}" for kind, path in layout.hide]
        lines += [f"qemu: read-only {path}" for path in layout.protect]
        if plan.policy.allows_network():
            lines.append("qemu: network: user-mode (slirp) + nftables in the guest:")
            compiled = netfilter.compile_guest_filter(plan.policy)
            lines += [f"qemu:   {r}" for r in compiled.ruleset.splitlines()]
            lines += [f"qemu: note: {n}" for n in compiled.notes]
        else:
            lines.append("qemu: network: no network device")
        why = snapshot.unusable_for(accel.name, plan.policy.allows_network(), len(layout.shares))
        if why is None:
            lines.append(
                "qemu: start: restored from a snapshot of the booted guest (built at the first"
                " run; a failed restore boots)"
            )
        else:
            lines.append(f"qemu: start: boot ({why})")
        lines += layout.notes
        return lines

    # -- launch ------------------------------------------------------------------------

    def _cpus(self) -> int:
        return int(self.options.get("cpus", 1))

    def _memory_mib(self, plan: LaunchPlan) -> int:
        if "memory" in self.options:
            return vm.parse_size_mib(self.options["memory"])
        limit = plan.policy.limits.memory
        if limit is not None:
            # The VM only needs the program's limit plus the guest's own overhead.
            return max(vm.MIN_MEMORY_MIB, (limit >> 20) + vm.MEMORY_OVERHEAD_MIB)
        return vm.DEFAULT_MEMORY_MIB

    def build(
        self, plan: LaunchPlan, *, progress: bool = True, one_output: bool = False
    ) -> tuple[vm.VmSpec, bytes]:
        """Compute the VM and its per-run archive (payload fds are read: seal first).

        ``one_output``: the sandbox's stdout and stderr are one stream on the host (a
        terminal), so they travel through one port, in the order the program wrote them.
        """
        if not os.access(guest.SETPRIV, os.X_OK):
            raise ProviderUnavailableError(
                f"qemu: {guest.SETPRIV} is missing", fix="apt-get install util-linux"
            )
        accel = vm.choose_accel(self._accel_option())
        assets = assets_mod.ensure_assets(progress=progress)
        layout = guest.plan_layout(plan, vm.max_shares(plan.policy.allows_network()))
        spec = vm.VmSpec(
            assets,
            accel,
            memory_mib=self._memory_mib(plan),
            cpus=self._cpus(),
            shares=layout.shares,
        )
        spec.forward_fd(0, direction="in")
        spec.forward_fd(1, direction="out")
        if not one_output:
            spec.forward_fd(2, direction="out")
        for fd in plan.pass_fds:
            if fd in (0, 1, 2):
                continue
            spec.pass_fd(fd)
        network = None
        if plan.policy.allows_network():
            if not os.access("/usr/sbin/nft", os.X_OK):
                raise ProviderUnavailableError(
                    "qemu: network rules need nft to filter the guest's traffic",
                    fix="apt-get install nftables",
                )
            network = netfilter.compile_guest_filter(plan.policy)
            spec.network = True
            spec.hostfwd = [(f.proto, f.port) for f in network.inbound]
            for note in network.notes:
                plan.note(f"qemu: {note}")
        spec.check_devices()
        if snapshot.unusable(spec) is None:
            # The ports and shares take the snapshot's slot names; a boot uses them too.
            snapshot.assign_slots(spec, layout)
            spec.slotted = True
        plan.note(f"qemu: accelerator {accel.reason}")
        for note in layout.notes:
            plan.note(note)
        archive = guest.build_run_archive(
            plan,
            layout,
            spec.ports,
            spec.payloads,
            spec.marker,
            network.ruleset if network is not None else None,
            nat=network is not None and network.nat,
            stderr_joins_stdout=one_output,
        )
        return spec, archive

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        """The QEMU command line with placeholder fds (the real start is :meth:`launch`)."""
        spec, _ = self.build(plan, progress=False)
        argv = spec.qemu_argv(assets_mod.find_qemu())
        return LaunchSpec(argv=argv, env={}, cwd="/", pass_fds=[])

    def launch(self, plan: LaunchPlan, **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Start the supervisor (which starts QEMU) and return it: it is the program for
        pysb (exit status, signals, stdin/stdout/stderr from ``popen_kwargs``).

        Everything it needs travels as inherited fds: the initramfs and its configuration
        as memfds, one socketpair end per port for QEMU and one for the supervisor, the
        lifeline's read end. Nothing is written to disk; the lifeline's write end stays
        here until the plan's clean-ups.
        """
        debug = bool(os.environ.get("PYSB_QEMU_DEBUG"))
        times = [("launch", time.monotonic())] if debug else []
        filter_setup = seccomp_child_setup()  # inside the guest: its own kernel's vsock...
        if filter_setup is not None:
            plan.add_child_setup(filter_setup)
        # last: the wall-time clock starts when the program does (pysb_qemu.started)
        plan.add_child_setup(ChildSetup("pysb_qemu.started", "announce", {"fd": started.FD}))
        plan.seal()
        spec, archive = self.build(plan, one_output=_one_output(popen_kwargs))
        if debug:
            times.append(("guest archive built", time.monotonic()))
        qemu = assets_mod.find_qemu()
        snap = None
        if spec.slotted:
            snap = snapshot.ensure(spec, qemu, qemu_version(qemu), _debug_log if debug else _quiet)
            if debug:
                times.append(("snapshot found" if snap else "no snapshot", time.monotonic()))
        names = [p.name for p in spec.ports]
        pairs = vm.socketpairs(["console", *names, *(["ctl_snap"] if snap else [])])
        opened: list[int] = []
        try:
            initrd_fd = os.memfd_create("pysb-initrd", os.MFD_CLOEXEC)
            opened.append(initrd_fd)
            _write_all(initrd_fd, spec.assets.initrd.read_bytes())
            _write_all(initrd_fd, archive)
            chardev_fds = {n: pair[1].fileno() for n, pair in pairs.items() if n != "ctl_snap"}
            argv = spec.qemu_argv(qemu, chardev_fds, initrd=f"/proc/self/fd/{initrd_fd}")
            lifeline_r, lifeline_w = os.pipe2(os.O_CLOEXEC)
            opened.append(lifeline_r)
            started_r, started_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            opened.append(started_w)
            ports_cfg = [
                {
                    "name": p.name,
                    "guest_fd": p.guest_fd,
                    "direction": p.direction,
                    "host_fd": p.host_fd,
                    "sock_fd": pairs[p.name][0].fileno(),
                }
                for p in spec.ports
                if p.name != "ctl"
            ]
            config = {
                "qemu_argv": argv,
                "qemu_fds": [initrd_fd, *chardev_fds.values()],
                "ctl_fd": pairs["ctl"][0].fileno(),
                "console_fd": pairs["console"][0].fileno(),
                "ports": ports_cfg,
                "marker": spec.marker,
                "lifeline_fd": lifeline_r,
                "started_fd": started_w,
                "debug": debug,
                # PYSB_QEMU_DEBUG: host phases, printed by the supervisor (CLOCK_MONOTONIC)
                "debug_times": times,
            }
            if snap is not None:
                try:
                    config["snapshot"] = snapshot.restore_config(
                        spec, qemu, snap, archive, pairs, opened
                    )
                except OSError:  # removed since it was found (a concurrent prune): boot
                    snap = None
            config_fd = os.memfd_create("pysb-qemu-config", os.MFD_CLOEXEC)
            opened.append(config_fd)
            _write_all(config_fd, json.dumps(config).encode())
            os.lseek(config_fd, 0, os.SEEK_SET)
            inherit = {
                *(snapshot.restore_fds(config["snapshot"]) if snap is not None else ()),
                config_fd,
                lifeline_r,
                started_w,
                initrd_fd,
                *chardev_fds.values(),
                *(pair[0].fileno() for pair in pairs.values()),
                *(p.host_fd for p in spec.ports if p.host_fd not in (None, 0, 1, 2)),
            }
            set_pre_exec(popen_kwargs, plan)  # the plan's steps, then the caller's
            proc = subprocess.Popen(
                [sys.executable, "-S", "-E", "-s", SUPERVISOR, str(config_fd)],
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                cwd="/",
                pass_fds=sorted(fd for fd in inherit if fd is not None),
                **popen_kwargs,
            )
        except BaseException:
            if "lifeline_w" in locals():
                _close_quietly(lifeline_w)
            if "started_r" in locals():
                _close_quietly(started_r)
            raise
        finally:
            for fd in opened:
                os.close(fd)
            for a, b in pairs.values():
                a.close()
                b.close()
        proc.pysb_lifeline = lifeline_w  # type: ignore[attr-defined]
        plan.add_cleanup(lambda: _close_quietly(lifeline_w))
        # wall-time counts from the program's start in the guest, not from the VM's boot.
        start = ProgramStart(started_r)
        proc.pysb_program_started = start  # type: ignore[attr-defined]
        plan.add_cleanup(start.close)
        return proc


def _debug_log(message: str) -> None:
    """PYSB_QEMU_DEBUG: a host event on stderr, as the supervisor prints them."""
    with contextlib.suppress(OSError):
        os.write(2, f"pysb-host: {time.monotonic():.6f}: {message}\n".encode())


def _quiet(message: str) -> None:
    pass


def _one_output(popen_kwargs: Mapping[str, Any]) -> bool:
    """The supervisor's stdout and stderr (inherited: pysb's own) are the same terminal,
    where the program's two streams interleave as it writes them."""
    if popen_kwargs.get("stdout") is not None or popen_kwargs.get("stderr") is not None:
        return False
    try:
        return os.isatty(1) and os.path.samestat(os.fstat(1), os.fstat(2))
    except OSError:
        return False


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


__all__ = ["QemuProvider"]
