"""Merge what a learning run learned into a profile file, keeping what a person wrote.

The merge works on the *text*: the file is composed with PyYAML only to learn where each
section, list and mapping sits, and new entries are inserted there -- after the last item
of a block list (same indentation, comment after the item), inside a flow list before its
``]``, as a new key of an existing mapping, or as a new section at the end. Everything else
(comments, blank lines, quoting, key order, variables) is left byte for byte.

Rules already in the file are not added again (``./data`` is covered by ``expose-ro: [.]``,
``expose-ro`` by the same ``expose-rw``, an ``env`` name by a glob key that matches it, an
``api`` target written under ``allow`` or ``deny``). Scalars (``provider``, ``limits.*``)
are only added when absent: a person's choice wins.

The result is parsed again before anything is written; should the text merge ever
produce something that does not hold every learned rule, the original is left untouched
and the rules go to ``FILE.learned.yaml`` instead (said so in the summary). Writes are
atomic (temp file + rename) and the previous version is kept as ``FILE.bak``.

Why one module: the text merge is one algorithm: locating blocks with PyYAML, deciding what is
already covered, rendering new entries and checking the result before an atomic write depend on
the same notion of a section's shape, and the byte-for-byte promise holds only if they agree.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from pysb_core.errors import ProfileError, SandboxError
from pysb_core.linux.paths import is_within
from pysb_core.profile.learning import IMPORT_GROUPS, LearnedProfile, LearnedRule
from pysb_core.profile.loader import display_path
from pysb_core.profile.schema import BUILTIN_SECTIONS, SCALAR

#: Order of sections in a new file (others follow in the order they were learned).
SECTION_ORDER = ("version", "provider", "env", "unenv", "files", "network", "imports", "api")
_PLAIN = re.compile(r"[A-Za-z0-9_./~+@=-](?:[A-Za-z0-9_./~+@=:, -]*[A-Za-z0-9_./~+@=-])?")
_GROUP_TITLES = {
    "standard library": "standard library",
    "third party": "third party (check where it comes from)",
    "dangerous": "dangerous: review before keeping",
}

HEADER = """\
# pysb profile, written by a learning run on {date}.
# Review every rule before trusting this file: a learning run records what the program
# did, including whatever hostile code did while it ran. Reference: docs/profile.md
"""


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------


def scalar_text(value: str, *, flow: bool = False) -> str:
    """``value`` as a YAML scalar that loads back as exactly this string."""
    import yaml

    plain = _PLAIN.fullmatch(value) is not None and ": " not in value and " #" not in value
    if plain and flow and "," in value:
        plain = False
    if plain and value.startswith("- "):
        plain = False
    if plain:
        try:
            plain = yaml.safe_load(value) == value
        except yaml.YAMLError:
            plain = False
    return value if plain else double_quoted(value)


def double_quoted(value: str) -> str:
    """``value`` as a YAML double-quoted scalar, every character that is not printable
    escaped: a learned name is data from the sandbox, and a raw line break (``\\n``, but
    also ``\\x85`` or ``\\u2028``, which YAML folds into a space), a control character
    (which YAML refuses), a byte order mark or a lone surrogate (a non-UTF-8 byte of a
    file name, ``surrogateescape``) must neither change what it loads as nor make the file
    unreadable. Characters above U+FFFF use ``\\U`` (JSON's surrogate pairs would load as
    two lone surrogates)."""
    out = ['"']
    for ch in value:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x100:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _comment(rule: LearnedRule) -> str:
    if not rule.comment:
        return ""
    text = " ".join(rule.comment.split())
    return "  " + (text if text.startswith("#") else f"# {text}")


def _shape(path: str) -> str | dict[str, str] | None:
    section, _, key = path.partition(".")
    shape = BUILTIN_SECTIONS.get(section)
    if key and isinstance(shape, dict):
        return shape.get(key)
    return shape


def _is_scalar(rule: LearnedRule) -> bool:
    return isinstance(rule.value, str) and (rule.scalar or _shape(rule.path) == SCALAR)


def _group_order(rule: LearnedRule) -> int:
    return IMPORT_GROUPS.index(rule.group) if rule.group in IMPORT_GROUPS else len(IMPORT_GROUPS)


def _sorted_for_output(rules: list[LearnedRule]) -> list[LearnedRule]:
    if any(r.group for r in rules):
        return sorted(rules, key=_group_order)  # stable: learned order within a group
    return rules


def _block_items(rules: list[LearnedRule], indent: str, last_group: Any = None) -> list[str]:
    """Lines of a block list (or mapping, for pair values) at ``indent``."""
    lines: list[str] = []
    for rule in _sorted_for_output(rules):
        if rule.group and rule.group != last_group:
            lines.append(f"{indent}# {_GROUP_TITLES.get(rule.group, rule.group)}")
            last_group = rule.group
        if isinstance(rule.value, tuple):
            name, value = rule.value
            lines.append(f"{indent}{scalar_text(name)}: {scalar_text(value)}{_comment(rule)}")
        else:
            lines.append(f"{indent}- {scalar_text(rule.value)}{_comment(rule)}")
    return lines


def _render_key(key: str, rules: list[LearnedRule], indent: str, step: str) -> list[str]:
    """``key:`` followed by its rules, at ``indent``."""
    if len(rules) == 1 and _is_scalar(rules[0]):
        value = rules[0].value
        assert isinstance(value, str)
        return [f"{indent}{scalar_text(key)}: {scalar_text(value)}{_comment(rules[0])}"]
    return [f"{indent}{scalar_text(key)}:", *_block_items(rules, indent + step)]


def _render_section(section: str, rules: list[LearnedRule], indent: str, step: str) -> list[str]:
    direct = [r for r in rules if r.key is None]
    keyed: dict[str, list[LearnedRule]] = {}
    for r in rules:
        if r.key is not None:
            keyed.setdefault(r.key, []).append(r)
    if direct and not keyed:
        return _render_key(section, direct, indent, step)
    lines = [f"{indent}{scalar_text(section)}:"]
    lines += _block_items(direct, indent + step)
    for key, krules in keyed.items():
        lines += _render_key(key, krules, indent + step, step)
    return lines


def _by_section(rules: Iterable[LearnedRule]) -> dict[str, list[LearnedRule]]:
    out: dict[str, list[LearnedRule]] = {}
    for r in rules:
        out.setdefault(r.section, []).append(r)
    return out


def render_new(rules: list[LearnedRule], *, date: str) -> str:
    """A whole new profile holding ``rules``."""
    lines = HEADER.format(date=date).splitlines()
    sections = _by_section(rules)
    if "version" not in sections:
        lines.append("version: 1")
    order = [s for s in SECTION_ORDER if s in sections] + [
        s for s in sections if s not in SECTION_ORDER
    ]
    for section in order:
        lines += _render_section(section, sections[section], "", "  ")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# What the file already holds
# ---------------------------------------------------------------------------------------


def _norm_path(text: str) -> str:
    text = text.strip()
    if len(text) > 1:
        text = text.rstrip("/")
    return os.path.normpath(text) if text else text


def _covers(root: str, path: str) -> bool:
    if root == path:
        return True
    if root == ".":
        return not (path.startswith(("/", "~", "$", "..")) or path == ".")
    return is_within(path, root)


class _Existing:
    """The values already written in the file, for deduplication."""

    def __init__(self) -> None:
        self.values: dict[str, list[str]] = {}
        self.present: set[str] = set()  # dotted keys that exist (any value)

    def add(self, path: str, value: str) -> None:
        self.values.setdefault(path, []).append(value)

    def has(self, rule: LearnedRule) -> bool:
        path, value = rule.path, rule.value
        if isinstance(value, tuple):
            name = value[0]
            from fnmatch import fnmatchcase

            names = self.values.get(path, [])
            return any(n == name or fnmatchcase(name, n) for n in names)
        if _is_scalar(rule):
            return path in self.present
        if rule.section == "files" and rule.key in ("expose-ro", "expose-rw"):
            keys = ["files.expose-rw"] + (["files.expose-ro"] if rule.key == "expose-ro" else [])
            p = _norm_path(value)
            return any(_covers(_norm_path(e), p) for k in keys for e in self.values.get(k, []))
        if rule.section == "imports":
            return value in self.values.get("imports", []) or "*" in self.values.get("imports", [])
        if rule.section == "api":
            return any(
                value == e.strip()
                for k in ("api.allow", "api.deny")
                for e in self.values.get(k, [])
            )
        if rule.section == "network":
            words = value.lower().split()
            return any(e.lower().split() == words for e in self.values.get("network", []))
        return value in self.values.get(path, [])


def _collect_existing(root: Any) -> _Existing:
    import yaml

    found = _Existing()
    if not isinstance(root, yaml.MappingNode):
        return found

    def walk(node: Any, path: str) -> None:
        found.present.add(path)
        if isinstance(node, yaml.ScalarNode):
            if node.value and node.tag != "tag:yaml.org,2002:null":
                for v in node.value.split(",") if path == "imports" else [node.value]:
                    found.add(path, v.strip() if path == "imports" else v)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                if isinstance(item, yaml.ScalarNode):
                    walk(item, path)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    found.add(path, k.value)  # mapping names, for (name, value) rules
                    walk(v, f"{path}.{k.value}" if path else k.value)

    walk(root, "")
    return found


# ---------------------------------------------------------------------------------------
# Text merge
# ---------------------------------------------------------------------------------------


class _Editor:
    """Collects insertions/replacements by character index, applies them back to front."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.edits: list[tuple[int, int, int, str]] = []  # start, end, seq, replacement
        self.newline = "\r\n" if "\r\n" in text else "\n"

    def insert(self, index: int, text: str) -> None:
        self.edits.append((index, index, len(self.edits), text))

    def replace(self, start: int, end: int, text: str) -> None:
        self.edits.append((start, end, len(self.edits), text))

    def insert_lines(self, index: int, lines: list[str]) -> None:
        """Insert whole lines at ``index`` (a line start, or the end of an unterminated text)."""
        nl = self.newline
        prefix = (
            nl if index == len(self.text) and self.text and not self.text.endswith("\n") else ""
        )
        self.insert(index, prefix + nl.join(lines) + nl)

    def result(self) -> str:
        text = self.text
        for start, end, _seq, repl in sorted(self.edits, key=lambda e: (e[0], e[2]), reverse=True):
            text = text[:start] + repl + text[end:]
        return text

    # -- positions --

    def after_line(self, index: int) -> int:
        """The start of the line after the one holding ``index - 1`` (or ``index``)."""
        if index > 0 and self.text[index - 1] == "\n":
            return index
        nl = self.text.find("\n", index)
        return len(self.text) if nl == -1 else nl + 1

    def column(self, index: int) -> int:
        return index - (self.text.rfind("\n", 0, index) + 1)

    def dash_column(self, item_index: int) -> int:
        line_start = self.text.rfind("\n", 0, item_index) + 1
        dash = self.text.rfind("-", line_start, item_index)
        return (dash if dash != -1 else item_index) - line_start


