"""``providers: {bwrap: {...}}``: the few options a profile may set, and their checks.

Deliberately small. There is no ``extra-args`` (a profile, possibly one shipped with the
code it sandboxes, could add ``--bind / /``) and no ``bwrap`` binary path (a profile could
make pysb run any host program). ``share-net`` exists only to say clearly that sharing the
host's network is refused: it would bypass every network rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pysb_core.providerkit import unknown_option

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    from typing import Any

KNOWN = ("hostname", "share-net")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,62})$")


def validate(options: Mapping[str, Any]) -> list[str]:
    """One message per problem (empty when the options are valid)."""
    if not isinstance(options, Mapping):
        return [f"expected a mapping, got {type(options).__name__}"]
    errors = []
    for key, value in options.items():
        if key == "hostname":
            if not isinstance(value, str) or not _HOSTNAME.match(value):
                errors.append(f"hostname must be 1-63 letters, digits, '.' or '-' (got {value!r})")
        elif key == "share-net":
            if value is not False:
                errors.append(
                    "share-net: only 'false' is accepted; sharing the host's "
                    "network would bypass the profile's network rules (use 'network:' rules)"
                )
        else:
            errors.append(unknown_option(key, KNOWN))
    return errors
