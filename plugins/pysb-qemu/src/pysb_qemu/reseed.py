"""A 174-byte static x86-64 program that reseeds the guest kernel's CRNG.

A VM restored from a snapshot resumes with the kernel CRNG state it had when the snapshot
was taken: every run restored from the same file would draw the same "random" bytes
(``os.urandom``, Python's hash seed, ASLR of new processes) until the kernel reseeds on
its own timer (Linux 6.1: up to 60 s). ``/init`` first writes fresh host entropy to
``/dev/urandom`` (mixed into the input pool), then runs this program, which asks the
kernel to rebuild the CRNG key from that pool at once (``ioctl(RNDRESEEDCRNG)``, root
only; the extraction also mixes RDRAND, which under TCG is the host's getrandom). Per-CPU
generators and the batched ``get_random_u32/u64`` pools follow the new generation on their
next use.

busybox has no applet for an ioctl and the guest has no compiler, so the program is
written here, byte by byte, and every instruction is listed beside its encoding:

    lea  rdi, [rip + path]   ; "/dev/urandom"
    xor  esi, esi            ; O_RDONLY
    mov  eax, 2              ; open
    syscall
    mov  edi, eax            ; the fd (a negative errno makes the ioctl fail: EBADF)
    mov  esi, 0x5207         ; RNDRESEEDCRNG = _IO('R', 0x07)
    xor  edx, edx
    mov  eax, 16             ; ioctl
    syscall
    mov  edi, eax            ; exit status: 0, or -errno (255 for EPERM, 247 for EBADF)
    mov  eax, 60             ; exit
    syscall

Its exit status is 0 only when the kernel reseeded. tests/test_snapshot.py runs it on the
host (as an unprivileged user it must fail with EPERM) and in the guest.
"""

from __future__ import annotations

import struct

_BASE = 0x400000
_HEADERS = 64 + 56  # one ELF header, one program header
RNDRESEEDCRNG = 0x5207


def _code() -> bytes:
    lea = b"\x48\x8d\x3d"  # lea rdi, [rip + disp32]
    body = b"".join(
        [
            b"\x31\xf6",  # xor esi, esi
            b"\xb8\x02\x00\x00\x00\x0f\x05",  # mov eax, 2; syscall
            b"\x89\xc7",  # mov edi, eax
            b"\xbe" + struct.pack("<I", RNDRESEEDCRNG),  # mov esi, RNDRESEEDCRNG
            b"\x31\xd2",  # xor edx, edx
            b"\xb8\x10\x00\x00\x00\x0f\x05",  # mov eax, 16; syscall
            b"\x89\xc7",  # mov edi, eax
            b"\xb8\x3c\x00\x00\x00\x0f\x05",  # mov eax, 60; syscall
        ]
    )
    # rip-relative: the displacement counts from the end of the lea (7 bytes).
    return lea + struct.pack("<i", len(body)) + body + b"/dev/urandom\0"


def reseed_program() -> bytes:
    """The ELF executable (one PT_LOAD segment, read + execute, no libc)."""
    code = _code()
    size = _HEADERS + len(code)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, SysV
    ehdr = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # ET_EXEC
        62,  # EM_X86_64
        1,  # EV_CURRENT
        _BASE + _HEADERS,  # entry
        64,  # program headers offset
        0,  # no section headers
        0,  # flags
        64,  # ELF header size
        56,  # program header size
        1,  # one program header
        0,
        0,
        0,
    )
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, _BASE, _BASE, size, size, 0x1000)  # PT_LOAD, R+X
    return ehdr + phdr + code