def _flow_pair(name: str, value: str) -> str:
    return f"{scalar_text(name, flow=True)}: {scalar_text(value, flow=True)}"


def _last_end(node: Any) -> int:
    """Index just after the last character that belongs to ``node`` (comments excluded)."""
    import yaml

    if isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False):
        return node.end_mark.index
    if isinstance(node, yaml.SequenceNode) and node.value:
        return _last_end(node.value[-1])
    if isinstance(node, yaml.MappingNode) and node.value:
        key, value = node.value[-1]
        if isinstance(value, yaml.ScalarNode) and value.start_mark.index == value.end_mark.index:
            return max(key.end_mark.index, value.end_mark.index)
        return _last_end(value)
    return node.end_mark.index


def _is_implicit_null(node: Any) -> bool:
    import yaml

    return isinstance(node, yaml.ScalarNode) and node.start_mark.index == node.end_mark.index


def _is_null(node: Any) -> bool:
    import yaml

    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


class _Merger:
    def __init__(self, text: str, root: Any, display: str) -> None:
        self.ed = _Editor(text)
        self.root = root
        self.display = display
        self.step = "  "

    def fail(self, node: Any, msg: str) -> ProfileError:
        line = node.start_mark.line + 1 if node is not None else 1
        return ProfileError([f"{self.display}:{line}: cannot merge learned rules: {msg}"])

    @staticmethod
    def child(mapping: Any, key: str) -> tuple[Any, Any] | None:
        for k, v in mapping.value:
            if getattr(k, "value", None) == key:
                return k, v
        return None

    def key_indent(self, mapping: Any) -> str:
        return " " * mapping.value[0][0].start_mark.column

    # -- inserting into a value that exists --

    def into_value(self, keynode: Any, node: Any, rules: list[LearnedRule], path: str) -> None:
        import yaml

        key_col = self.ed.column(keynode.start_mark.index)
        child_indent = " " * (key_col + len(self.step))
        if _is_implicit_null(node):  # `key:` with nothing after it
            self.ed.insert_lines(
                self.ed.after_line(node.end_mark.index), self.lines_for(rules, child_indent, path)
            )
        elif isinstance(node, yaml.SequenceNode):
            self.into_list(node, rules, keynode.end_mark.index)
        elif isinstance(node, yaml.MappingNode):
            self.into_mapping(node, rules, path, child_indent)
        elif isinstance(node, yaml.ScalarNode):  # `imports: json` or `imports: ~`
            if any(isinstance(r.value, tuple) or r.path != path for r in rules):
                raise self.fail(node, f"'{path}' holds a single value, not a mapping")
            old = (
                []
                if _is_null(node)
                else [self.ed.text[node.start_mark.index : node.end_mark.index]]
            )
            new = [scalar_text(str(r.value), flow=True) for r in rules]
            self.ed.replace(
                node.start_mark.index, node.end_mark.index, "[" + ", ".join(old + new) + "]"
            )
        else:
            raise self.fail(node, f"unexpected value for '{path}'")

    def lines_for(self, rules: list[LearnedRule], indent: str, path: str) -> list[str]:
        """Block lines for ``rules`` under an empty key (``path``) at ``indent``."""
        if "." in path:  # a sub-key: every rule is one of its items
            return _block_items(rules, indent)
        lines = _block_items([r for r in rules if r.key is None], indent)
        keyed: dict[str, list[LearnedRule]] = {}
        for r in rules:
            if r.key is not None:
                keyed.setdefault(r.key, []).append(r)
        for key, rs in keyed.items():
            lines += _render_key(key, rs, indent, self.step)
        return lines

    def into_list(self, node: Any, rules: list[LearnedRule], scan_from: int) -> None:
        if any(isinstance(r.value, tuple) for r in rules):
            raise self.fail(node, "a list cannot take name: value entries")
        if node.flow_style:
            new = [scalar_text(str(r.value), flow=True) for r in _sorted_for_output(rules)]
            if node.value:
                self.ed.insert(_last_end(node.value[-1]), ", " + ", ".join(new))
            else:
                self.ed.insert(node.end_mark.index - 1, ", ".join(new))
            return
        first = node.value[0]
        indent = " " * self.ed.dash_column(first.start_mark.index)
        # Grouped lists (imports) stay grouped: a rule joins the end of its group's run.
        last_of: dict[str, Any] = {}
        group = None
        pos = scan_from
        for item in node.value:
            group = self.header_group(pos, item.start_mark.index, group)
            if group is not None:
                last_of[group] = item
            pos = _last_end(item)
        rest: list[LearnedRule] = []
        for rule in _sorted_for_output(rules):
            anchor = last_of.get(rule.group) if rule.group else None
            if anchor is None:
                rest.append(rule)
            else:
                at = self.ed.after_line(_last_end(anchor))
                self.ed.insert_lines(at, _block_items([rule], indent, rule.group))
        if rest:
            at = self.ed.after_line(_last_end(node))
            self.ed.insert_lines(at, _block_items(rest, indent, self.header_group(pos, at, group)))

    def header_group(self, start: int, end: int, current: str | None) -> str | None:
        """The import group of the last group header comment in ``text[start:end]``."""
        titles = {title: group for group, title in _GROUP_TITLES.items()}
        for line in self.ed.text[start:end].splitlines():
            text = line.strip()
            if text.startswith("#"):
                current = titles.get(text[1:].strip(), current)
        return current

    def into_mapping(
        self, node: Any, rules: list[LearnedRule], path: str, default_indent: str
    ) -> None:
        """Add pair values (``env``) and sub-keys (``files.expose-rw``) to a mapping."""
        pairs = [
            r for r in rules if isinstance(r.value, tuple) and (r.key is None or r.path == path)
        ]
        pending: dict[str, list[LearnedRule]] = {}
        for r in rules:
            if r in pairs:
                continue
            if r.key is None:
                raise self.fail(node, f"'{path}' is a mapping; cannot add {r.value!r}")
            sub = self.child(node, r.key)
            if sub is not None:
                pending.setdefault(f"\0{r.key}", []).append(r)
            else:
                pending.setdefault(r.key, []).append(r)
        for key, rs in pending.items():
            if key.startswith("\0"):
                sub = self.child(node, key[1:])
                assert sub is not None
                self.into_value(sub[0], sub[1], rs, f"{path}.{key[1:]}")
        new_keys = {k: rs for k, rs in pending.items() if not k.startswith("\0")}
        if not pairs and not new_keys:
            return
        if node.flow_style:
            parts = [_flow_pair(*r.value) for r in pairs]  # type: ignore[misc]
            for key, rs in new_keys.items():
                if len(rs) == 1 and _is_scalar(rs[0]):
                    parts.append(
                        f"{scalar_text(key, flow=True)}: {scalar_text(str(rs[0].value), flow=True)}"
                    )
                elif all(isinstance(r.value, tuple) for r in rs):
                    entries = ", ".join(_flow_pair(*r.value) for r in rs)  # type: ignore[misc]
                    parts.append(f"{scalar_text(key, flow=True)}: {{{entries}}}")
                else:
                    items = ", ".join(
                        scalar_text(str(r.value), flow=True) for r in _sorted_for_output(rs)
                    )
                    parts.append(f"{scalar_text(key, flow=True)}: [{items}]")
            if node.value:
                self.ed.insert(_last_end(node.value[-1][1]), ", " + ", ".join(parts))
            else:
                self.ed.insert(node.end_mark.index - 1, ", ".join(parts))
            return
        indent = self.key_indent(node) if node.value else default_indent
        lines = _block_items(pairs, indent)
        for key, rs in new_keys.items():
            lines += _render_key(key, rs, indent, self.step)
        self.ed.insert_lines(self.ed.after_line(_last_end(node)), lines)

    # -- the whole file --

    def merge(self, rules: list[LearnedRule]) -> None:
        import yaml

        sections = _by_section(rules)
        root = self.root
        if root is not None and not isinstance(root, yaml.MappingNode):
            raise self.fail(root, "the profile is not a mapping of sections")
        if root is not None and root.flow_style:
            raise self.fail(root, "the profile is written as one flow mapping")
        new_sections: dict[str, list[LearnedRule]] = {}
        for section, rs in sections.items():
            found = self.child(root, section) if root is not None and root.value else None
            if found is None:
                new_sections[section] = rs
            else:
                self.into_value(found[0], found[1], rs, section)
        if new_sections:
            indent = self.key_indent(root) if root is not None and root.value else ""
            lines: list[str] = []
            order = [s for s in SECTION_ORDER if s in new_sections] + [
                s for s in new_sections if s not in SECTION_ORDER
            ]
            for section in order:
                lines += _render_section(section, new_sections[section], indent, self.step)
            self.ed.insert_lines(len(self.ed.text), lines)  # after everything, comments too


