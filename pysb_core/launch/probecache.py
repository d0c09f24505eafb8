"""Remember, across runs, that a provider's probe succeeded.

Some probes are only trustworthy when they try the real thing (bwrap creating its
namespaces, unshare likewise, Landlock asking the kernel for its ABI): milliseconds of
every ``pysb run``. A success is kept on disk, keyed by what could change the answer --
the binary (path, size, mtime), the kernel release, this boot (``boot_id``: boot
parameters such as the LSM list, and sysctls reset at boot) and the user -- and is
re-probed when any of it changes. Failures are never cached, so a fix takes effect at the
next run. A stale success cannot weaken a sandbox: the launch itself still fails (closed)
if the kernel refuses what the probe promised.

The file is a few lines of text read without ``json`` (an import of ~1 ms that the
parent would otherwise pay at every run for this file alone).
"""

from __future__ import annotations

import os

from pysb_core.linux.statedir import state_dir, trusted
from pysb_core.provider import ProviderStatus

TYPE_CHECKING = False  # read at every start under landlock: no collections at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_MAGIC = "pysb-probe 2"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def which(name: str, extra: str = "") -> str | None:
    """``shutil.which`` for a plain command name, without importing ``shutil`` (which
    pulls in the compression modules, ~1.5 ms): the first executable ``name`` on
    ``$PATH`` followed by ``extra`` (``:``-separated directories); a name with a ``/``
    is checked as it is."""

    def runnable(path: str) -> bool:
        return os.access(path, os.X_OK) and not os.path.isdir(path)

    if os.sep in name:
        return name if runnable(name) else None
    for directory in (os.environ.get("PATH", os.defpath) + extra).split(os.pathsep):
        path = os.path.join(directory or os.curdir, name)
        if runnable(path):
            return path
    return None


def _cache_file(name: str) -> str | None:
    base = state_dir()
    return None if base is None else os.path.join(base, "probes", f"{name}.txt")


def _key(binaries: Sequence[str]) -> str:
    with open(_BOOT_ID, "rb") as f:
        boot = f.read().strip().decode()
    parts: list[object] = [os.uname().release, boot, os.geteuid()]
    for path in binaries:
        st = os.stat(path)
        parts += [path, st.st_size, st.st_mtime_ns]
    return "\t".join(map(str, parts))


def _encode(value: object) -> str | None:
    """One detail value as ``TYPE VALUE`` (str, int, bool, None); None if not storable."""
    if value is None:
        return "n "
    if isinstance(value, bool):
        return f"b {int(value)}"
    if isinstance(value, int):
        return f"i {value}"
    if isinstance(value, str) and "\n" not in value:
        return f"s {value}"
    return None


def _decode(text: str) -> object:
    kind, _, value = text.partition(" ")
    if kind == "n":
        return None
    if kind == "b":
        return value == "1"
    if kind == "i":
        return int(value)
    if kind == "s":
        return value
    raise ValueError(kind)


def _load(path: str, key: str, binaries: Sequence[str]) -> ProviderStatus | None:
    with open(path, encoding="utf-8") as f:
        # A remembered binary path is run on the host: only an entry this user alone could
        # have written counts (pysb_core.linux.statedir).
        if not (trusted(os.path.dirname(path)) and trusted("", os.fstat(f.fileno()))):
            return None
        lines = f.read().split("\n")
    if len(lines) < 3 or lines[0] != _MAGIC or lines[1] != key:
        return None
    version = _decode(lines[2])
    details = {}
    for line in lines[3:]:
        if line:
            name, _, value = line.partition("\t")
            details[name] = _decode(value)
    if details.get("binary") not in (*binaries, None):
        return None  # the cache may only confirm the binary that was probed
    return ProviderStatus.ok(version=version if isinstance(version, str) else None, **details)


def _store(path: str, key: str, status: ProviderStatus) -> None:
    version = _encode(status.version)
    if version is None:
        return  # not storable: probe again next time
    lines = [_MAGIC, key, version]
    for name, value in status.details.items():
        encoded = _encode(value)
        if encoded is None or "\t" in name or "\n" in name:
            return  # not storable: probe again next time
        lines.append(f"{name}\t{encoded}")
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def cached_probe(
    name: str, binaries: Sequence[str], probe: Callable[[], ProviderStatus]
) -> ProviderStatus:
    """``probe()``, or its remembered success for the same binaries, kernel, boot and user."""
    path = _cache_file(name)
    try:
        key = _key(binaries)
    except OSError:
        return probe()
    if path is not None:
        try:
            saved = _load(path, key, binaries)
            if saved is not None:
                return saved
        except (OSError, ValueError, TypeError):
            pass
    status = probe()
    if status.available and path is not None:
        try:
            _store(path, key, status)
        except (OSError, TypeError, ValueError):
            pass
    return status
