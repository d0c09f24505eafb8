"""pysb's first-party packages, so ``pysb providers`` can say what is not installed.

A package that is not installed cannot be asked what it does, so its description and
capabilities are written here; tests/test_cli_conventions.py checks them against the
installed provider classes, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FirstParty:
    """One first-party distribution: a provider (``provider`` names it) or the guards."""

    distribution: str
    provider: str | None
    description: str
    capabilities: tuple[str, ...]
    #: What the machine needs besides the package.
    needs: str
    #: When pysb must run as root for the provider to do everything it enforces ("no":
    #: never; the docs site's provider table shows it).
    root: str = "no"


_FILES = ("env", "files", "files-write")
_NETWORK = ("tcp-host", "tcp-port", "udp-host", "udp-port")
#: What a provider with mount and network namespaces enforces.
_NAMESPACED = (*_FILES, "ignore", "limits", "rename", *_NETWORK)

FIRST_PARTY: tuple[FirstParty, ...] = (
    FirstParty(
        "pysb-guards",
        None,
        "the Python guards (files, network, imports, api, env): without it only the OS "
        "layer enforces, and a profile with rules no provider covers is refused",
        (),
        "nothing",
    ),
    FirstParty(
        "pysb-landlock",
        "landlock",
        "Linux Landlock LSM: the interpreter restricts itself (no root, no namespaces)",
        ("env", "files", "files-write", "limits", "tcp-port"),
        "Linux >= 5.13 with Landlock enabled",
    ),
    FirstParty(
        "pysb-bwrap",
        "bwrap",
        "bubblewrap: private mount, user, pid, ipc, uts, cgroup and network namespaces",
        _NAMESPACED,
        "bwrap (apt-get install bubblewrap); for network rules slirp4netns or passt",
    ),
    FirstParty(
        "pysb-unshare",
        "unshare",
        "util-linux unshare: user/mount/pid/net/ipc/uts namespaces, explicit binds, nftables",
        _NAMESPACED,
        "util-linux, slirp4netns, nftables; unprivileged user namespaces",
    ),
    FirstParty(
        "pysb-firejail",
        "firejail",
        "firejail: whitelisted file system, caps dropped, seccomp; no network, or a host "
        "bridge filtered by --netfilter",
        (*_FILES, "ignore", "limits", *_NETWORK),
        "firejail (apt-get install firejail)",
        "for network rules, unless a host bridge is configured (set-uid firejail: only "
        "root configures its network namespace; a normal user's run is refused, 125)",
    ),
    FirstParty(
        "pysb-qemu",
        "qemu",
        "a QEMU micro-VM running its own kernel (host interpreter over virtio-9p)",
        _NAMESPACED,
        "qemu-system and a kernel image; /dev/kvm for speed",
    ),
)


def missing_first_party(installed_distributions: set[str]) -> list[FirstParty]:
    """The first-party packages whose distribution is not in ``installed_distributions``."""
    return [p for p in FIRST_PARTY if p.distribution not in installed_distributions]


def installed_distributions() -> set[str]:
    """Names of the installed distributions among :data:`FIRST_PARTY` (metadata only)."""
    from importlib.metadata import PackageNotFoundError, distribution

    found: set[str] = set()
    for package in FIRST_PARTY:
        try:
            distribution(package.distribution)
        except PackageNotFoundError:
            continue
        found.add(package.distribution)
    return found