def _present(data: Any, rule: LearnedRule) -> bool:
    """Whether the re-parsed ``data`` holds ``rule`` (verification of the text merge)."""
    node = data.get(rule.section) if isinstance(data, dict) else None
    if rule.key is not None:
        node = node.get(rule.key) if isinstance(node, dict) else None
    if isinstance(rule.value, tuple):
        return isinstance(node, dict) and rule.value[0] in node
    if _is_scalar(rule):
        return node is not None
    if isinstance(node, str):
        node = [node]
    return isinstance(node, list) and rule.value in node


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def _write_atomic(path: str, text: str, mode: int | None) -> None:
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _merge_text(original: str, rules: list[LearnedRule], display: str) -> tuple[str, list]:
    """The merged text and the rules it adds; ProfileError when it cannot be done safely."""
    import yaml

    try:
        root = yaml.compose(original, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None)
        context = getattr(exc, "context", None)
        what = ", ".join(x for x in (context, problem) if x) or " ".join(str(exc).split())
        raise ProfileError([f"{display}:{line}: cannot merge learned rules: {what}"]) from None
    existing = _collect_existing(root)
    added = [r for r in rules if not existing.has(r)]
    if not added:
        return original, added
    merger = _Merger(original, root, display)
    merger.merge(added)
    text = merger.ed.result()
    try:
        ok = all(_present(yaml.safe_load(text), r) for r in added)
    except yaml.YAMLError:
        ok = False
    if not ok:
        raise ProfileError([f"{display}:1: cannot merge learned rules into this layout"])
    return text, added


