"""The private temporary directory every sandbox gets (SPEC §4 "temporary files").

A program may always write temporary files, without a rule, and they never outlive the
run nor meet another program's. Two shapes, chosen by the provider:

- a provider with a mount namespace that mounts a fresh tmpfs on ``/tmp``
  (:attr:`Provider.private_tmp` = ``"/tmp"``: bwrap, unshare, firejail, the qemu guest) gives the
  program ``/tmp`` itself: ``TMPDIR=/tmp``, and the file guard allows it without a rule;
- any other provider (subprocess, landlock) gets a fresh host directory made
  here (mode 0700, ``pysb-UID/PID-RANDOM`` in the host's temporary directory, where
  what a killed pysb left is collected), exposed read-write
  at its own path like an implicit exposure, named by ``TMPDIR``, and removed when the
  sandbox's clean-ups run.

Either way the exposure is *implicit*: ``pysb check`` does not list it, and a learning run
records nothing below it (the profile never holds a rule for it). Its size is bounded by
``limits: tmp`` (:meth:`pysb_core.policy.Limits.tmp_bytes`): the provider's tmpfs has that
size; a host directory is watched by pysb's parent (:mod:`pysb_core.launch.tmpwatch`).

A provider with a private ``/dev/shm`` (:attr:`Provider.private_shm`) gets the same
treatment there: :func:`shm_exposures` takes an exposure of the host's ``/dev/shm`` out of
what the provider mounts (its own tmpfs is that rule's meaning) and hands the guard an
implicit one. So does one with a devpts instance of its own (:attr:`Provider.private_pts`):
its pseudo-terminals are the sandbox's (none of the host's terminals is there), which
``os.openpty`` makes without any rule, so the guard lets the program open them by name too
(``os.ptsname``), and ``expose-rw: [/dev/pts]`` -- what subprocess and landlock need for
that, on the host's devpts -- means that instance (:func:`pts_exposures`).
"""

from __future__ import annotations

import os

from pysb_core.policy import Exposure

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from pysb_core.provider import Provider

#: The ``source`` of the exposure (what a denial or ``--verbose`` would name).
SOURCE = "<private temporary directory>"

#: A host directory made ahead for this run (by pysb_core.launch.prestart), which the
#: plan takes instead of making one, and removes with its other clean-ups from then on.
premade: list[str] = []
#: The host directory the last plan of this process got (read by pysb_core.launch.prestart).
last_made: list[str] = []


class PrivateTmp:
    """One sandbox's temporary directory: where the program sees it, and how it is made."""

    def __init__(self, inside: str, exposure: Exposure, host_dir: str | None) -> None:
        #: The path the program gets as ``TMPDIR``.
        self.inside = inside
        #: The implicit read-write exposure that lets the file guard allow it.
        self.exposure = exposure
        #: The host directory made for this sandbox (None: the provider's own tmpfs).
        self.host_dir = host_dir

    @property
    def provider_sees_it(self) -> bool:
        """Whether the provider must expose it (a host directory), or only the guard."""
        return self.host_dir is not None

    def cleanup(self) -> Callable[[], None]:
        """A clean-up that removes the host directory and everything the program left."""
        host_dir = self.host_dir

        def remove() -> None:
            if host_dir is None:
                return
            try:
                os.rmdir(host_dir)  # the common case: nothing left (no shutil import)
            except FileNotFoundError:
                pass
            except OSError:
                import shutil  # removes links, never what they point to

                shutil.rmtree(host_dir, ignore_errors=True)

        return remove


def make_private_tmp(
    provider: Provider, environ: Mapping[str, str], exposures: Iterable[Exposure] = ()
) -> PrivateTmp:
    """The temporary directory for one sandbox started by ``provider``.

    A profile that exposes ``/tmp`` itself, or all of ``/``, shows the host's ``/tmp`` (or
    may, depending on the provider): the program then gets a host directory of its own
    whatever the provider, never a ``/tmp`` the guard would allow without a rule.
    """
    inside = getattr(provider, "private_tmp", None)
    if inside and not any(e.target.rstrip("/") in ("", inside) for e in exposures):
        return PrivateTmp(inside, Exposure(inside, inside, True, SOURCE, True), None)
    # The interpreter started ahead (pysb_core.launch.prestart) was given one already: the
    # same kind of directory, made the same way, for this same run.
    host_dir = premade.pop() if premade else make_host_dir(environ)
    last_made[:] = [host_dir]
    return PrivateTmp(host_dir, Exposure(host_dir, host_dir, True, SOURCE, True), host_dir)


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


#: The ``source`` of the private ``/dev/shm``'s implicit exposure.
SHM_SOURCE = "<private /dev/shm>"


def shm_exposures(
    provider: Provider, exposures: list[Exposure]
) -> tuple[list[Exposure], Exposure | None]:
    """``(what the provider mounts, the guard's implicit exposure or None)`` for a provider
    with a private ``/dev/shm``: an exposure of that path at itself means the provider's
    own tmpfs (the rule landlock needs, so that one profile runs everywhere), never a bind
    of the host's shared one; a renamed exposure onto it is left for the provider to judge."""
    inside = getattr(provider, "private_shm", None)
    if not inside:
        return exposures, None
    kept = [e for e in exposures if not (e.target == inside and not e.renamed)]
    return kept, Exposure(inside, inside, True, SHM_SOURCE, True)


#: The ``source`` of the private ``/dev/pts``'s implicit exposure.
PTS_SOURCE = "<private /dev/pts>"


def pts_exposures(
    provider: Provider, exposures: list[Exposure]
) -> tuple[list[Exposure], Exposure | None]:
    """:func:`shm_exposures` for a provider's own devpts (:attr:`Provider.private_pts`): an
    exposure of that path at itself means the provider's instance, never a bind of the
    host's (this user's other terminals); the guard gets an implicit read-write one."""
    inside = getattr(provider, "private_pts", None)
    if not inside:
        return exposures, None
    kept = [e for e in exposures if not (e.target == inside and not e.renamed)]
    return kept, Exposure(inside, inside, True, PTS_SOURCE, True)
