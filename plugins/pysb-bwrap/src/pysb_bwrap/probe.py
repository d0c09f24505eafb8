"""Can bwrap build a sandbox on this machine? Asked once per process, by trying.

Reading sysctls would miss the real failures met in the field (an AppArmor user-namespace
restriction, a container without ``CAP_SYS_ADMIN``, a seccomp filter refusing ``clone``),
so the probe runs bwrap with the same namespace options a launch uses, on the cheapest
possible command (``true``), and turns its complaint into a reason and a fix.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache

from pysb_core.provider import ProviderStatus

INSTALL_FIX = "apt-get install bubblewrap"
#: The options a launch relies on; the probe must exercise every one of them.
PROBE_OPTIONS = (
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--die-with-parent",
    "--cap-drop",
    "ALL",
    "--ro-bind",
    "/",
    "/",
)


def _userns_fix(stderr: str) -> str:
    """The command most likely to make user namespaces usable, from bwrap's message."""
    low = stderr.lower()
    if "unrecognized option" in low or "unknown option" in low:
        return "bubblewrap >= 0.8.0 is needed (--disable-userns): " + INSTALL_FIX
    if "apparmor" in low or "rtm_newaddr" in low:
        return "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
    if "no space left" in low:
        return "sysctl -w user.max_user_namespaces=15000"
    if "permission" in low or "operation not permitted" in low or "namespace" in low:
        return (
            "sysctl -w kernel.unprivileged_userns_clone=1 (Debian) and "
            "sysctl -w user.max_user_namespaces=15000; in a container, run it with "
            "--security-opt seccomp=unconfined --cap-add SYS_ADMIN, or use the landlock provider"
        )
    return "check that user namespaces are enabled (sysctl user.max_user_namespaces)"


@lru_cache(maxsize=4)
def probe_bwrap(binary: str = "bwrap") -> ProviderStatus:
    """Return the cached availability of ``binary`` (a name looked up on PATH, or a path)."""
    path = shutil.which(binary)
    if path is None:
        return ProviderStatus.missing("bubblewrap (bwrap) is not installed", fix=INSTALL_FIX)
    try:
        done = subprocess.run(
            [path, *PROBE_OPTIONS, "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ProviderStatus.missing(f"bwrap could not be run: {exc}", fix=INSTALL_FIX)
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        return ProviderStatus.missing(
            f"bwrap cannot create its namespaces here: {message or f'exit {done.returncode}'}",
            fix=_userns_fix(done.stderr),
        )
    return ProviderStatus.ok(version=_version(path), binary=path)


def _version(path: str) -> str | None:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=5
        ).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[-1] if out else None
