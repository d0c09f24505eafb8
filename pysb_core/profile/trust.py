"""Trust in discovered profiles: the model of ``direnv allow`` and ``mise trust``.

A profile that pysb *finds* (``.pysb.yaml`` next to the script, in the package of the
module, in the working directory, or next to the module that calls ``sandboxes()``) was
not chosen by the user for this run: a program that an earlier run let write that
directory may have put it there, or rewritten one of the files it includes, to grant
itself what it likes on the next run. So a discovered profile is used only when the user
has trusted it *as it is now*: ``pysb trust PATH`` records the content digest of the
profile and of every file it includes; a run whose discovered profile (or any of its
files) is not recorded with exactly those bytes is refused (exit 125) with the commands
to review and trust it. Naming a profile (``--profile``, ``PYSB_PROFILE``,
``sandboxes(profile=...)``) is itself the act of trust; a learning run trusts the file it
writes.

The records live per user in ``${XDG_STATE_HOME:-~/.local/state}/pysb/trust/``, one
small text file per trusted profile, keyed by the profile's path. Like the caches of
:mod:`pysb_core.linux.statedir`, the directory is protected inside every sandbox (read-only),
and a record is believed only when it and its directory belong to this user and nobody
else can write them.

Digests are computed from the very bytes the loader parsed
(:attr:`pysb_core.profile.loader.ProfileFile.digest`), so a file swapped between the
check and the parse cannot slip through.
"""

from __future__ import annotations

import os
import stat

from pysb_core.errors import UntrustedProfileError
from pysb_core.linux.statedir import trust_dir, trusted
from pysb_core.profile.loader import DIGEST_ALGO as _ALGO
from pysb_core.profile.loader import blake2b, digest

TYPE_CHECKING = False  # imported by `pysb run` when a profile is discovered
if TYPE_CHECKING:
    from collections.abc import Mapping

    from pysb_core.policy import Policy

#: First line of every record; bump when the format changes (old records then mean nothing).
HEADER = "pysb-trust 1"


def profile_key(path: str) -> str:
    """The name a profile is trusted under: its directory's canonical path and its own
    name (a symlinked profile is keyed by the link, its files by their real paths)."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _record_file(store: str, key: str) -> str:
    name = blake2b(os.fsencode(key), digest_size=16).hexdigest()
    return os.path.join(store, name + ".trust")


# ---------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------


def _encode(key: str, files: Mapping[str, str]) -> bytes:
    lines = [HEADER, f"profile {key}"]
    lines += [f"file {files[path]} {path}" for path in sorted(files)]
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def _decode(data: bytes) -> tuple[str, dict[str, str]] | None:
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    if len(lines) < 3 or lines[0] != HEADER or not lines[1].startswith("profile "):
        return None
    key = lines[1][len("profile ") :]
    files: dict[str, str] = {}
    for line in lines[2:]:
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        dig, _, path = rest.partition(" ")
        if kind != "file" or not dig.startswith(_ALGO + ":") or not path:
            return None
        files[path] = dig
    return key, files


def _read(path: str) -> tuple[str, dict[str, str]] | None:
    """A record this user alone could have written, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not trusted("", st):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(1 << 20)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _decode(data)


