"""Remember, across runs, that a provider's probe succeeded.

Some probes are only trustworthy when they try the real thing (bwrap creating its
namespaces, unshare likewise): a few milliseconds of every ``pysb run``. A success is kept
on disk, keyed by what could change the answer -- the binary (path, size, mtime), the
kernel release and the user -- and is re-probed when any of it changes. Failures are never
cached, so a fix takes effect at the next run. A stale success cannot weaken a sandbox:
the launch itself still fails (closed) if the kernel refuses what the probe promised.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence

from pysb_core.provider import ProviderStatus
from pysb_core.statedir import state_dir, trusted


def _cache_file(name: str) -> str | None:
    base = state_dir()
    return None if base is None else os.path.join(base, "probes", f"{name}.json")


def _key(binaries: Sequence[str]) -> list[object]:
    parts: list[object] = [os.uname().release, os.geteuid()]
    for path in binaries:
        st = os.stat(path)
        parts += [path, st.st_size, st.st_mtime_ns]
    return parts


def cached_probe(
    name: str, binaries: Sequence[str], probe: Callable[[], ProviderStatus]
) -> ProviderStatus:
    """``probe()``, or its remembered success for the same binaries, kernel and user."""
    path = _cache_file(name)
    try:
        key = _key(binaries)
    except OSError:
        return probe()
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                # A remembered binary path is run on the host: only an entry this user
                # alone could have written counts (pysb_core.statedir).
                if not (trusted(os.path.dirname(path)) and trusted("", os.fstat(f.fileno()))):
                    raise ValueError("untrusted probe cache entry")
                saved = json.load(f)
            details = saved.get("details", {})
            if details.get("binary", binaries[0] if binaries else None) not in (*binaries, None):
                raise ValueError("a cached binary that is not the probed one")
            if saved.get("key") == key:
                return ProviderStatus.ok(version=saved.get("version"), **saved.get("details", {}))
        except (OSError, ValueError, TypeError, AttributeError):
            pass
    status = probe()
    if status.available and path is not None:
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            tmp = f"{path}.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"key": key, "version": status.version, "details": status.details}, f)
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError):
            pass
    return status
