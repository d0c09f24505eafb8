"""The host directory of a sandbox's private ``$TMPDIR`` (:mod:`pysb_core.launch.tmpdir` says
when a sandbox gets one and what it means), made here, apart: the interpreter ``pysb run``
starts ahead (:mod:`pysb_core.launch.prestart`) gets its directory before the profile is
read, so this imports nothing but ``os``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping

#: A host directory made ahead for this run (by pysb_core.launch.prestart), which the
#: plan takes instead of making one, and removes with its other clean-ups from then on.
premade: list[str] = []
#: The host directory the last plan of this process got (read by pysb_core.launch.prestart).
last_made: list[str] = []


def make_host_dir(environ: Mapping[str, str]) -> str:
    """A new private host directory for one sandbox (its canonical path)."""
    return os.path.realpath(_make_host_dir(environ))


def _make_host_dir(environ: Mapping[str, str]) -> str:
    """A new directory, mode 0700, for one sandbox: ``BASE/pysb-UID/PID-RANDOM`` in the
    host's temporary directory (as ``tempfile`` picks it, without importing it: ``pysb run``
    start-up is a budget). Directories left by a pysb that was killed (its PID gone) are
    removed on the way; where ``pysb-UID`` is not a private directory of this user (someone
    else made it first), the sandbox's directory goes straight into ``BASE``."""
    candidates = [environ.get(n) for n in ("TMPDIR", "TEMP", "TMP")] + ["/tmp", "/var/tmp"]
    for base in candidates:
        if not base or not os.path.isdir(base) or not os.access(base, os.W_OK | os.X_OK):
            continue
        parent = _private_parent(base)
        if parent is not None:
            _remove_stale(parent)
        where = parent or base
        # Short on purpose: a program's Unix socket paths below $TMPDIR (multiprocessing's
        # forkserver, tests binding sockets) have 108 bytes in all, and this name is the
        # only part a plain run has not.
        prefix = f"{os.getpid()}-" if parent else "pysb-tmp-"
        for _ in range(16):
            path = os.path.join(where, prefix + os.urandom(4).hex())
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue
            except OSError:
                break
            return path
    from pysb_core.errors import SandboxError

    raise SandboxError(
        "cannot create the sandbox's private temporary directory: no writable TMPDIR, "
        "/tmp or /var/tmp"
    )


def _private_parent(base: str) -> str | None:
    """``BASE/pysb-UID``, made if needed, when it is a real directory of this user that no
    one else can enter; else None."""
    import stat

    uid = os.getuid()
    path = os.path.join(base, f"pysb-{uid}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        return None
    return path


def _remove_stale(parent: str) -> None:
    """Remove what a pysb killed before its clean-ups left (``PID-*``, and the ``tmp-PID-*``
    of earlier versions, PID gone)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 2:
            continue
        pid = parts[1] if parts[0] == "tmp" and len(parts) >= 3 else parts[0]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        path = os.path.join(parent, name)
        try:
            os.rmdir(path)
        except OSError:
            import shutil  # removes links, never what they point to

            shutil.rmtree(path, ignore_errors=True)
