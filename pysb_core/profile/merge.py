"""Check the shape of every file's sections and merge all files into one located view.

Rules of SPEC §4: lists from all files are concatenated (in reading order: the profile,
then its includes, depth first); a scalar set in two files with different values is an
error naming both places; unknown keys are errors with a "did you mean" hint. Strings are
expanded here, exactly once, with ``${PROFILE_DIR}`` bound to the file being read.
"""

from __future__ import annotations

from pysb_core.profile.schema import ENV, LIST, PROVIDERS, SCALAR, Located, did_you_mean
from pysb_core.profile.variables import VariableError, expand, is_absent, lone_variable

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from pysb_core.profile.loader import Node, ProfileFile
    from pysb_core.profile.schema import ProfileSchema


#: Scalars whose absence must be written, not implied by an empty value or an unset
#: variable (the default a typo would fall back to is never what the user meant): each
#: with what to write instead.
NAMED_SCALARS = {
    "provider": "name a provider (e.g. bwrap), or remove the line to let 'auto' choose",
}


class Item:
    """One value with its ``FILE:LINE`` (and the directory of that file)."""

    __slots__ = ("directory", "loc", "value")

    def __init__(self, value: Any, loc: str, directory: str = "") -> None:
        self.value = value
        self.loc = loc
        self.directory = directory

    def __repr__(self) -> str:
        return f"Item({self.value!r}, {self.loc!r})"


class EnvEntry:
    """An ``env`` entry: the value text is expanded later (glob keys rewrite it first)."""

    __slots__ = ("directory", "expand", "loc", "text")

    def __init__(self, text: str, loc: str, directory: str, expand: bool) -> None:
        self.text = text
        self.loc = loc
        self.directory = directory
        self.expand = expand


class Collected:
    """Every file merged: scalars by dotted key, lists by dotted key, env, provider options.

    (Plain classes, not dataclasses: this module is on the start-up path of every run.)
    """

    def __init__(self) -> None:
        self.scalars: dict[str, Item] = {}
        self.lists: dict[str, list[Item]] = {}
        self.env: dict[str, EnvEntry] = {}
        self.providers: dict[str, dict[str, Item]] = {}
        self.extra: dict[str, Any] = {}
        #: FILE:LINE of each item of a list section in ``extra`` (same order).
        self.extra_sources: dict[str, list[str]] = {}
        self.seen: set[str] = set()


_TYPE_NAMES = {"l": "a list", "m": "a mapping"}


def _describe(node: Node) -> str:
    if node[0] == "s":
        v = node[2]
        return "null" if v is None else f"{type(v).__name__} {node[3]!r}"
    return _TYPE_NAMES[node[0]]


