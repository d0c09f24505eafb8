"""Can firejail run here? Asked once per process, cheaply.

``load_provider`` probes on every ``pysb run``, so the probe must not cost a sandbox
(firejail needs about 30-40 ms to build one, which would double its share of the start-up
time). It checks what can be checked without one: the binary is there, a non-root pysb can
use it (it must be set-uid root), pysb is not already inside a firejail sandbox (firejail
refuses to nest), and it runs and is recent enough (``firejail --version``, 2-3 ms: a
success is remembered across runs by :mod:`pysb_core.launch.probecache`, keyed by the binary's
size and mtime, the kernel and the user). A failure that only building a sandbox reveals
(a container without ``CAP_SYS_ADMIN``) surfaces at launch, as firejail's own error message
on stderr.
:func:`probe_deep` builds a real sandbox with the launch's hardening options, for tests
and diagnostics.
"""

from __future__ import annotations

import os

from pysb_core.providerkit import ProviderStatus, memoize

INSTALL_FIX = "apt-get install firejail"
#: The options a launch relies on; the probe must exercise every one of them.
PROBE_OPTIONS = (
    "--noprofile",
    "--quiet",
    "--caps.drop=all",
    "--nonewprivs",
    "--seccomp",
    "--restrict-namespaces",
    "--private-dev",
    "--ipc-namespace",
    "--private-tmp",
    "--deterministic-exit-code",
    "--net=none",
)
TRUE = ("/bin/true", "/usr/bin/true")


def _fix_for(output: str) -> str:
    low = output.lower()
    if "already running" in low or ("sandbox" in low and "inside" in low):
        return "run pysb outside of a firejail sandbox, or use another provider"
    if "operation not permitted" in low or "permission" in low:
        return (
            "firejail needs CAP_SYS_ADMIN (in a container: --cap-add SYS_ADMIN "
            "--security-opt seccomp=unconfined), or use the landlock provider"
        )
    if "unrecognized" in low or "invalid option" in low:
        return "firejail >= 0.9.72 is needed: " + INSTALL_FIX
    return "check `firejail --noprofile /bin/true` on this machine"


def _version_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return ()


MIN_VERSION = (0, 9, 72)


def _which(name: str) -> str | None:
    """``shutil.which`` (``shutil`` pulls in bz2, lzma and zlib: ~1.5 ms of every run):
    ``PATH``, then the usual places."""
    if "/" in name:
        candidates = [name]
    else:
        dirs = (os.environ.get("PATH") or os.defpath).split(os.pathsep)
        dirs += ["/usr/bin", "/usr/local/bin", "/bin"]
        candidates = [os.path.join(d, name) for d in dirs if d]
    for path in candidates:
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


@memoize
def probe_firejail(binary: str = "firejail") -> ProviderStatus:
    """Return the cached availability of ``binary`` (a name looked up on PATH, or a path)."""
    path = _which(binary)
    if path is None:
        return ProviderStatus.missing("firejail is not installed", fix=INSTALL_FIX)
    if os.environ.get("container") == "firejail":  # noqa: SIM112 - firejail's own name
        return ProviderStatus.missing(
            "pysb already runs inside a firejail sandbox, and firejail does not nest",
            fix="run pysb outside of firejail, or use the landlock provider",
        )
    if os.getuid() != 0:
        st = os.stat(path)
        if not (st.st_mode & 0o4000 and st.st_uid == 0):
            return ProviderStatus.missing(
                f"{path} is not set-uid root, so a normal user cannot start sandboxes",
                fix=f"chmod u+s {path} (as Debian's package installs it), or run pysb as root",
            )
    from pysb_core.providerkit import cached_probe

    # The version only changes with the binary: remembered across runs (probecache).
    return cached_probe("firejail", [path], lambda: _probe_version(path))


def _probe_version(path: str) -> ProviderStatus:
    """Run ``firejail --version``: it runs, and is recent enough."""
    import subprocess  # only when probing: not on the start path

    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ProviderStatus.missing(f"firejail could not be run: {exc}", fix=INSTALL_FIX)
    first = done.stdout.split("\n", 1)[0].strip()
    version = first.rsplit(" ", 1)[-1] if first.startswith("firejail version") else ""
    if done.returncode != 0 or not version:
        return ProviderStatus.missing(
            f"`{path} --version` failed: {(done.stderr or done.stdout).strip() or done.returncode}",
            fix=INSTALL_FIX,
        )
    if _version_tuple(version) < MIN_VERSION:
        return ProviderStatus.missing(
            f"firejail {version} is too old (0.9.72 or newer is needed)", fix=INSTALL_FIX
        )
    return ProviderStatus.ok(version=version, binary=path)


def probe_deep(binary: str = "firejail") -> ProviderStatus:
    """Build one real sandbox with the launch's hardening options (``/bin/true`` inside)."""
    import subprocess  # only when probing: not on the start path

    status = probe_firejail(binary)
    if not status.available:
        return status
    path = str(status.details["binary"])
    true = next((t for t in TRUE if os.path.exists(t)), None)
    if true is None:
        return ProviderStatus.missing("no /bin/true to probe firejail with", fix=INSTALL_FIX)
    try:
        done = subprocess.run(
            [path, *PROBE_OPTIONS, "--", true],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=20,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ProviderStatus.missing(f"firejail could not be run: {exc}", fix=INSTALL_FIX)
    if done.returncode != 0:
        out = done.stdout.strip()
        message = out.splitlines()[-1] if out else f"exit status {done.returncode}"
        return ProviderStatus.missing(
            f"firejail cannot create a sandbox here: {message}", fix=_fix_for(out)
        )
    return status
