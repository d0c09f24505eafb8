"""Read profile files (and their includes) into located node trees.

Each file becomes a tree of plain tuples so that it can be cached with :mod:`marshal`
(see :mod:`pysb_core.profile.cache`) and so that every value keeps its line number:

- ``("s", line, value, raw)`` -- a scalar; ``value`` as ``yaml.safe_load`` would build it
  (str, int, float, bool or None; other types fall back to their source text), ``raw`` the
  source text;
- ``("l", line, [node, ...])`` -- a sequence;
- ``("m", line, [(key_node, value_node), ...])`` -- a mapping, in file order, duplicates kept
  (the merge step reports them).

``yaml`` is imported only on a cache miss. Includes are resolved here (relative to the
including file, ``~``, absolute; missing files skipped; each file once; an unreadable file
is an error, because skipping it could drop a ``learn: false`` lock).
"""

from __future__ import annotations

import os

from pysb_core.profile import cache
from pysb_core.profile.variables import VariableError, expand, is_absent

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    Node = tuple[Any, ...]


try:  # the C module directly: ``hashlib`` drags in OpenSSL (~4 ms)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - exotic builds
    from hashlib import blake2b

#: The algorithm of :func:`digest`, the prefix of every digest it returns.
DIGEST_ALGO = "blake2b-256"


def digest(data: bytes) -> str:
    """The digest of a profile file's bytes, as :mod:`pysb_core.profile.trust` records and compares
    it (:attr:`ProfileFile.digest`)."""
    return f"{DIGEST_ALGO}:{blake2b(data, digest_size=32).hexdigest()}"


_SCALAR_TYPES = (str, int, float, bool, type(None))
_MAP_TAG = "tag:yaml.org,2002:map"


class ProfileFile:
    """One file read for a profile: its canonical path, display name, node tree, and the
    digest of the bytes that were parsed (what :mod:`pysb_core.profile.trust` compares)."""

    __slots__ = ("digest", "directory", "display", "path", "tree")

    def __init__(
        self, path: str, display: str, directory: str, tree: Node | None, digest: str = ""
    ) -> None:
        self.path = path
        self.display = display
        self.directory = directory
        self.tree = tree
        self.digest = digest

    def loc(self, node_or_line: Node | int) -> str:
        line = node_or_line if isinstance(node_or_line, int) else node_or_line[1]
        return f"{self.display}:{line}"


def display_path(path: str, cwd: str) -> str:
    """The path as a user would write it: relative to ``cwd`` when below it."""
    cwd = cwd.rstrip(os.sep) or os.sep
    if path == cwd:
        return "."
    prefix = cwd if cwd.endswith(os.sep) else cwd + os.sep
    if path.startswith(prefix):
        return path[len(prefix) :]
    return path


# ---------------------------------------------------------------------------------------
# YAML -> node tree
# ---------------------------------------------------------------------------------------


