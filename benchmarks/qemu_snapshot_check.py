"""Does a microvm snapshot restore into other host paths? (issue 30, item 4, step 1)

Boots this host's qemu guest kernel with a *test* /init and a fixed device set -- N
virtio-9p devices (tags ``s0``...) and M virtio-serial ports (``ctl``, ``p0``...) --
waits until /init has loaded the modules, found the ports and blocks reading ``ctl``
(no share mounted, no data port opened), and saves it with QMP ``migrate`` to a file.
Then restores it R times into QEMUs started with the same device ids but **other host
directories**, with ``readonly=on`` on every other share (alternating between runs), and
new socketpairs behind every port. Each restored guest mounts every share, reads its
``id`` file, tries to write, writes to every data port, and reads /dev/urandom before and
after an explicit CRNG reseed (pysb_qemu.reseed). Printed per restore: the time to a
running VM, to the guest's first answer, to the shares mounted, and each share's result,
checked against the host (which directory it showed; whether the write happened).

Usage: ``.venv/bin/python benchmarks/qemu_snapshot_check.py [-n 3] [--shares 20] [--ports 8]``.
Not a test: it prints figures and ``MISMATCH`` lines; pysb's own snapshot start is tested
in plugins/pysb-qemu/tests/test_snapshot.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pysb_qemu.assets import ensure_assets
from pysb_qemu.cpio import CpioWriter
from pysb_qemu.reseed import reseed_program
from pysb_qemu.vm import KERNEL_CMDLINE, host_tsc_khz

INIT = r"""#!/bb/sh
export PATH=/bb
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "/modules/$m.ko"; done < /modules/core.order
until [ "$(ls /sys/class/virtio-ports 2>/dev/null | wc -l)" -ge @NPORTS@ ]; do usleep 5000; done
sleep 0.2
for d in /sys/class/virtio-ports/*; do read -r n < $d/name; eval "P_$n=/dev/${d##*/}"; done
exec 250<>"$P_ctl"
sleep @SETTLE@
echo "ready" >&250
read -r cmd now seed <&250
r0=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$seed" > /dev/urandom; /reseed; rs=$?
r1=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
was=$(date +%s); date -s "@$now" > /dev/null
echo "got clock-was=$was r0=$r0 reseed-status=$rs r1=$r1" >&250
i=0
while [ $i -lt @NSHARES@ ]; do
  mkdir -p /mnt/s$i
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose "s$i" /mnt/s$i \
    || echo "mountfail s$i" >&250
  i=$((i+1))
done
echo "mounted" >&250
i=0
while [ $i -lt @NSHARES@ ]; do
  id=$(cat /mnt/s$i/id 2>&1)
  if echo w > /mnt/s$i/written 2>/dev/null; then w=ok; else w=refused; fi
  echo "share $i $id $w" >&250
  i=$((i+1))
