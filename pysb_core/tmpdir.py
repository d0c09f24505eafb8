"""The private temporary directory every sandbox gets (SPEC §4 "temporary files").

A program may always write temporary files, without a rule, and they never outlive the
run nor meet another program's. Two shapes, chosen by the provider:

- a provider with a mount namespace that mounts a fresh tmpfs on ``/tmp``
  (:attr:`Provider.private_tmp` = ``"/tmp"``: bwrap, unshare, the qemu guest) gives the
  program ``/tmp`` itself: ``TMPDIR=/tmp``, and the file guard allows it without a rule;
- any other provider (subprocess, landlock, firejail) gets a fresh host directory made
  here with ``mkdtemp`` (mode 0700, in the host's temporary directory), exposed read-write
  at its own path like an implicit exposure, named by ``TMPDIR``, and removed when the
  sandbox's clean-ups run.

Either way the exposure is *implicit*: ``pysb check`` does not list it, and a learning run
records nothing below it (the profile never holds a rule for it).
"""

from __future__ import annotations

import os

from pysb_core.policy import Exposure

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

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
            if host_dir is not None:
                import shutil

                shutil.rmtree(host_dir, ignore_errors=True)

        return remove


def make_private_tmp(provider: Provider, environ: Mapping[str, str]) -> PrivateTmp:
    """The temporary directory for one sandbox started by ``provider``."""
    inside = getattr(provider, "private_tmp", None)
    if inside:
        return PrivateTmp(inside, Exposure(inside, inside, True, SOURCE, True), None)
    import tempfile

    base = environ.get("TMPDIR") or None
    if base is not None and not os.path.isdir(base):
        base = None  # as tempfile does: a TMPDIR that is not a directory is passed over
    host_dir = os.path.realpath(tempfile.mkdtemp(prefix="pysb-tmp-", dir=base))
    return PrivateTmp(host_dir, Exposure(host_dir, host_dir, True, SOURCE, True), host_dir)
