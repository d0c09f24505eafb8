"""Can bwrap build a sandbox on this machine? Asked once per process, by trying.

Reading sysctls would miss the real failures met in the field (an AppArmor user-namespace
restriction, a container without ``CAP_SYS_ADMIN``, a seccomp filter refusing ``clone``),
so the probe runs bwrap with the same namespace options a launch uses, on the cheapest
possible command (``true``), and turns its complaint into a reason and a fix.
"""

from __future__ import annotations

from pysb_core.providerkit import ProviderStatus, memoize

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
    if "no space left" in low or "enospc" in low or "max_*_namespaces" in low:
        return "raise the user namespace limit: sysctl -w user.max_user_namespaces=15000"
    if "permission" in low or "operation not permitted" in low or "namespace" in low:
        return (
            "sysctl -w kernel.unprivileged_userns_clone=1 (Debian) and "
            "sysctl -w user.max_user_namespaces=15000; in a container, run it with "
            "--security-opt seccomp=unconfined --cap-add SYS_ADMIN, or use the landlock provider"
        )
    return "check that user namespaces are enabled (sysctl user.max_user_namespaces)"


@memoize
def probe_bwrap(binary: str = "bwrap") -> ProviderStatus:
    """Return the cached availability of ``binary`` (a name looked up on PATH, or a path)."""
    from pysb_core.providerkit import cached_probe, which

    path = which(binary)
    if path is None:
        return ProviderStatus.missing("bubblewrap (bwrap) is not installed", fix=INSTALL_FIX)
    return cached_probe("bwrap", [path], lambda: _probe(path))


def _probe(path: str) -> ProviderStatus:
    """Run bwrap with the launch's namespace options once."""
    import subprocess  # only when the probe is not cached: not on the start path

    try:
        # One run answers both questions: can the namespaces be made, and which version
        # (the sandbox runs bwrap itself with --version: no second exec from the host).
        done = subprocess.run(
            [path, *PROBE_OPTIONS, path, "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ProviderStatus.missing(f"bwrap could not be run: {exc}", fix=INSTALL_FIX)
    out = done.stdout.strip()
    if done.returncode != 0 or not out.startswith("bubblewrap "):
        message = out.splitlines()[-1] if out else f"exit {done.returncode}"
        return ProviderStatus.missing(
            f"bwrap cannot create its namespaces here: {message}", fix=_userns_fix(out)
        )
    return ProviderStatus.ok(version=out.split()[-1], binary=path)
