"""Who enforces each rule: the data behind ``pysb check`` and the fail-closed decision.

Every rule is reported by family. The core's OS-layer plugin reports the ``os`` layer
from the provider's capabilities for every rule (so a rule appears even when no guard is
installed); each guard family adds ``python`` for the rules it enforces. Reports of the
same rule merge.
"""

from __future__ import annotations

from pysb_core._startup.records import Record, field, mutable_record, record

#: Families whose rules the user may leave unenforced by opting out of the Python layer.
PYTHON_ONLY_FAMILIES = frozenset({"imports", "api"})
#: The source of a rule the user did not write (the deny-by-default of ``imports`` and
#: ``api``): reported like any rule, never "unenforced" (SPEC 2: a run of pysb-core and
#: one provider without the Python layer is not refused for rules nobody wrote).
DEFAULT_SOURCE = "<default>"


@record
class RuleReport(Record):
    family: str
    rule: str
    source: str
    layers: tuple[str, ...]

    @property
    def enforced(self) -> bool:
        return bool(self.layers)


@mutable_record
class CheckReport(Record):
    """Collects, family by family, the layers that enforce each rule.

    ``python_guards`` is false under ``--no-python-guards`` (the user's choice): then
    ``python`` never counts, ``imports``/``api`` rules are given up knowingly, and a
    ``files``/``network``/``env``/``limits`` rule without ``os`` makes the run refuse to
    start. When it is true, a Python layer that is not installed is no excuse: a family
    missing from ``python_families`` enforces nothing, and its rules (the deny-by-default
    of ``imports`` and ``api`` included) make the run refuse to start.
    """

    provider: str
    python_guards: bool = True
    #: Guard families whose Python guard is installed (entry-point names of ``pysb.guards``).
    python_families: frozenset[str] = frozenset()
    notes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    _rules: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)

    def add(
        self, rule: str, source: str, layers: list[str] | tuple[str, ...], family: str = ""
    ) -> None:
        """Report that ``layers`` enforce ``rule`` (merged with earlier reports of it)."""
        kept = self._rules.setdefault((family, rule, source), [])
        for layer in layers:
            if layer == "python" and not self.python_guards:
                continue
            if layer not in kept:
                kept.append(layer)

    def python_only_from(self, families: frozenset[str]) -> None:
        """Keep ``python`` only for rules of ``families`` (those with a guard that arms
        something in the sandbox): a guard's report does not enforce a family by itself."""
        for (family, _rule, _source), layers in self._rules.items():
            if family and family not in families and "python" in layers:
                layers.remove("python")

    def note(self, message: str) -> None:
        self.notes.append(message)

    @property
    def rules(self) -> list[RuleReport]:
        order = {"python": 0, "os": 1}
        return [
            RuleReport(fam, rule, src, tuple(sorted(layers, key=lambda x: order.get(x, 2))))
            for (fam, rule, src), layers in self._rules.items()
        ]

    def unenforced(self) -> list[RuleReport]:
        """Rules the user wrote that no active layer enforces and that they did not
        knowingly give up (defaults are not rules: :data:`DEFAULT_SOURCE`)."""
        return [
            r
            for r in self.rules
            if not r.enforced
            and r.source != DEFAULT_SOURCE
            and (self.python_guards or r.family not in PYTHON_ONLY_FAMILIES)
        ]