def merge_learned(
    path: str,
    additions: LearnedProfile,
    *,
    on_write: Callable[[str, bytes], None] | None = None,
) -> str:
    """Merge ``additions`` into the profile at ``path`` (created when absent); return a summary.

    The summary (one line, then one indented line per section) has no ``pysb:`` prefix:
    the caller prints it on stderr with its own.

    Always writes a new file (even with nothing learned, so that the next run enforces);
    an existing file is only rewritten when something was added, its previous version kept
    as ``FILE.bak``. When the existing file cannot be merged into (invalid YAML, a layout
    the text merge does not handle), it is left untouched and the learned rules are written
    to ``FILE.learned.yaml``; the summary says so. Raises :class:`SandboxError` when the
    file cannot be read or written. ``on_write(path, data)`` is called with the exact bytes
    once ``path`` itself has been written (the pipeline trusts them:
    :mod:`pysb_core.profile.trust`).
    """
    path = os.path.abspath(path)
    display = display_path(path, os.getcwd())
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    rules = list(additions)
    try:
        try:
            with open(path, encoding="utf-8-sig", newline="") as f:
                original: str | None = f.read()
            mode: int | None = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            original, mode = None, None
            os.makedirs(os.path.dirname(path), exist_ok=True)

        if original is None or not original.strip():
            added, text = rules, render_new(rules, date=date)
        else:
            try:
                text, added = _merge_text(original, rules, display)
            except ProfileError as exc:  # never damage a person's file: put the rules beside it
                fallback = path + ".learned.yaml"
                _write_atomic(fallback, render_new(rules, date=date), None)
                return (
                    f"{exc.errors[0]}\n  the {len(rules)} learned rule(s) were written "
                    f"to {display_path(fallback, os.getcwd())} instead: review and copy them"
                ) + _dropped(additions)
            if text == original:
                return (
                    f"nothing new learned; {display} already holds every rule of this run"
                    + _dropped(additions)
                )
            _write_atomic(path + ".bak", original, mode)
        _write_atomic(path, text, mode)
        if on_write is not None:
            on_write(path, text.encode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SandboxError(f"cannot write the learned profile {display}: {reason}") from None
    return _summary(display, added, created=original is None) + _dropped(additions)


def _dropped(additions: LearnedProfile) -> str:
    """The summary's lines for learned records no rule was written for."""
    dropped = getattr(additions, "dropped", ())
    if not dropped:
        return ""
    lines = [
        f"\n  {len(dropped)} learned record(s) were not written: no access makes them "
        "(the sandboxed program wrote into the report channel?):"
    ]
    for family, what, why in dropped[:10]:
        shown = what if what.isprintable() else double_quoted(what)
        lines.append(f"    {family}: {shown}: {why}")
    if len(dropped) > 10:
        lines.append(f"    ... and {len(dropped) - 10} more")
    return "\n".join(lines)


def _summary(display: str, added: list[LearnedRule], *, created: bool) -> str:
    head = f"{'wrote' if created else 'updated'} {display}"
    if not created:
        head += f" (previous version kept as {display}.bak)"
    if not added:
        return f"{head}: nothing was learned; review it, then run again to enforce it"
    lines = [f"{head}: learned {len(added)} rule(s); review them before trusting the file:"]
    grouped: dict[str, list[str]] = {}
    for r in added:
        shown = f"{r.value[0]}={r.value[1]}" if isinstance(r.value, tuple) else r.value
        shown = shown if shown.isprintable() else double_quoted(shown)  # the terminal's too
        grouped.setdefault(r.path, []).append(shown)
    for where, values in grouped.items():
        lines.append(f"  {where}: {', '.join(values)}")
    return "\n".join(lines)
