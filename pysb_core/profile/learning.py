"""What a learning run learned, as profile rules, before they are merged into a file.

At the end of a learning run the parent hands every learned event to the ``pysb_learned``
hook together with one :class:`LearnedProfile`; each guard family turns its events into
rules with :meth:`LearnedProfile.add` (its own knowledge: a file read becomes its
directory, an API category only when every function of it was used...). The profile
writer (:func:`pysb_core.profile.writer.merge_learned`) then merges them into the profile
text without duplicating rules or losing what a person wrote.

This module is deliberately tiny and imports nothing heavy: guards import it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pysb_core.events import Recorder
from pysb_core.linux.paths import is_within

__all__ = ["LearnedProfile", "LearnedRule", "Recorder"]

#: Import groups, in the order the writer prints them.
IMPORT_GROUPS = ("standard library", "third party", "dangerous")


@dataclass(frozen=True)
class LearnedRule:
    """One learned rule: ``section`` (``files``), optional ``key`` (``expose-ro``), ``value``.

    ``value`` is a string (a list item, or a scalar for scalar keys) or a ``(name, value)``
    pair for mapping sections (``env``, ``limits``). ``comment`` is written after the rule
    where the file's style allows it; ``group`` groups ``imports`` under a header comment.
    """

    section: str
    key: str | None
    value: str | tuple[str, str]
    comment: str | None = None
    group: str | None = None
    #: The place holds one value, not a list (a plugin's section declared ``SCALAR``): the
    #: writer writes ``section: value``, and a second value replaces nothing -- it is
    #: refused (:meth:`LearnedProfile.add`).
    scalar: bool = False

    @property
    def path(self) -> str:
        """``section`` or ``section.key``: where the rule goes."""
        return self.section if self.key is None else f"{self.section}.{self.key}"


def literal(text: str) -> str:
    """``text`` spelled so that profile variable expansion (:mod:`pysb_core.profile.variables`,
    where ``$${`` is a literal ``${``) gives it back unchanged, whatever it holds."""
    return text.replace("${", "$${")


class LearnedProfile:
    """Collects learned rules (in order, without duplicates) for the profile writer.

    ``cwd`` and ``environ`` let families render paths in the portable forms of SPEC §4
    (``./``, ``~/``, ``${TMPDIR:-/tmp}``, ``${VIRTUAL_ENV}``) with :meth:`path_form`.
    """

    def __init__(
        self,
        *,
        cwd: str | None = None,
        environ: Mapping[str, str] | None = None,
        scalars: frozenset[str] = frozenset(),
    ) -> None:
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        #: ``section`` / ``section.key`` places of plugins' sections that hold one value.
        self.scalars = scalars
        self._rules: list[LearnedRule] = []
        self._keys: set[tuple[str, str | None, str | tuple[str, str]]] = set()
        #: ``(family, what, why)`` of each learned record a family refused to turn into a
        #: rule (:meth:`drop`); the writer's summary says so.
        self.dropped: list[tuple[str, str, str]] = []

    def drop(self, family: str, what: object, why: str) -> None:
        """Refuse one learned record: a record comes from the sandbox (the report channel
        is written by the program), and a field no real access could have produced (a
        host ``*``, a path holding a NUL byte, an environment name with a ``}``) is not
        written as a rule. ``what`` is shown escaped and shortened."""
        shown = repr(what) if not isinstance(what, str) else what
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        self.dropped.append((family, shown, why))

    def add(
        self,
        section: str,
        key: str | None,
        value: str | tuple[str, str],
        comment: str | None = None,
        *,
        group: str | None = None,
    ) -> bool:
        """Add one rule; return False when the same rule was already added."""
        if not isinstance(section, str) or not section:
            raise ValueError(f"invalid profile section {section!r}")
        if isinstance(value, list):
            value = tuple(value)
        if isinstance(value, tuple):
            if len(value) != 2 or not all(isinstance(v, str) for v in value):
                raise ValueError(f"a mapping entry is a (name, value) pair, got {value!r}")
        elif not isinstance(value, str) or not value:
            raise ValueError(f"a learned rule is a non-empty string, got {value!r}")
        ident = (section, key, value)
        if ident in self._keys:
            return False
        place = section if key is None else f"{section}.{key}"
        scalar = place in self.scalars and isinstance(value, str)
        if scalar and any(r.path == place for r in self._rules):
            raise ValueError(f"{place} holds one value: learned {value!r} after another")
        self._keys.add(ident)
        self._rules.append(LearnedRule(section, key, value, comment, group, scalar))
        return True

    def __iter__(self) -> Iterator[LearnedRule]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    @property
    def rules(self) -> tuple[LearnedRule, ...]:
        return tuple(self._rules)

    def path_form(self, path: str) -> str:
        """The portable spelling of an absolute path (SPEC §4 "Learning writes...").

        ``${VIRTUAL_ENV}/...`` inside the active venv, ``./...`` below the working
        directory, ``${TMPDIR:-/tmp}/...`` below the temporary directory, ``~/...`` below
        the home directory, else the absolute path; when several apply, the deepest root
        (``~/.config/app`` for a home inside the working directory). The recorded part is
        data: a ``${`` in it is written ``$${`` (:func:`literal`), so that the next run
        reads back exactly this path, never a variable.
        """

        path = os.path.normpath(path)
        tmp = self.environ.get("TMPDIR") or "/tmp"
        forms = [
            (self.environ.get("VIRTUAL_ENV"), "${VIRTUAL_ENV}"),
            (self.cwd, "."),
            (tmp, "${TMPDIR:-/tmp}"),
            (self.environ.get("HOME"), "~"),
        ]
        best: tuple[int, str] | None = None  # the deepest root wins (a HOME inside the cwd)
        for root, spelled in forms:
            if not root:
                continue
            root = os.path.normpath(root)
            if root == "/" or (best is not None and len(root) <= best[0]):
                continue
            if path == root:
                best = (len(root), spelled)
            elif is_within(path, root):
                best = (len(root), f"{spelled}/{literal(path[len(root) + 1 :])}")
        return literal(path) if best is None else best[1]