def parse_text(text: str, display: str, *, pure: bool = False) -> tuple[Node | None, list[str]]:
    """Compose ``text`` with PyYAML's safe loader; return the tree or located errors.

    The libyaml-based ``CSafeLoader`` is used when available (``pure`` forces the Python
    one; both give the same tree), except for a text libyaml refuses for a ``\\udcXX``
    escape: that is how the learning writer spells a file name byte that is not UTF-8
    (``surrogateescape``), which only the Python loader reads back.
    """
    import yaml

    loader_cls = (None if pure else getattr(yaml, "CSafeLoader", None)) or yaml.SafeLoader
    loader = loader_cls(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []
        return _convert(node, loader, set()), []
    except yaml.MarkedYAMLError as exc:
        if not pure and "\\ud" in text and "Unicode character escape" in str(exc.problem):
            return parse_text(text, display, pure=True)
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        what = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem:
            what = f"{exc.context}, {exc.problem}"
        lines = text.splitlines()
        source = lines[line - 1] if 0 < line <= len(lines) else ""
        return None, [f"{display}:{line}: invalid YAML: {what}{_hint(what, source)}"]
    except yaml.reader.ReaderError as exc:
        # a character YAML does not accept (a NUL byte...): its line, not PyYAML's
        # "in <unicode string>, position N" second line
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        what = f"unacceptable character #x{char:04x}: {exc.reason}"
        return None, [f"{display}:{line}: invalid YAML: {what}"]
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, [f"{display}:1: invalid YAML: {first}"]
    except RecursionError:
        return None, [f"{display}:1: invalid YAML: structure nested too deeply"]
    finally:
        loader.dispose()


def _hint(what: str, source: str) -> str:
    """A short fix for the YAML mistakes profiles typically hold."""
    if "alias" in what and "*" in source:
        return ' (quote a value that starts with "*": "*" or "*_API_KEY")'
    if "${" in source and ("flow" in what or "{" in source):
        return ' (quote values holding ${...} inside [...] or {...}: "${TMPDIR:-/tmp}")'
    if "\t" in source[: len(source) - len(source.lstrip())]:
        return " (indent with spaces, not tabs)"
    return ""


def _convert(node: Any, loader: Any, active: set[int]) -> Node:
    import yaml

    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_object(node, deep=True)
        if not isinstance(value, _SCALAR_TYPES):
            value = node.value  # timestamps, binary...: keep the text
        return ("s", line, value, node.value)
    expected = "tag:yaml.org,2002:seq" if isinstance(node, yaml.SequenceNode) else _MAP_TAG
    if node.tag != expected:  # !!set, !!omap, !!python/...: not plain profile data
        raise yaml.MarkedYAMLError(
            problem=f"unsupported tag {node.tag!r}", problem_mark=node.start_mark
        )
    if id(node) in active:
        raise yaml.MarkedYAMLError(problem="recursive alias", problem_mark=node.start_mark)
    active.add(id(node))
    try:
        if isinstance(node, yaml.SequenceNode):
            return ("l", line, [_convert(item, loader, active) for item in node.value])
        loader.flatten_mapping(node)  # merge keys (<<), as safe_load does
        pairs = [(_convert(k, loader, active), _convert(v, loader, active)) for k, v in node.value]
        return ("m", line, pairs)
    finally:
        active.discard(id(node))


def read_tree(path: str, display: str, cache_dir: str | None) -> tuple[Node | None, list[str], str]:
    """Read ``path`` (already known to exist) through the cache; OSError propagates.

    Returns the tree, the errors and the digest of the bytes read (:func:`digest`).
    """
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        data = f.read()
    dig = digest(data)
    cached = cache.load(cache_dir, path, st, data)
    if cached is not None:
        return cached[0], [], dig
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return None, [f"{display}:{line}: not valid UTF-8"], dig
    tree, errors = parse_text(text, display)
    if not errors:
        cache.store(cache_dir, path, st, data, (tree,))
    return tree, errors, dig


# ---------------------------------------------------------------------------------------
# Includes
# ---------------------------------------------------------------------------------------


def _home(environ: Mapping[str, str]) -> str:
    return environ.get("HOME") or os.path.expanduser("~")


def expand_user(path: str, environ: Mapping[str, str]) -> str:
    """``~`` and ``~/x`` from the given environment's HOME; ``~user`` from the password db."""
    if path == "~" or path.startswith("~/"):
        return _home(environ) + path[1:]
    if path.startswith("~"):
        return os.path.expanduser(path)
    return path


def _include_entries(tree: Node | None) -> list[Node]:
    if tree is None or tree[0] != "m":
        return []
    entries: list[Node] = []
    for key, value in tree[2]:
        if key[0] == "s" and key[2] == "include":
            if value[0] == "l":
                entries.extend(value[2])
            elif value[0] == "s" and value[2] is not None:
                entries.append(value)
    return entries


def load_files(
    main: str, *, cwd: str, environ: Mapping[str, str], use_cache: bool = True
) -> tuple[list[ProfileFile], list[str]]:
    """Read ``main`` and, depth first, every file it includes; collect all errors."""
    cache_dir = cache.cache_dir(environ) if use_cache else None
    files: list[ProfileFile] = []
    errors: list[str] = []
    seen: set[str] = set()

    def visit(path: str, where: str | None) -> None:
        real = os.path.realpath(path)
        if real in seen:
            return
        shown = display_path(os.path.abspath(path), cwd)
        try:
            tree, errs, dig = read_tree(real, shown, cache_dir)
        except (FileNotFoundError, NotADirectoryError):
            if where is None:
                errors.append(f"{shown}:1: profile not found")
            return  # a missing include is skipped (SPEC §4)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if where is None:
                errors.append(f"{shown}:1: cannot read the profile: {reason}")
            else:
                errors.append(f"{where}: cannot read included file {shown!r}: {reason}")
            return
        seen.add(real)
        directory = os.path.dirname(os.path.abspath(path))
        pf = ProfileFile(real, shown, directory, tree, dig)
        files.append(pf)
        errors.extend(errs)
        for entry in _include_entries(tree):
            loc = pf.loc(entry)
            if entry[0] != "s" or not isinstance(entry[2], str) or not entry[2]:
                errors.append(f"{loc}: include: expected a file path")
                continue
            text = entry[2]
            try:
                if is_absent(text, environ, directory):
                    continue
                target = expand(text, environ, directory)
            except VariableError as exc:
                errors.append(f"{loc}: include: {exc}")
                continue
            target = expand_user(target, environ)
            if not os.path.isabs(target):
                target = os.path.join(directory, target)
            visit(os.path.normpath(target), loc)

    visit(main if os.path.isabs(main) else os.path.join(cwd, main), None)
    return files, errors
