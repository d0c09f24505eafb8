"""A writer for the ``newc`` cpio format, the only format the kernel unpacks as an initramfs.

Written here (about thirty lines) rather than shelling out to ``cpio`` so that building the
guest needs no extra Debian package and so that per-run archives are produced in memory,
without a temporary file that a killed pysb could leave behind.
"""

from __future__ import annotations

import io
import stat

_TRAILER = "TRAILER!!!"


class CpioWriter:
    """Append entries to an in-memory ``newc`` archive; :meth:`finish` returns its bytes.

    Parent directories are not created implicitly: callers add them first (the kernel
    refuses to create a file in a directory that does not exist yet).
    """

    def __init__(self) -> None:
        self._buf = io.BytesIO()
        self._ino = 1
        self._finished = False

    def _entry(self, name: str, mode: int, data: bytes = b"", nlink: int = 1) -> None:
        if self._finished:
            raise RuntimeError("archive already finished")
        encoded = name.lstrip("/").encode() + b"\0"
        fields = [
            self._ino,  # ino
            mode,
            0,  # uid
            0,  # gid
            nlink,
            0,  # mtime: fixed, so identical inputs give identical archives
            len(data),
            0,  # devmajor
            0,  # devminor
            0,  # rdevmajor
            0,  # rdevminor
            len(encoded),
            0,  # check
        ]
        self._ino += 1
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        self._buf.write(header + encoded)
        self._pad()
        self._buf.write(data)
        self._pad()

    def _pad(self) -> None:
        self._buf.write(b"\0" * (-self._buf.tell() % 4))

    def add_dir(self, name: str, perm: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | perm, nlink=2)

    def add_file(self, name: str, data: bytes, perm: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | perm, data)

    def add_symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def finish(self) -> bytes:
        """Write the trailer and return the archive (padded to 512 bytes, as cpio does)."""
        if not self._finished:
            self._entry(_TRAILER, 0, nlink=1)
            self._buf.write(b"\0" * (-self._buf.tell() % 512))
            self._finished = True
        return self._buf.getvalue()
