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

from pysb_core.launch import tmphost
from pysb_core.policy import Exposure

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from pysb_core.provider import Provider

#: The ``source`` of the exposure (what a denial or ``--verbose`` would name).
SOURCE = "<private temporary directory>"


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
    host_dir = tmphost.premade.pop() if tmphost.premade else tmphost.make_host_dir(environ)
    tmphost.last_made[:] = [host_dir]
    return PrivateTmp(host_dir, Exposure(host_dir, host_dir, True, SOURCE, True), host_dir)


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
