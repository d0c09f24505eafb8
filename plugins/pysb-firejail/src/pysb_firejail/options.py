"""``providers: {firejail: {...}}``: the few options a profile may set, and their checks.

Deliberately small. There is no ``extra-args`` and no ``profile`` (a profile, possibly one
shipped with the code it sandboxes, could add ``--noblacklist`` or ``--net=eth0``), and no
``firejail`` binary path (a profile could make pysb run any host program as root).

- ``hostname``: the sandbox's host name (firejail's own UTS namespace);
- ``bridge``: a host bridge that firejail connects the sandbox to when a network rule
  allows traffic (``--net=BRIDGE``, filtered by ``--netfilter``); without it such a
  profile is refused, never run with the host's network;
- ``share-net``: only ``false`` is accepted; it exists to say clearly that sharing the
  host's network is refused.
"""

from __future__ import annotations

from _collections_abc import Mapping  # collections.abc without the collections package

from pysb_core.providerkit import unknown_option

TYPE_CHECKING = False  # imported by every firejail run: no typing at run time
if TYPE_CHECKING:
    from typing import Any

KNOWN = ("hostname", "bridge", "share-net")
#: Checked with ``re`` only when a profile sets the key (``re`` is not otherwise needed
#: by every run's parent).
_HOSTNAME = r"[A-Za-z0-9]([A-Za-z0-9.-]{0,62})"
#: Linux interface names: at most 15 bytes, no '/', no white space.
_IFNAME = r"[A-Za-z0-9_.-]{1,15}"


def _matches(pattern: str, value: Any) -> bool:
    import re

    return isinstance(value, str) and re.fullmatch(pattern, value) is not None


def validate(options: Mapping[str, Any]) -> list[str]:
    """One message per problem (empty when the options are valid)."""
    if not isinstance(options, Mapping):
        return [f"expected a mapping of options, got {type(options).__name__}"]
    errors = []
    for key, value in options.items():
        if key == "hostname":
            if not _matches(_HOSTNAME, value):
                errors.append(f"hostname must be 1-63 letters, digits, '.' or '-' (got {value!r})")
        elif key == "bridge":
            if not _matches(_IFNAME, value):
                errors.append(
                    "bridge must name a host bridge interface (1-15 letters, digits, "
                    f"'_', '.' or '-'; got {value!r})"
                )
        elif key == "share-net":
            if value is not False:
                errors.append(
                    "share-net: only 'false' is accepted; sharing the host's network would "
                    "bypass the profile's network rules (use 'network:' rules)"
                )
        else:
            errors.append(unknown_option(key, KNOWN))
    return errors
