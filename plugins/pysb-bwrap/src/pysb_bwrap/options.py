"""``providers: {bwrap: {...}}``: the few options a profile may set, and their checks.

Deliberately small. There is no ``extra-args`` (a profile, possibly one shipped with the
code it sandboxes, could add ``--bind / /``) and no ``bwrap`` binary path (a profile could
make pysb run any host program). ``share-net`` exists only to say clearly that sharing the
host's network is refused: it would bypass every network rule.
"""

from __future__ import annotations

from _collections_abc import Mapping  # collections.abc without the collections package

from pysb_core.providerkit import unknown_option

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    from typing import Any

KNOWN = ("hostname", "share-net")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def _valid_hostname(value: str) -> bool:
    """1-63 ASCII letters, digits, '.' or '-', starting with a letter or digit (checked
    by hand: ``re`` costs ~3 ms at every bwrap start, and its ``$`` lets a final newline
    through)."""
    return (
        0 < len(value) <= 63
        and value[0] in _LETTERS
        and all(c in _LETTERS or c in ".-" for c in value)
    )


def validate(options: Mapping[str, Any]) -> list[str]:
    """One message per problem (empty when the options are valid)."""
    if not isinstance(options, Mapping):
        return [f"expected a mapping, got {type(options).__name__}"]
    errors = []
    for key, value in options.items():
        if key == "hostname":
            if not isinstance(value, str) or not _valid_hostname(value):
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