def lookup(profile: str, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The files (real path -> digest) recorded when ``profile`` was trusted, or None."""
    store = trust_dir(environ)
    if store is None or not trusted(store):
        return None
    key = profile_key(profile)
    found = _read(_record_file(store, key))
    if found is None or found[0] != key:
        return None
    return found[1]


def record(profile: str, files: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str:
    """Trust ``profile`` with exactly ``files`` (real path -> digest); return the record's
    path. Raises :class:`UntrustedProfileError` when the store cannot be written safely."""
    store = trust_dir(environ)
    if store is None:
        raise UntrustedProfileError(
            "cannot trust a profile: neither XDG_STATE_HOME nor HOME names a directory "
            "for pysb's trust records"
        )
    key = profile_key(profile)
    if any("\n" in p for p in (key, *files)):
        raise UntrustedProfileError(f"cannot trust {key!r}: its path holds a newline")
    try:
        os.makedirs(store, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise UntrustedProfileError(f"cannot create {store}: {exc.strerror or exc}") from None
    if not trusted(store):
        raise UntrustedProfileError(
            f"cannot trust a profile: {store} is not owned by this user alone "
            "(another user can write it)"
        )
    target = _record_file(store, key)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_encode(key, files))
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise UntrustedProfileError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def revoke(profile: str, environ: Mapping[str, str] | None = None) -> bool:
    """Forget the trust of ``profile``; True when there was a record."""
    store = trust_dir(environ)
    if store is None:
        return False
    try:
        os.unlink(_record_file(store, profile_key(profile)))
    except FileNotFoundError:
        return False
    return True


def records(environ: Mapping[str, str] | None = None) -> list[tuple[str, dict[str, str]]]:
    """Every trusted profile (key, files), sorted by key."""
    store = trust_dir(environ)
    if store is None or not trusted(store):
        return []
    found = []
    try:
        names = os.listdir(store)
    except OSError:
        return []
    for name in names:
        if name.endswith(".trust"):
            rec = _read(os.path.join(store, name))
            if rec is not None:
                found.append(rec)
    return sorted(found)


# ---------------------------------------------------------------------------------------
# The decision
# ---------------------------------------------------------------------------------------


def changes(recorded: Mapping[str, str] | None, files: Mapping[str, str]) -> list[tuple[str, str]]:
    """What differs between a record and the files read now, as (path, how); empty when
    the files are exactly the trusted ones. ``recorded=None``: never trusted."""
    if recorded is None:
        return [("", "never trusted")]
    out = [(p, "changed") for p in files if p in recorded and recorded[p] != files[p]]
    out += [(p, "is new since the profile was trusted") for p in files if p not in recorded]
    out += [(p, "is no longer there or no longer included") for p in recorded if p not in files]
    return out


def require_trusted(
    profile: str, files: Mapping[str, str], environ: Mapping[str, str] | None, cwd: str
) -> None:
    """Refuse (:class:`UntrustedProfileError`, exit 125) a discovered ``profile`` whose
    files (real path -> digest of the bytes parsed) are not exactly the trusted ones."""
    found = changes(lookup(profile, environ), files)
    if not found:
        return
    shown = _shown(profile, cwd)
    if found[0][1] == "never trusted":
        head = (
            f"the profile {shown} was found, not named, and is not trusted: a program that "
            "could write its directory may have put it there"
        )
    else:
        what = "; ".join(f"{_shown(path, cwd)} {how}" for path, how in found)
        head = f"the profile {shown} has changed since it was trusted ({what})"
    quoted = _quote(shown)
    raise UntrustedProfileError(
        f"{head}\n"
        f"  review it:  pysb check --profile {quoted}\n"
        f"  trust it:   pysb trust {quoted}\n"
        f"  (or name it for one run: pysb run --profile {quoted} ...)"
    )


def _shown(path: str, cwd: str) -> str:
    """``path`` as the user would write it: relative to ``cwd`` when below it."""
    from pysb_core.profile.loader import display_path

    return display_path(path, cwd)


def _quote(path: str) -> str:
    import shlex

    return shlex.quote(path)


def require_trusted_policy(policy: Policy, environ: Mapping[str, str] | None) -> None:
    """:func:`require_trusted` for the discovered profile a policy was loaded from (the
    one call the pipeline makes where a discovered profile is loaded)."""
    if policy.profile_path is None:
        return  # nothing was found, so nothing to trust
    files = dict(zip(policy.profile_files, policy.profile_digests, strict=True))
    require_trusted(policy.profile_path, files, environ, policy.cwd)


def read_profile_files(profile: str, *, cwd: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The files of ``profile`` as they are now (real path -> digest), includes resolved
    as a run would; :class:`ProfileError` when the profile cannot be read or parsed."""
    from pysb_core.errors import ProfileError
    from pysb_core.profile.loader import load_files

    files, errors = load_files(profile, cwd=cwd, environ=environ)
    if errors:
        raise ProfileError(errors)
    return {pf.path: pf.digest for pf in files}


def trust_profile(profile: str, *, cwd: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Trust ``profile`` and its includes as they are now (``pysb trust``); return them."""
    files = read_profile_files(profile, cwd=cwd, environ=environ)
    record(profile, files, environ)
    return files


def trust_written(profile: str, data: bytes, *, cwd: str, environ: Mapping[str, str]) -> None:
    """Trust the profile a learning run has just written (``data``: its exact bytes);
    the files it includes are trusted as they are now. Never raises: the run is over,
    and the next one asks for ``pysb trust`` if this did not work."""
    from pysb_core.errors import SandboxError

    try:
        files = read_profile_files(profile, cwd=cwd, environ=environ)
        files[os.path.realpath(profile)] = digest(data)
        record(profile, files, environ)
    except SandboxError:
        pass


def untrusted_reason(policy: Policy, environ: Mapping[str, str] | None) -> str | None:
    """Why ``pysb run`` would refuse the discovered profile of ``policy``; None if trusted."""
    try:
        require_trusted_policy(policy, environ)
    except UntrustedProfileError as exc:
        return str(exc).splitlines()[0]
    return None
