"""One micro-VM: the QEMU command line, the accelerator choice and the fd forwarding.

A VM has no inherited file descriptors, so every host fd the program must see becomes a
virtio-serial port: QEMU gets one end of a ``socketpair`` as the port's chardev
(``-chardev socket,fd=N``: no socket file, nothing to clean up), and the supervisor
(supervisor.py) relays bytes between the other end and the host fd. Inside, ``/init`` opens
the port by name and puts it on the same fd number before exec'ing the program.

:meth:`VmSpec.forward_fd` is the generic entry point: stdin/stdout/stderr, the report
channel (a write pipe), and partial mode's inherited Unix socket (bidirectional) all go
through it. Regular files that are readable (the bootstrap's JSON payload, a memfd) are
copied into the per-run initramfs instead and re-opened read-only on the same number.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import socket
import stat
from dataclasses import dataclass, field

from pysb_core.providerkit import ProviderUnavailableError, SandboxError
from pysb_qemu.assets import GuestAssets
from pysb_qemu.guest import PORT_FD_BASE, Port, Share

KERNEL_CMDLINE = (
    "console=ttyS0 quiet panic=-1 cryptomgr.notests "
    "initcall_blacklist=crypto_kdf108_init,init_kprobe_trace rodata=off mitigations=off "
    "nowatchdog tsc=reliable no_timer_check audit=0 apparmor=0 security=none "
    "i8042.noaux i8042.nopnp 8250.nr_uarts=1 rdinit=/init"
)
#: virtio-mmio devices a microvm guest finds reliably (measured: 22 boot, 23 hang the
#: guest's 9p mounts, 25 are refused by QEMU). One is the serial device, one the NIC.
MAX_VIRTIO_DEVICES = 22


def max_shares(network: bool) -> int:
    """How many 9p shares fit beside the serial device (and the NIC, with ``network``)."""
    return MAX_VIRTIO_DEVICES - 1 - (1 if network else 0)


DEFAULT_MEMORY_MIB = 512
MIN_MEMORY_MIB = 192
#: Guest RAM kept on top of a ``limits.memory`` for the kernel, page cache and /init.
MEMORY_OVERHEAD_MIB = 160


@dataclass(frozen=True)
class Accel:
    """The accelerator in use and why (shown by ``describe()`` and as a plan note)."""

    name: str  # "kvm" or "tcg"
    reason: str

    def args(self) -> list[str]:
        if self.name == "kvm":
            # KVM first; if it cannot start the VM, QEMU falls back to TCG by itself.
            return ["-accel", "kvm", "-accel", "tcg", "-cpu", "max"]
        # -cpu max exposes RDRAND: the guest's CRNG is ready at once (saves ~1 s under TCG).
        return ["-accel", "tcg", "-cpu", "max"]


def kvm_status() -> tuple[bool, str]:
    """Whether /dev/kvm can run a stock kernel.

    /dev/kvm existing, even KVM_CREATE_VM succeeding, proves nothing: a ``kvm_pvm`` host
    (nested, no VMX/SVM) only runs PVM-enabled guests and hangs a Debian kernel. Only the
    hardware modules are trusted.
    """
    if not os.path.exists("/dev/kvm"):
        return False, "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not accessible to this user"
    for module in ("kvm_intel", "kvm_amd"):
        if os.path.isdir(f"/sys/module/{module}"):
            return True, f"/dev/kvm backed by {module}"
    others = [m for m in ("kvm_pvm",) if os.path.isdir(f"/sys/module/{m}")]
    what = (
        f"backed by {others[0]}, which only runs PVM guest kernels"
        if others
        else ("not backed by kvm_intel or kvm_amd")
    )
    return False, f"/dev/kvm is {what}"


def choose_accel(requested: str) -> Accel:
    usable, why = kvm_status()
    if requested == "tcg":
        return Accel("tcg", "TCG (accel: tcg requested)")
    if requested == "kvm":
        if not usable:
            raise ProviderUnavailableError(
                f"qemu: accel: kvm was requested but KVM is unusable ({why})",
                fix="use 'accel: auto' or 'accel: tcg' in providers.qemu",
            )
        return Accel("kvm", f"KVM ({why})")
    if usable:
        return Accel("kvm", f"KVM ({why}; TCG if it fails)")
    return Accel("tcg", f"TCG, software emulation ({why})")


def host_tsc_khz() -> int | None:
    """The host TSC rate: under TCG the guest's TSC runs at it, and microvm has no HPET or
    PM timer to calibrate against (without this about 1 boot in 6 hangs)."""
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^cpu MHz\s*:\s*([0-9.]+)", f.read(), re.M)
    except OSError:
        return None
    return int(float(m.group(1)) * 1000) if m else None


def parse_size_mib(value: object) -> int:
    """``512M``, ``2G``, ``1048576k`` or a number of bytes (int) to MiB."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return max(1, value >> 20)
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", str(value))
    if not m:
        raise ValueError(f"not a size: {value!r} (use e.g. 512M or 2G)")
    n = int(m.group(1))
    unit = m.group(2).lower()
    return {"k": max(1, n >> 10), "m": n, "g": n << 10, "": max(1, n >> 20)}[unit]