class _Merger:
    def __init__(self, schema: ProfileSchema, environ: Mapping[str, str]) -> None:
        self.schema = schema
        self.environ = environ
        self.out = Collected()
        self.errors: list[str] = []
        self.pf: ProfileFile

    # -- helpers --

    def err(self, node: Node | int, msg: str) -> None:
        self.errors.append(f"{self.pf.loc(node)}: {msg}")

    def text(self, node: Node, what: str) -> str | None:
        """Expand a string scalar; None when it is absent (lone unset ``${X}``) or invalid."""
        value = node[2]
        try:
            if is_absent(value, self.environ, self.pf.directory):
                return None
            return expand(value, self.environ, self.pf.directory)
        except VariableError as exc:
            self.err(node, f"{what}: {exc}")
            return None

    def set_scalar(self, key: str, value: Any, node: Node) -> None:
        loc = self.pf.loc(node)
        old = self.out.scalars.get(key)
        if old is None:
            self.out.scalars[key] = Item(value, loc, self.pf.directory)
        elif old.value != value or type(old.value) is not type(value):
            self.errors.append(
                f"{loc}: {key}: {value!r} conflicts with {old.value!r} set at {old.loc}"
            )

    def mapping_pairs(self, node: Node, what: str) -> list[tuple[str, Node, Node]]:
        """Pairs of a mapping node with string keys; duplicates and odd keys reported."""
        if node[0] == "s" and node[2] is None:
            return []
        if node[0] != "m":
            self.err(node, f"{what}: expected a mapping, got {_describe(node)}")
            return []
        seen: dict[str, int] = {}
        pairs: list[tuple[str, Node, Node]] = []
        for key, value in node[2]:
            if key[0] != "s" or not isinstance(key[2], str) or not key[2]:
                self.err(key, f"{what}: keys must be non-empty strings, got {_describe(key)}")
                continue
            name = key[2]
            if name in seen:
                self.err(key, f"{what}: duplicate key {name!r} (first at line {seen[name]})")
                continue
            seen[name] = key[1]
            pairs.append((name, key, value))
        return pairs

    # -- shapes --

    def file(self, pf: ProfileFile) -> None:
        self.pf = pf
        tree = pf.tree
        if tree is None:
            return
        if tree[0] != "m":
            self.err(tree, f"a profile is a mapping of sections, got {_describe(tree)}")
            return
        sections = self.schema.sections
        for name, key, value in self.mapping_pairs(tree, "profile"):
            shape = sections.get(name)
            if shape is None:
                hint = did_you_mean(name, list(sections))
                self.err(key, f"unknown key {name!r}{hint}")
                continue
            self.out.seen.add(name)
            if name == "include":
                continue  # resolved (and checked) by the loader
            before = len(self.errors)
            self.section(name, shape, key, value)
            if self.schema.has_validators(name) and len(self.errors) == before:
                plain = self.plain(value, [])
                self.errors.extend(self.schema.validate(name, plain, pf.loc(key)))

    def section(self, name: str, shape: Any, key: Node, value: Node) -> None:
        if isinstance(shape, dict):
            for sub, skey, sval in self.mapping_pairs(value, name):
                subshape = shape.get(sub)
                if subshape is None:
                    self.err(skey, f"{name}: unknown key {sub!r}{did_you_mean(sub, list(shape))}")
                    continue
                self.section(f"{name}.{sub}", subshape, skey, sval)
        elif shape == SCALAR:
            self.scalar(name, value)
        elif shape == LIST:
            self.list_section(name, value)
        elif shape == ENV:
            self.env(value)
        elif shape == PROVIDERS:
            self.providers(value)
        else:  # ANY: a third-party section, merged generically
            self.extra(name, value)

    def scalar(self, name: str, node: Node) -> None:
        if node[0] != "s":
            self.err(node, f"{name}: expected a single value, got {_describe(node)}")
            return
        value = node[2]
        if value is None:
            if name in NAMED_SCALARS:
                self.err(node, f"{name}: no value; {NAMED_SCALARS[name]}")
            return
        if isinstance(value, str):
            value = self.text(node, name)
            if value is None:
                if name in NAMED_SCALARS and lone_variable(node[2]) is not None:
                    self.err(
                        node,
                        f"{name}: {node[2]} is unset; {NAMED_SCALARS[name]} "
                        f"(or write a default: ${{{lone_variable(node[2])}:-auto}})",
                    )
                return
        self.set_scalar(name, value, node)

    def list_section(self, name: str, node: Node) -> None:
        items = self.out.lists.setdefault(name, [])
        if node[0] == "s":
            if node[2] is None:
                return
            entries = [node]
        elif node[0] == "l":
            entries = node[2]
        else:
            self.err(node, f"{name}: expected a list, got {_describe(node)}")
            return
        for entry in entries:
            if entry[0] != "s" or entry[2] is None:
                self.err(entry, f"{name}: expected a string, got {_describe(entry)}")
                continue
            # `imports: [yes]` or a directory named 2024: the text as written, not YAML's bool/int
            text = self.text(entry, name) if isinstance(entry[2], str) else entry[3]
            if text is None:
                continue
            if not text.strip():
                self.err(entry, f"{name}: empty value")
                continue
            items.append(Item(text, self.pf.loc(entry)))

    def env(self, node: Node) -> None:
        for name, key, value in self.mapping_pairs(node, "env"):
            if "=" in name or "\0" in name:
                self.err(key, f"env: invalid variable name {name!r}")
                continue
            if value[0] != "s":
                self.err(value, f"env: {name}: expected a single value, got {_describe(value)}")
                continue
            if value[2] is None:
                self.err(value, f"env: {name}: no value (write '' for an empty string)")
                continue
            is_str = isinstance(value[2], str)
            text = value[2] if is_str else value[3]
            entry = EnvEntry(text, self.pf.loc(value), self.pf.directory, is_str)
            old = self.out.env.get(name)
            if old is None:
                self.out.env[name] = entry
                continue
            if self.env_value(name, old) != self.env_value(name, entry):
                self.err(
                    value, f"env: {name}: {text!r} conflicts with {old.text!r} set at {old.loc}"
                )

    def env_value(self, name: str, entry: EnvEntry) -> str | None:
        if not entry.expand or any(c in name for c in "*?["):
            return entry.text
        try:
            if is_absent(entry.text, self.environ, entry.directory):
                return None
            return expand(entry.text, self.environ, entry.directory)
        except VariableError:
            return entry.text  # reported when compiled

    def providers(self, node: Node) -> None:
        for name, _key, value in self.mapping_pairs(node, "providers"):
            opts = self.out.providers.setdefault(name, {})
            for opt, okey, oval in self.mapping_pairs(value, f"providers.{name}"):
                plain = self.plain(oval, self.errors)
                old = opts.get(opt)
                loc = self.pf.loc(okey)
                if old is None:
                    opts[opt] = Item(plain, loc)
                elif old.value != plain:
                    self.errors.append(
                        f"{loc}: providers.{name}.{opt}: {plain!r} conflicts with "
                        f"{old.value!r} set at {old.loc}"
                    )
            if self.schema.has_validators(f"providers.{name}"):
                plain = self.plain(value, [])
                self.errors.extend(
                    self.schema.validate(f"providers.{name}", plain or {}, self.pf.loc(value))
                )

    def extra(self, name: str, node: Node) -> None:
        located = self.plain(node, self.errors)
        plain = _unlocate(located)
        old = self.out.extra.get(name)
        if isinstance(located, list):
            where = self.pf.loc(node)
            sources = self.out.extra_sources.setdefault(name, [])
            if not isinstance(old, list):
                sources.clear()
            sources.extend(_location_of(item, where) for item in located)
        if old is None:
            self.out.extra[name] = plain
        elif isinstance(old, list) and isinstance(plain, list):
            old.extend(plain)
        elif isinstance(old, dict) and isinstance(plain, dict):
            for k, v in plain.items():
                if k in old and old[k] != v:
                    self.err(node, f"{name}.{k}: {v!r} conflicts with {old[k]!r}")
                else:
                    old[k] = v
        elif old != plain:
            self.err(node, f"{name}: {plain!r} conflicts with {old!r} set in another file")

    def plain(self, node: Node, errors: list[str]) -> Any:
        """The node as plain data, strings expanded and :class:`Located`."""
        kind = node[0]
        if kind == "s":
            value = node[2]
            if not isinstance(value, str):
                return value
            loc = self.pf.loc(node)
            try:
                if is_absent(value, self.environ, self.pf.directory):
                    return None
                return Located(expand(value, self.environ, self.pf.directory), loc)
            except VariableError as exc:
                errors.append(f"{loc}: {exc}")
                return Located(value, loc)
        if kind == "l":
            items = (self.plain(n, errors) for n in node[2])
            return [i for i in items if i is not None]
        return {
            str(k[2]): self.plain(v, errors) for k, v in node[2] if k[0] == "s" and k[2] is not None
        }


def _location_of(value: Any, default: str) -> str:
    """Where a list item was written: its own FILE:LINE, or its first string's."""
    if isinstance(value, Located):
        return value.location
    if isinstance(value, dict):
        for v in value.values():
            if isinstance(v, Located):
                return v.location
    return default


def _unlocate(value: Any) -> Any:
    """Plain ``str`` instead of :class:`Located` (for JSON and equality across files)."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list):
        return [_unlocate(v) for v in value]
    if isinstance(value, dict):
        return {k: _unlocate(v) for k, v in value.items()}
    return value


def merge_files(
    files: list[ProfileFile], schema: ProfileSchema, environ: Mapping[str, str]
) -> tuple[Collected, list[str]]:
    """Merge ``files`` (in reading order) into one :class:`Collected`; return all errors."""
    merger = _Merger(schema, environ)
    for pf in files:
        merger.file(pf)
    for opts in merger.out.providers.values():
        for item in opts.values():
            item.value = _unlocate(item.value)
    return merger.out, merger.errors
