"""pysb's own state directory on the host: the probe, profile and entry-point caches.

What is cached there changes what the *next* run does (a provider's binary, a parsed
profile), so a sandbox must never be able to write it, even one that exposes ``$HOME``
read-write: every run lists the directory among the plan's protected paths (read-only
inside, like the profile files), and the readers trust an entry only when the directory
and the file belong to this user and nobody else can write them.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping


def state_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """``${XDG_CACHE_HOME:-~/.cache}/pysb``; None when neither variable says where."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = env.get("HOME") or os.environ.get("HOME")
        if not home:
            return None
        base = os.path.join(home, ".cache")
    if not os.path.isabs(base):
        return None  # a relative cache path would move with the working directory
    return os.path.join(base, "pysb")


def trust_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """``${XDG_STATE_HOME:-~/.local/state}/pysb/trust``, where :mod:`pysb_core.profile.trust`
    keeps the profiles the user trusts (here: every run protects it, and need not import
    the trust module for its name); None when no absolute base is known."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or ""
    if not base:
        home = env.get("HOME") or ""
        if not home:
            return None
        base = os.path.join(home, ".local", "state")
    if not os.path.isabs(base):
        return None  # a relative path would move with the working directory
    return os.path.join(base, "pysb", "trust")


def ensure(path: str) -> str | None:
    """Create ``path`` (mode 0700) so that it can be protected; its canonical path, or None
    when it cannot be created or is not ours."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        real = os.path.realpath(path)
        return real if trusted(real) else None
    except OSError:
        return None


def trusted(path: str, st: os.stat_result | None = None) -> bool:
    """True when ``path`` (a file or directory) belongs to this user and no other user can
    write it: an entry anyone else could have written is never used."""
    try:
        st = os.stat(path) if st is None else st
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022
