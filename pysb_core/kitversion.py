"""Which plugin-kit version a plugin was built for, and whether this pysb still offers it.

A plugin states the kit it was written against with a module-level constant in the module
its entry point names (``PYSB_PROVIDERKIT = "1.0"`` next to a provider class,
``PYSB_GUARDKIT = "1.0"`` in a guard family's module). ``MAJOR.MINOR`` means "the names of
kit MAJOR as of MINOR": this pysb serves it when its kit has the same major version and a
minor version at least as new. A plugin that states nothing is taken to be built for
version 1.0 (every plugin written before the kits existed uses only names kit 1.0 kept).

The refusal is one sentence naming the distribution; the caller turns it into exit 125.
"""

from __future__ import annotations

TYPE_CHECKING = False  # imported while loading every plugin: no typing at run time
if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["KitVersion", "parse", "refusal"]

#: ``(major, minor)``.
KitVersion = tuple[int, int]


def parse(declared: object) -> KitVersion | None:
    """``"1"``, ``"1.2"``, ``1``, ``(1, 2)`` as ``(major, minor)``; None when malformed."""
    numbers: list[int]
    if isinstance(declared, str):
        pieces = declared.strip().split(".")
        if not 1 <= len(pieces) <= 2 or not all(p.isdigit() for p in pieces):
            return None
        numbers = [int(p) for p in pieces]
    elif isinstance(declared, tuple) and 1 <= len(declared) <= 2:
        if not all(type(p) is int and p >= 0 for p in declared):
            return None
        numbers = [int(p) for p in declared]
    elif type(declared) is int and declared >= 0:
        numbers = [declared]
    else:
        return None
    return (numbers[0], numbers[1] if len(numbers) == 2 else 0)


def refusal(module: ModuleType | None, constant: str, current: KitVersion, who: str) -> str | None:
    """Why ``who`` (``"provider 'x' (pysb-x 1.0)"``) cannot be loaded by this pysb, or None.

    ``module`` is the module the entry point named (its ``constant`` states the kit);
    ``current`` is the kit this pysb offers.
    """
    declared = getattr(module, constant, None) if module is not None else None
    if declared is None:
        return None
    wanted = parse(declared)
    have = f"{current[0]}.{current[1]}"
    if wanted is None:
        return (
            f"{who} declares {constant} = {declared!r}, which is not a kit version "
            f'(write "MAJOR.MINOR", e.g. "{have}")'
        )
    if wanted[0] != current[0] or wanted[1] > current[1]:
        return (
            f"{who} was built for {constant.lower().removeprefix('pysb_')} "
            f"{wanted[0]}.{wanted[1]}, and this pysb offers {have}: upgrade that "
            f"distribution, or pysb-core if it is the older one"
        )
    return None
