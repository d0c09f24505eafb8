"""The seccomp filter, run through a small classic-BPF emulator (every path of it)."""

from __future__ import annotations

import errno
import struct

import pytest
from pysb_landlock import seccomp

ALLOW, EACCES, ENOSYS = "allow", "EACCES", "ENOSYS"
X86 = 0xC000003E
ARM = 0xC00000B7
NR = {"x86_64": {"socket": 41, "ioctl": 16, "uring": 425, "read": 0},
      "aarch64": {"socket": 198, "ioctl": 29, "uring": 425, "read": 63}}  # fmt: skip


def run(prog, nr, arch, *args):
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:
            acc &= k
        elif code == 0x15:
            pc += jt if acc == k else jf
        elif code == 0x35:
            pc += jt if acc >= k else jf
        elif code == 0x06:
            if k == 0x7FFF0000:
                return ALLOW
            assert k & 0xFFFF0000 == 0x00050000
            return {errno.EACCES: EACCES, errno.ENOSYS: ENOSYS}[k & 0xFFFF]
        else:
            raise AssertionError(f"unknown opcode {code:#x}")
        assert 0 <= pc < len(prog), "jumped out of the program"


@pytest.mark.parametrize("machine,arch", [("x86_64", X86), ("aarch64", ARM)])
@pytest.mark.parametrize("allow_udp", [False, True])
@pytest.mark.parametrize("allow_unix", [False, True])
def test_filter_decisions(machine, arch, allow_udp, allow_unix):
    prog = seccomp.build(machine, allow_udp=allow_udp, allow_unix=allow_unix)
    nr = NR[machine]
    sock = nr["socket"]
    udp = ALLOW if allow_udp else EACCES
    unix = ALLOW if allow_unix else EACCES
    cases = [
        ((nr["read"], arch, 3, 0, 10), ALLOW),
        ((sock, arch, 1, 1, 0), unix),  # AF_UNIX stream (Landlock cannot mediate connect)
        ((sock, arch, 1, 2 | 0o2000000, 0), unix),  # AF_UNIX datagram, CLOEXEC
        ((sock, arch, 16, 3, 0), ALLOW),  # AF_NETLINK raw (route needs CAP_NET_ADMIN)
        ((sock, arch, 2, 1, 0), ALLOW),  # AF_INET stream, protocol 0
        ((sock, arch, 10, 1 | 0o2000000 | 0o4000, 6), ALLOW),  # AF_INET6 TCP, CLOEXEC|NONBLOCK
        ((sock, arch, 2, 1, 132), EACCES),  # SCTP
        ((sock, arch, 2, 1, 262), EACCES),  # MPTCP
        ((sock, arch, 2, 5, 132), EACCES),  # SCTP seqpacket
        ((sock, arch, 2, 3, 6), EACCES),  # raw
        ((sock, arch, 2, 2, 0), udp),  # UDP
        ((sock, arch, 10, 2 | 0o4000, 17), udp),
        ((sock, arch, 2, 2, 1), EACCES),  # ICMP ping socket
        ((nr["ioctl"], arch, 0, 0x5412), EACCES),  # TIOCSTI
        ((nr["ioctl"], arch, 0, 0x541C), EACCES),  # TIOCLINUX
        ((nr["ioctl"], arch, 0, 0x5401), ALLOW),  # TCGETS
        ((nr["uring"], arch, 8, 0), EACCES),
        ((sock, 0x40000003, 2, 2, 0), ENOSYS),  # i386 ABI
    ]
    if machine == "x86_64":
        cases.append(((0x40000000 | 41, arch, 2, 2, 0), ENOSYS))  # x32 ABI
    for (n, a, *args), expected in cases:
        assert run(prog, n, a, *args) == expected, (n, a, args)
