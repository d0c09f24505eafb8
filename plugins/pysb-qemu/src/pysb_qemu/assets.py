"""Guest assets: a PVH-bootable kernel and a base initramfs, built from Debian packages.

Nothing is downloaded. The kernel is the installed ``linux-image-amd64`` one (its bzImage
is xz-compressed; we keep the uncompressed ELF ``vmlinux`` inside, because QEMU can boot it
straight through the PVH entry point and skipping the in-guest xz decompression saves about
3 s under TCG). The base initramfs holds ``busybox-static``, the few kernel modules the
guest needs (virtio, 9p, virtio-serial; virtio-net and nftables for filtered networking) and
pysb's ``/init``. Both are cached under ``${XDG_CACHE_HOME:-~/.cache}/pysb/qemu/<key>/``;
the key hashes the kernel, busybox, the init template and this module's format version, so
an upgrade of any of them builds a fresh cache.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pysb_core.providerkit import ProviderUnavailableError
from pysb_qemu.cpio import CpioWriter

#: Bump when the layout of the cache or of the base archive changes.
FORMAT_VERSION = "3"

APT_FIX = "apt-get install qemu-system-x86 linux-image-amd64 busybox-static"

#: Loaded at every boot, in this order after dependency expansion (microvm = virtio-mmio).
CORE_MODULES = ("virtio_mmio", "9p", "9pnet_virtio", "virtio_console")
#: Loaded only when a network rule allows traffic: the NIC and the in-guest packet filter.
NET_MODULES = ("virtio_net", "nf_tables", "nft_ct", "nft_reject_inet")
#: Loaded only when a rule allows the host's loopback (127.0.0.1 in the guest is NATed to
#: slirp's 10.0.2.2, which is the host's 127.0.0.1).
NAT_MODULES = ("nft_chain_nat", "nft_nat", "nft_masq")

_XZ_MAGIC = b"\xfd7zXZ\x00"
_XEN_ELFNOTE_PHYS32_ENTRY = 0x12


@dataclass(frozen=True)
class Kernel:
    """An installed kernel: its version, compressed image and module tree."""

    version: str
    image: Path
    modules: Path


@dataclass(frozen=True)
class GuestAssets:
    """The cached files one boot needs."""

    key: str
    directory: Path
    vmlinux: Path  # the PVH ELF, or the bzImage itself when none could be extracted
    initrd: Path
    kernel_version: str
    pvh: bool = True


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pysb" / "qemu"


def init_template() -> str:
    """The guest ``/init`` script shipped with this package."""
    return resources.files("pysb_qemu").joinpath("guest_init.sh").read_text()


def _version_key(version: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", version)]


def find_kernel(boot: Path = Path("/boot"), lib_modules: Path = Path("/lib/modules")) -> Kernel:
    """Pick the newest installed generic kernel that has 9p modules.

    The ``cloud`` flavour is skipped: it is built without 9p. The host may run a different
    kernel (this one is only booted inside the VM), so ``uname -r`` is not consulted.
    """
    candidates = []
    for image in boot.glob("vmlinuz-*"):
        version = image.name.removeprefix("vmlinuz-")
        mods = lib_modules / version
        if (mods / "modules.dep").is_file() and (mods / "kernel/fs/9p/9p.ko").is_file():
            candidates.append(Kernel(version, image, mods))
    if not candidates:
        raise ProviderUnavailableError(
            "qemu: no installed Debian kernel with 9p modules (/boot/vmlinuz-* and "
            "/lib/modules/<version>/kernel/fs/9p/9p.ko)",
            fix=APT_FIX,
        )
    return max(candidates, key=lambda k: _version_key(k.version))


def find_busybox() -> Path:
    """The static busybox (a dynamic one would need the host's libc inside the initramfs)."""
    for path in ("/bin/busybox", "/usr/bin/busybox"):
        p = Path(path)
        if p.is_file() and _is_static_elf(p):
            return p
    raise ProviderUnavailableError("qemu: a static busybox is not installed", fix=APT_FIX)


def find_qemu() -> str:
    path = shutil.which("qemu-system-x86_64")
    if path is None:
        raise ProviderUnavailableError("qemu: qemu-system-x86_64 is not installed", fix=APT_FIX)
    return path


def _is_static_elf(path: Path) -> bool:
    """True for an ELF without a PT_INTERP program header."""
    with path.open("rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return False
        (phoff,) = struct.unpack_from("<Q", head, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(
        struct.unpack_from("<I", table, i * phentsize)[0] != 3  # PT_INTERP
        for i in range(phnum)
    )


# -- cache key ------------------------------------------------------------------------


def _file_identity(path: Path) -> list[object]:
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns, st.st_ino]


def cache_key(kernel: Kernel, busybox: Path, template: str) -> str:
    """Changes whenever the kernel, its modules, busybox or the init template change."""
    material = json.dumps(
        [
            FORMAT_VERSION,
            kernel.version,
            _file_identity(kernel.image),
            _file_identity(kernel.modules / "modules.dep"),
            _file_identity(busybox),
            hashlib.sha256(template.encode()).hexdigest(),
        ]
    )
    return hashlib.sha256(material.encode()).hexdigest()[:16]


# -- the kernel -----------------------------------------------------------------------


def extract_vmlinux(bzimage: bytes) -> bytes:
    """Return the ELF kernel embedded (xz-compressed) in a Debian bzImage."""
    at = bzimage.find(_XZ_MAGIC)
    if at < 0:
        raise ProviderUnavailableError(
            "qemu: the kernel image is not xz-compressed; cannot extract a PVH vmlinux",
            fix=APT_FIX,
        )
    elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(bzimage[at:])
    if elf[:4] != b"\x7fELF" or not has_pvh_note(elf):
        raise ProviderUnavailableError(
            "qemu: the kernel has no PVH entry point (CONFIG_PVH); cannot boot it directly",
            fix=APT_FIX,
        )
    return elf


def has_pvh_note(elf: bytes) -> bool:
    """True if an ELF64 PT_NOTE segment holds the ``Xen`` PHYS32_ENTRY note QEMU boots."""
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        base = phoff + i * phentsize
        (p_type,) = struct.unpack_from("<I", elf, base)
        if p_type != 4:  # PT_NOTE
            continue
        (offset,) = struct.unpack_from("<Q", elf, base + 8)
        (size,) = struct.unpack_from("<Q", elf, base + 32)
        pos, end = offset, offset + size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12 : pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == _XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


# -- modules --------------------------------------------------------------------------


def module_order(modules_dir: Path, wanted: tuple[str, ...]) -> list[tuple[str, Path]]:
    """Expand ``wanted`` with its dependencies (from ``modules.dep``), dependencies first."""
    deps: dict[str, tuple[Path, list[str]]] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        name = _module_name(path)
        deps[name] = (modules_dir / path, [_module_name(d) for d in rest.split()])
    order: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        if name not in deps:
            raise ProviderUnavailableError(
                f"qemu: kernel module {name} is missing from {modules_dir}", fix=APT_FIX
            )
        seen.add(name)
        for dep in deps[name][1]:
            visit(dep)
        order.append((name, deps[name][0]))

    for name in wanted:
        visit(name)
    return order


def _module_name(path: str) -> str:
    base = os.path.basename(path)
    for suffix in (".ko", ".ko.xz", ".ko.zst", ".ko.gz"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base.replace("-", "_")


# -- the base initramfs ---------------------------------------------------------------


def busybox_applets(busybox: Path) -> list[str]:
    out = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout
    # Never link the applet "busybox" itself: it would replace the binary (ELOOP at boot).
    return sorted({a for a in out.split() if a and a != "busybox" and "/" not in a})


def build_base_initramfs(kernel: Kernel, busybox: Path, template: str) -> bytes:
    """The per-kernel archive: busybox in /bb, modules in /modules, /init, mount points."""
    w = CpioWriter()
    for d in (
        "bb",
        "modules",
        "usr",
        "etc",
        "proc",
        "sys",
        "dev",
        "tmp",
        "run",
        "root",
        "mnt",
        "var",
        "pysb",
    ):
        w.add_dir(d)
    w.add_dir("var/tmp", 0o1777)
    w.add_file("bb/busybox", busybox.read_bytes(), 0o755)
    for applet in busybox_applets(busybox):
        w.add_symlink(f"bb/{applet}", "busybox")
    core = module_order(kernel.modules, CORE_MODULES)
    net = [m for m in module_order(kernel.modules, NET_MODULES) if m not in core]
    nat = [m for m in module_order(kernel.modules, NAT_MODULES) if m not in core + net]
    for name, path in [*core, *net, *nat]:
        data = path.read_bytes()
        if not path.name.endswith(".ko"):
            raise ProviderUnavailableError(
                f"qemu: compressed kernel modules are not supported ({path})", fix=APT_FIX
            )
        w.add_file(f"modules/{name}.ko", data)
    w.add_file("modules/core.order", "".join(f"{n}\n" for n, _ in core).encode())
    w.add_file("modules/net.order", "".join(f"{n}\n" for n, _ in net).encode())
    w.add_file("modules/nat.order", "".join(f"{n}\n" for n, _ in nat).encode())
    w.add_file("init", template.encode(), 0o755)
    w.add_file("pysb/empty", b"", 0o444)
    return w.finish()


# -- the cache ------------------------------------------------------------------------


def ensure_assets(*, progress: bool = True) -> GuestAssets:
    """Return the cached assets, building them first if needed (once per kernel/busybox)."""
    try:
        return _ensure_assets(progress)
    except PermissionError as exc:
        raise ProviderUnavailableError(
            f"qemu: cannot read or cache the guest kernel ({exc})",
            fix="make /boot/vmlinuz-* readable, or set XDG_CACHE_HOME to a writable directory",
        ) from exc


def _ensure_assets(progress: bool) -> GuestAssets:
    find_qemu()
    kernel = find_kernel()
    busybox = find_busybox()
    template = init_template()
    key = cache_key(kernel, busybox, template)
    directory = cache_root() / key

    def found() -> GuestAssets | None:
        for name, pvh in (("vmlinux", True), ("bzImage", False)):
            if (directory / "meta.json").is_file() and (directory / name).is_file():
                initrd = directory / "initrd.base"
                return GuestAssets(key, directory, directory / name, initrd, kernel.version, pvh)
        return None

    cached = found()
    if cached is not None:
        return cached
    if progress:
        print(
            f"pysb: building the qemu guest from kernel {kernel.version} and busybox "
            f"(first run only; cached in {directory})...",
            file=sys.stderr,
            flush=True,
        )
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=directory.parent))
    try:
        image = kernel.image.read_bytes()
        try:
            (scratch / "vmlinux").write_bytes(extract_vmlinux(image))
        except ProviderUnavailableError as exc:
            # Not xz (Ubuntu's zstd) or no PVH note: boot the bzImage itself. It works on
            # microvm, only slower (the guest decompresses it; about 3 s more under TCG).
            if progress:
                print(
                    f"pysb: {exc.reason}; booting the compressed kernel (slower)", file=sys.stderr
                )
            (scratch / "bzImage").write_bytes(image)
        (scratch / "initrd.base").write_bytes(build_base_initramfs(kernel, busybox, template))
        meta = {
            "kernel": kernel.version,
            "image": str(kernel.image),
            "busybox": str(busybox),
            "format": FORMAT_VERSION,
        }
        (scratch / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.rename(scratch, directory)
        except OSError:
            # Another pysb built the same key at the same time: theirs is as good as ours.
            if not (directory / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    prune_cache(directory.parent, keep=KEEP_CACHES)
    built = found()
    if built is None:
        raise ProviderUnavailableError(f"qemu: the guest cache {directory} is incomplete")
    return built


#: Cached guests kept (each about 70 MB): the newest few, for pysb versions side by side.
KEEP_CACHES = 3


def prune_cache(root: Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` most recently built guests; return what was removed."""
    built = sorted(
        (d for d in root.iterdir() if d.is_dir() and (d / "meta.json").is_file()),
        key=lambda d: (d / "meta.json").stat().st_mtime_ns,
        reverse=True,
    )
    for old in built[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return built[keep:]