@dataclass(frozen=True)
class SlotSet:
    """A snapshot's fixed devices: ``ctl`` and ``ports`` data ports (``v0``...), ``shares``
    9p devices (tags ``p0``...); unused share slots point at ``empty_dir``, read-only."""

    ports: int
    shares: int
    empty_dir: str

    def port_names(self) -> list[str]:
        return ["ctl", *(f"v{i}" for i in range(self.ports))]

    def share_tags(self) -> list[str]:
        return [f"p{i}" for i in range(self.shares)]


@dataclass
class VmSpec:
    """Everything needed to start one VM; turned into argv by :meth:`qemu_argv`."""

    assets: GuestAssets
    accel: Accel
    memory_mib: int = DEFAULT_MEMORY_MIB
    cpus: int = 1
    shares: list[Share] = field(default_factory=list)
    ports: list[Port] = field(default_factory=list)
    payloads: dict[int, bytes] = field(default_factory=dict)
    network: bool = False
    #: (protocol, port): the host's 127.0.0.1:port forwarded to the guest's port.
    hostfwd: list[tuple[str, int]] = field(default_factory=list)
    marker: str = field(default_factory=lambda: f"<<pysb-eof-{secrets.token_hex(16)}>>")
    #: Ports and shares carry a snapshot's slot names (pysb_qemu.snapshot.assign_slots).
    slotted: bool = False

    def __post_init__(self) -> None:
        if not any(p.name == "ctl" for p in self.ports):
            self.ports.insert(0, Port("ctl", None, "ctl", None))

    def check_devices(self) -> None:
        """Fail before starting when the shares would not all get a virtio transport."""
        if len(self.shares) > max_shares(self.network):
            raise SandboxError(
                f"qemu: {len(self.shares)} separate directories would be shared with the VM; "
                f"at most {max_shares(self.network)} fit a microvm (small read-only ones are "
                "copied in, these are too large). "
                "Expose fewer, wider directories (a common parent), or use another provider."
            )

    # -- fd forwarding -------------------------------------------------------------

    def forward_fd(
        self, host_fd: int, guest_fd: int | None = None, direction: str | None = None
    ) -> Port:
        """Make host fd ``host_fd`` appear in the guest as ``guest_fd`` (default: same).

        The direction follows the fd: a socket is bidirectional (partial mode's channel),
        a pipe or tty end is read or written as it was opened. The port's bytes are relayed
        by the supervisor; end-of-file travels both ways (a host EOF closes the guest's
        reads; the guest's end is marked when the program has exited).
        """
        guest_fd = host_fd if guest_fd is None else guest_fd
        if not 0 <= guest_fd < PORT_FD_BASE:
            raise SandboxError(f"qemu: cannot map fd {guest_fd} (must be below {PORT_FD_BASE})")
        direction = direction or fd_direction(host_fd)
        port = Port(f"fd{guest_fd}", guest_fd, direction, host_fd)
        self.ports = [p for p in self.ports if p.guest_fd != guest_fd] + [port]
        return port

    def copy_fd(self, host_fd: int, guest_fd: int | None = None) -> None:
        """Snapshot a readable regular file (memfd) into the guest as a read-only fd."""
        guest_fd = host_fd if guest_fd is None else guest_fd
        if not 0 <= guest_fd < PORT_FD_BASE:
            raise SandboxError(f"qemu: cannot map fd {guest_fd} (must be below {PORT_FD_BASE})")
        chunks = []
        offset = 0
        while True:
            chunk = os.pread(host_fd, 1 << 20, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        self.payloads[guest_fd] = b"".join(chunks)

    def pass_fd(self, host_fd: int) -> None:
        """The provider's rule for an inherited fd: snapshot a readable file, else forward."""
        st = os.fstat(host_fd)
        if stat.S_ISREG(st.st_mode) and _accmode(host_fd) != os.O_WRONLY:
            self.copy_fd(host_fd)
        else:
            self.forward_fd(host_fd)

    # -- command line --------------------------------------------------------------

    def kernel_append(self) -> str:
        append = KERNEL_CMDLINE
        khz = host_tsc_khz()
        if khz and self.accel.name == "tcg":
            append += f" tsc_early_khz={khz}"
        return append

    def qemu_argv(
        self,
        qemu: str,
        chardev_fds: dict[str, int] | None = None,
        initrd: str = "INITRD",
        slots: SlotSet | None = None,
    ) -> list[str]:
        """The full QEMU command line. ``chardev_fds`` maps port names (and ``console``)
        to the QEMU-side socket fds; without it, placeholders (for ``describe()``).

        ``slots``: the fixed device set of a snapshot (pysb_qemu.snapshot): every port
        and share slot in slot order, the unused ones on a null chardev and an empty
        read-only directory, so that a snapshot taken with none of them in use restores
        into any run's devices.
        """
        fds = chardev_fds or {}
        append = self.kernel_append()
        argv = [
            qemu,
            *self.accel.args(),
            "-machine",
            "microvm",
            "-m",
            f"{self.memory_mib}M",
            "-smp",
            str(self.cpus),
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            # QEMU's own seccomp filter: a guest that escaped into QEMU could not exec,
            # fork, change its uid or use obsolete syscalls.
            "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            "-kernel",
            str(self.assets.vmlinux),
            "-initrd",
            initrd,
            "-append",
            append,
            "-chardev",
            f"socket,id=console,fd={fds.get('console', 'CONSOLE')}",
            "-serial",
            "chardev:console",
        ]
        # The serial device first: it must get a transport whatever the number of shares.
        argv += ["-device", "virtio-serial-device,max_ports=31"]
        ports: list[tuple[str, bool]] = [(p.name, True) for p in self.ports]
        shares: list[tuple[str, str, bool]] = [(s.tag, s.host, s.writable) for s in self.shares]
        if slots is not None:
            used_ports = {p.name for p in self.ports}
            ports = [(name, name in used_ports) for name in slots.port_names()]
            by_tag = {s.tag: s for s in self.shares}
            shares = [
                (tag, by_tag[tag].host, by_tag[tag].writable)
                if tag in by_tag
                else (tag, slots.empty_dir, False)
                for tag in slots.share_tags()
            ]
        for name, used in ports:
            chardev = f"socket,id=c_{name},fd={fds.get(name, f'<{name}>')}"
            argv += [
                "-chardev",
                chardev if used else f"null,id=c_{name}",
                "-device",
                f"virtserialport,chardev=c_{name},name={name}",
            ]
        for i, (tag, host, writable) in enumerate(shares):
            ro = ",readonly=on" if not writable else ""
            argv += [
                "-fsdev",
                f"local,id=fs{i},path={_qemu_escape(host)},security_model=none,multidevs=remap{ro}",
                "-device",
                f"virtio-9p-device,fsdev=fs{i},mount_tag={tag}",
            ]
        if self.network:
            netdev = "user,id=net0" + "".join(
                f",hostfwd={proto}:127.0.0.1:{port}-:{port}" for proto, port in self.hostfwd
            )
            argv += ["-netdev", netdev, "-device", "virtio-net-device,netdev=net0"]
        else:
            argv += ["-nic", "none"]
        return argv


def _qemu_escape(value: str) -> str:
    """QEMU option values escape a comma by doubling it."""
    return value.replace(",", ",,")


def _accmode(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE


def fd_direction(fd: int) -> str:
    """``in``, ``out`` or ``both`` for an inherited fd (sockets are always ``both``)."""
    st = os.fstat(fd)
    if stat.S_ISSOCK(st.st_mode):
        return "both"
    mode = _accmode(fd)
    if mode == os.O_RDONLY:
        return "in"
    if mode == os.O_WRONLY:
        return "out"
    return "both"


def socketpairs(names: list[str]) -> dict[str, tuple[socket.socket, socket.socket]]:
    """One (pysb side, QEMU side) stream socketpair per port, with large buffers."""
    pairs = {}
    for name in names:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        pairs[name] = (a, b)
    return pairs