done
for n in @PNAMES@; do eval "echo hello-$n > \$P_$n"; done
echo "done" >&250
poweroff -f
"""


class Qmp:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""
        self._read()
        self.cmd("qmp_capabilities")

    def _read(self) -> dict:  # type: ignore[type-arg]
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("QMP closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]

    def cmd(self, name: str, fds: list[int] | None = None, **args: object) -> dict:  # type: ignore[type-arg]
        msg = json.dumps({"execute": name, **({"arguments": args} if args else {})}).encode()
        if fds:
            socket.send_fds(self.sock, [msg + b"\n"], fds)
        else:
            self.sock.sendall(msg + b"\n")
        while "event" in (reply := self._read()):
            pass
        return reply


class Lab:
    def __init__(self, work: Path, shares: int, ports: int, settle: float = 0) -> None:
        self.work, self.nshares = work, shares
        self.ports = ["ctl", *(f"p{i}" for i in range(ports))]
        self.assets = ensure_assets()
        init = (
            INIT.replace("@NPORTS@", str(len(self.ports)))
            .replace("@NSHARES@", str(shares))
            .replace("@PNAMES@", " ".join(self.ports[1:]))
            .replace("@SETTLE@", str(settle))
        )
        w = CpioWriter()
        w.add_file("init", init.encode(), 0o755)
        w.add_file("reseed", reseed_program(), 0o755)
        self.initrd = work / "initrd"
        self.initrd.write_bytes(self.assets.initrd.read_bytes() + w.finish())

    def shares(self, tag: str, readonly: list[bool]) -> list[tuple[Path, bool]]:
        out = []
        for i, ro in enumerate(readonly):
            d = self.work / tag / f"s{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "id").write_text(f"{tag}-{i}")
            (d / "written").unlink(missing_ok=True)
            out.append((d, ro))
        return out

    def start(
        self, shares: list[tuple[Path, bool]], incoming: int | None = None
    ) -> tuple[subprocess.Popen[bytes], dict[str, socket.socket], float]:
        pairs = {n: socket.socketpair() for n in [*self.ports, "qmp", "console"]}
        fd = {n: p[1].fileno() for n, p in pairs.items()}
        argv = [
            *("qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-machine", "microvm"),
            *("-m", "512M", "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none"),
            "-no-reboot",
            "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            *("-kernel", str(self.assets.vmlinux), "-initrd", str(self.initrd)),
            *("-append", f"{KERNEL_CMDLINE} tsc_early_khz={host_tsc_khz()}"),
            *("-chardev", f"socket,id=console,fd={fd['console']}", "-serial", "chardev:console"),
            *("-chardev", f"socket,id=qmp,fd={fd['qmp']}", "-mon", "chardev=qmp,mode=control"),
            *("-device", "virtio-serial-device,max_ports=31"),
        ]
        for n in self.ports:
            argv += ["-chardev", f"socket,id=c_{n},fd={fd[n]}"]
            argv += ["-device", f"virtserialport,chardev=c_{n},name={n}"]
        for i, (path, ro) in enumerate(shares):
            opts = f"local,id=fs{i},path={path},security_model=none,multidevs=remap"
            argv += ["-fsdev", opts + (",readonly=on" if ro else "")]
            argv += ["-device", f"virtio-9p-device,fsdev=fs{i},mount_tag=s{i}"]
        argv += ["-nic", "none"]
        extra = []
        if incoming is not None:
            argv += ["-incoming", f"fd:{incoming}"]
            extra = [incoming]
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, pass_fds=[*fd.values(), *extra])
        for _, qemu_end in pairs.values():
            qemu_end.close()
        return proc, {n: p[0] for n, p in pairs.items()}, t0

    def save(self, path: Path) -> None:
        proc, socks, t0 = self.start(self.shares("save", [False] * self.nshares))
        line = socks["ctl"].makefile("rb").readline()
        t_ready = time.monotonic() - t0
        qmp = Qmp(socks["qmp"])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        qmp.cmd("getfd", fds=[fd], fdname="snap")
        os.close(fd)
        t1 = time.monotonic()
        qmp.cmd("migrate", uri="fd:snap")
        while qmp.cmd("query-migrate")["return"].get("status") not in ("completed", "failed"):
            time.sleep(0.02)
        print(
            f"save: guest {line.strip().decode()} {t_ready:.2f} s after QEMU's start; "
            f"migrate {time.monotonic() - t1:.2f} s, {path.stat().st_size / 1e6:.1f} MB"
        )
        qmp.cmd("quit")
        proc.wait()

    def restore(self, path: Path, tag: str, readonly: list[bool]) -> None:
        shares = self.shares(tag, readonly)
        fd = os.open(path, os.O_RDONLY)
        proc, socks, t0 = self.start(shares, incoming=fd)
        os.close(fd)
        qmp = Qmp(socks["qmp"])
        while qmp.cmd("query-status")["return"]["status"] != "running":
            time.sleep(0.005)
        t_run = time.monotonic() - t0
        socks["ctl"].sendall(f"go {round(time.time())} {os.urandom(32).hex()}\n".encode())
        ctl = socks["ctl"].makefile("rb")
        got = ctl.readline().decode().strip()
        t_got = time.monotonic() - t0
        mounted = ctl.readline().decode().strip()
        t_mounted = time.monotonic() - t0
        results = []
        while (line := ctl.readline().decode().strip()) not in ("done", ""):
            results.append(line)
        hello = {}
        for n in self.ports[1:]:
            ready, _, _ = select.select([socks[n]], [], [], 5)
            hello[n] = socks[n].recv(100).decode().strip() if ready else "(nothing)"
        proc.kill()
        proc.wait()
        print(
            f"restore {tag}: running {t_run:.3f} s, guest's answer {t_got:.3f} s, "
            f"{self.nshares} shares {mounted} {t_mounted:.3f} s (+{t_mounted - t_got:.3f} s); "
            f"host clock {round(time.time())}; {got}"
        )
        ok = 0
        for line in results:
            m = re.fullmatch(r"share (\d+) (\S+) (ok|refused)", line)
            if not m:
                print("  MISMATCH", line)
                continue
            i, seen, write = int(m.group(1)), m.group(2), m.group(3)
            path_i, ro = shares[i]
            written = (path_i / "written").exists()
            if seen != f"{tag}-{i}" or (write == "ok") == ro or written == ro:
                print(f"  MISMATCH share {i}: saw {seen}, write {write}, ro={ro}, host {written}")
            else:
                ok += 1
        bad = {n: v for n, v in hello.items() if v != f"hello-{n}"}
        print(
            f"  {ok}/{self.nshares} shares show this run's directory with this run's readonly "
            f"flag (ro on {sum(ro for _, ro in shares)}); ports: "
            + ("all answered" if not bad else f"MISMATCH {bad}")
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3, help="restores (default 3)")
    ap.add_argument("--shares", type=int, default=20)
    ap.add_argument("--ports", type=int, default=8, help="data ports beside ctl")
    ap.add_argument(
        "--settle",
        type=float,
        default=0,
        help="seconds the guest waits before the save (past ~120 s of uptime Linux 6.1 "
        "reseeds its CRNG only once a minute: r0, read before the reseed, then repeats)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pysb-snapshot-check-") as tmp:
        lab = Lab(Path(tmp), args.shares, args.ports, args.settle)
        snap = Path(tmp) / "snapshot.bin"
        lab.save(snap)
        for k in range(args.n):
            lab.restore(snap, f"run{k}", [(i + k) % 2 == 0 for i in range(args.shares)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
