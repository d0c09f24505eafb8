"""Read a pysandboxes 0.7.0 configuration (``.py-sandboxes``) and convert it to a profile.

The format (one ``key=value`` per line, ``#`` comments outside quotes, ``include "path"``,
``${VAR}``) is described in docs/migrating.md. Every line lands in one of three places:

- a rule of the converted profile, when pysb has one that decides the same way;
- a *dropped* entry (a comment in the output naming ``FILE:LINE``, the line and why), when
  pysb has no equivalent or the line decides nothing in pysandboxes itself;
- an *error* (``FILE:LINE: message``), when pysandboxes itself would refuse the file.

Variables are kept as written (pysb expands the same ``${NAME}`` and ``${NAME:-default}``
forms at run time); only include paths are expanded, at conversion time, to read them.

Why one module: it is one converter of one foreign format: reading lines and includes, and one
small handler per key, all of which report into the same :class:`Converted` (rules, dropped
entries, errors). A new key of the format is one handler here; splitting reader from handlers
would separate each key from the line rules it depends on, and in one place nothing else in pysb
needs to know the format.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pysb_core.linux.paths import is_within
from pysb_core.profile.variables import VariableError, expand

#: Keys that take one value: given twice in the files, pysandboxes refuses the file.
SINGLE_KEYS = frozenset(
    {"os-sandbox", "py-sandbox", "port", "learn", "remote-result-guard", "remote-result-mode"}
)
LIST_KEYS = frozenset(
    {"env", "unenv", "expose-ro", "expose-rw", "ignore", "net", "python-import", "python-api"}
)
PROVIDERS = ("none", "subprocess", "landlock", "bwrap", "firejail", "unshare", "qemu")
EVAL_KEYS = frozenset(
    {
        "eval-syntax", "eval-call", "eval-attribute", "eval-import", "eval-magic",
        "eval-namespace", "eval-timeout", "eval-max-iterations", "eval-max-call-depth",
        "eval-max-depth", "eval-max-nodes", "eval-max-alloc", "eval-max-leaked-threads",
    }
)  # fmt: skip
#: The placeholder a new pysandboxes profile gets from its template (landlock or subprocess).
DEFAULT_PROVIDER_PLACEHOLDER = "@DEFAULT_OS_SANDBOX@"
#: How pysandboxes spells the two values of ``py-sandbox=`` (case-insensitive).
_TRUE = {"true", "1", ""}
_FALSE = {"false", "0", "none"}


@dataclass(frozen=True)
class Line:
    """One meaningful line: where it is, its key and its value (comment stripped)."""

    path: str
    number: int
    text: str
    key: str
    value: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.number}"


@dataclass
class Converted:
    """The profile being built, plus what was dropped and what is wrong."""

    scalars: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (yaml, where)
    env: list[tuple[str, str, str]] = field(default_factory=list)  # name, value, comment
    lists: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # section -> items
    provider_options: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    dropped: list[tuple[str, str, str]] = field(default_factory=list)  # where, line, why
    errors: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    single_seen: dict[str, list[str]] = field(default_factory=dict)

    def add(self, section: str, item: str, where: str) -> None:
        self.lists.setdefault(section, []).append((item, where))

    def drop(self, line: Line, why: str) -> None:
        self.dropped.append((line.where, line.text, why))

    def error(self, line: Line | None, message: str, where: str = "") -> None:
        self.errors.append(f"{line.where if line else where}: {message}")


# ---------------------------------------------------------------------------------------
# Lexical level
# ---------------------------------------------------------------------------------------


def strip_comment(text: str) -> str:
    """``text`` without its ``#`` comment; a ``#`` inside quotes is kept."""
    quote = ""
    escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return text[:i]
    return text


def read_lines(path: str, display: str, out: Converted) -> list[Line]:
    """The meaningful lines of one file (blank, comment and template lines left out)."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read().splitlines()
    except UnicodeDecodeError as exc:
        out.error(None, f"not a text file ({exc.reason})", where=display)
        return []
    lines: list[Line] = []
    for number, original in enumerate(raw, 1):
        text = strip_comment(original.strip()).strip()
        if not text or text.startswith("{"):
            continue
        if "\ue000" in text or "\ue001" in text:
            out.errors.append(f"{display}:{number}: private-use characters are refused")
            continue
        if text.startswith("include"):
            lines.append(Line(display, number, text, "include", text))
            continue
        key, eq, value = text.partition("=")
        if not eq:
            out.errors.append(f"{display}:{number}: Invalid rule '{text}': expected key=value")
            continue
        lines.append(Line(display, number, text, key.strip(), value.strip()))
    return lines


# ---------------------------------------------------------------------------------------
# Includes
# ---------------------------------------------------------------------------------------


def _include_target(line: Line, environ: Mapping[str, str], out: Converted) -> str | None:
    """Parse ``include "p"`` / ``include-platform=P "p"``; None when it does not apply."""
    text = line.text
    if text.startswith("include-platform"):
        head, _, rest = text.partition("=")
        platform, _, quoted = rest.strip().partition(" ")
        if head.strip() != "include-platform" or not platform:
            out.error(line, f"Invalid rule '{text}': use include-platform=PLATFORM \"path\"")
            return None
        if platform != sys.platform:
            out.drop(line, f"only for sys.platform {platform!r}; this machine is {sys.platform!r}")
            return None
    else:
        quoted = text[len("include") :].strip()
        if not text[len("include") :][:1].isspace():
            out.error(line, f"Invalid rule '{text}'")
            return None
    quoted = quoted.strip()
    if len(quoted) < 2 or not (quoted.startswith('"') and quoted.endswith('"')):
        out.error(line, f"Invalid rule '{text}': the included path must be double-quoted")
        return None
    try:
        return expand(quoted[1:-1], environ)
    except VariableError as exc:
        out.error(line, str(exc))
        return None


def _resolve_include(target: str, including: str, cwd: str, environ: Mapping[str, str]) -> str:
    """pysandboxes' rule: a name without ``/`` is next to the including file; any other
    path is ``~``-expanded, then taken from the working directory."""
    if "/" not in target:
        return os.path.join(os.path.dirname(including), target)
    if target.startswith("~"):
        home = environ.get("HOME") or os.path.expanduser("~")
        target = home + target[1:] if target == "~" or target.startswith("~/") else target
    return os.path.normpath(os.path.join(cwd, target))


def collect(
    path: str, *, cwd: str, environ: Mapping[str, str], out: Converted, seen: set[str]
) -> list[Line]:
    """Every line of ``path`` and of its includes (depth first, each file once)."""
    real = os.path.realpath(path)
    if real in seen:
        return []
    seen.add(real)
    display = os.path.relpath(path, cwd) if is_within(path, cwd) else path
    out.sources.append(display)
    lines: list[Line] = []
    for line in read_lines(path, display, out):
        if line.key not in ("include",) and not line.key.startswith("include-platform"):
            lines.append(line)
            continue
        target = _include_target(line, environ, out)
        if target is None:
            continue
        resolved = _resolve_include(target, path, cwd, environ)
        if not os.path.exists(resolved):
            out.drop(line, f"{resolved} does not exist here (pysandboxes skips it too)")
            continue
        if not os.access(resolved, os.R_OK) or os.path.isdir(resolved):
            out.error(line, f"cannot read included file {resolved!r}")
            continue
        lines.extend(collect(resolved, cwd=cwd, environ=environ, out=out, seen=seen))
    return lines


# ---------------------------------------------------------------------------------------
# Conversion of each key
# ---------------------------------------------------------------------------------------


def _check_variables(line: Line, out: Converted) -> bool:
    value = line.value
    if line.key == "env":
        # A glob key's pattern inside ${...} stands for each matching name: check the form
        # with a plain name in its place.
        name = value.partition("=")[0]
        if any(c in name for c in "*?["):
            value = value.replace("${" + name, "${GLOB_MATCH")
    try:
        expand(value, {})
    except VariableError as exc:
        out.error(line, str(exc))
        return False
    return True


def _env(line: Line, out: Converted) -> None:
    name, eq, value = line.value.partition("=")
    if not eq or not name:
        out.error(line, f"Invalid rule '{line.text}': use env=NAME=value")
        return
    out.env.append((name, value, line.where))


def _exposure(line: Line, out: Converted) -> None:
    value = line.value
    if not value:
        out.error(line, f"Invalid rule '{line.text}': empty path")
        return
    if "," in value:
        out.error(line, f"Invalid rule '{line.text}': one path per line")
        return
    if ":" in value and "${" not in value:
        out.drop(line, "a path with ':' would be read by pysb as SRC:DEST; expose its parent")
        return
    out.add(f"files.{line.key}", value, line.where)


def _ignore(line: Line, out: Converted) -> None:
    value = line.value
    if not value:
        out.error(line, f"Invalid rule '{line.text}': empty pattern")
        return
    if "/" in value and not value.startswith(("/", "${")):
        out.drop(
            line,
            "pysandboxes matches a relative pattern against one path component, so a "
            "pattern with '/' hides nothing there; in pysb it would hide that path "
            "(add it to files.ignore if that is what you meant)",
        )
        return
    out.add("files.ignore", value, line.where)


def _net(line: Line, out: Converted) -> None:
    fields = line.value.split("|")
    if len(fields) != 5:
        out.error(line, f"Invalid rule '{line.text}': net= takes 5 fields separated by '|'")
        return
    action, protos, network, ports, direction = (f.strip() for f in fields)
    if action not in ("ALLOW", "DENY"):
        out.error(line, f"Invalid rule '{line.text}': ACTION is ALLOW or DENY (uppercase)")
        return
    proto_set = {p.strip().lower() for p in protos.split(",")}
    if proto_set in ({"*"}, {"any"}, {"tcp", "udp"}):
        proto = "any"
    elif proto_set in ({"tcp"}, {"udp"}):
        proto = proto_set.pop()
    else:
        out.error(line, f"Invalid rule '{line.text}': PROTOCOL is tcp, udp, tcp,udp, * or any")
        return
    directions = {d.strip() for d in direction.split(",")}
    if directions in ({"*"}, {"IN", "OUT"}):
        way = "any"
    elif directions in ({"IN"}, {"OUT"}):
        way = directions.pop().lower()
    else:
        out.error(line, f"Invalid rule '{line.text}': DIRECTION is IN, OUT, IN,OUT or *")
        return
    if not network:
        out.error(line, f"Invalid rule '{line.text}': empty NETWORK")
        return
    if not ports:
        out.drop(
            line, "an empty PORTS field matches no port in pysandboxes: the rule decides nothing"
        )
        return
    rule = f"{action.lower()} {proto} {network} {ports} {way}"
    if "${" not in rule:
        from pysb_core.policy.netrules import parse_rule

        try:
            parse_rule(rule, line.where)
        except ValueError as exc:
            out.error(line, str(exc))
            return
    out.add("network", rule, line.where)


def _imports(line: Line, out: Converted) -> None:
    for name in (n.strip() for n in line.value.split(",")):
        if not name:
            continue
        if name == "pysandboxes":
            out.drop(line, "'pysandboxes' itself: pysb's own modules need no rule")
        elif "." in name:
            out.drop(
                line, f"'{name}' is dotted: pysandboxes never matches it (top-level names only)"
            )
        else:
            out.add("imports", name, line.where)


def _api(line: Line, out: Converted, known: Callable[[str], str | None]) -> None:
    action, colon, targets = line.value.partition(":")
    if not colon or action not in ("ALLOW", "DENY"):
        out.error(line, f"Invalid rule '{line.text}': use python-api=ALLOW:... or DENY:...")
        return
    names = [t.strip() for t in targets.split(",")]
    if any(not t for t in names):
        out.error(line, f"Invalid rule '{line.text}': empty target")
        return
    if any(t.startswith(("ALLOW:", "DENY:")) for t in names):
        out.error(line, f"Invalid rule '{line.text}': one action per line")
        return
    for target in names:
        problem = known(target)
        if problem:
            out.drop(line, f"'{target}': {problem}")
        else:
            out.add(f"api.{action.lower()}", target, line.where)


def _provider(line: Line, out: Converted, landlock_default: str) -> None:
    value = line.value.replace(DEFAULT_PROVIDER_PLACEHOLDER, landlock_default)
    bare = value.lower()
    if "${" not in bare and bare not in PROVIDERS:
        out.error(line, f"unknown os-sandbox '{line.value}' (one of {', '.join(PROVIDERS)})")
        return
    if bare == "none":
        out.drop(line, "'none' runs @sandbox functions unsandboxed; pysb has no such provider")
        return
    note = ""
    if DEFAULT_PROVIDER_PLACEHOLDER in line.value:
        note = f" ({DEFAULT_PROVIDER_PLACEHOLDER} filled as pysandboxes fills it here)"
    out.scalars["provider"] = (value.lower() if "${" not in value else value, line.where + note)


def _python_guards(line: Line, out: Converted) -> None:
    bare = line.value.lower()
    if bare in _TRUE:
        out.scalars["python-guards"] = ("true", line.where)
    elif bare in _FALSE:
        out.scalars["python-guards"] = ("false", line.where)
    else:
        out.error(line, f"Invalid rule '{line.text}': py-sandbox is true or false")


def _learn(line: Line, out: Converted) -> None:
    value = line.value
    if value.lower() == "false":
        out.scalars["learn"] = ("false", line.where + " (the lock)")
    elif value.lower() in ("true", "0", "1"):
        out.error(line, f"Invalid rule '{line.text}': learn= takes a file name or false")
    else:
        out.drop(
            line,
            "a learning run: pysb learns when no profile exists or with `pysb run --learn`; "
            "a converted profile is meant to be enforced",
        )


def _provider_option(line: Line, out: Converted) -> None:
    provider, _, key = line.key.partition(".")
    value = line.value
    mapped: tuple[str, str] | None = None
    if provider == "bwrap" and key == "hostname":
        mapped = ("hostname", value)
    elif provider == "firejail" and key == "net":
        mapped = ("bridge", value)
    elif provider == "qemu" and key == "memory":
        mapped = ("memory", value + "M" if value.isdigit() else value)
    elif provider == "qemu" and key == "use_kvm" and value.lower() in (*_FALSE, "no", "off"):
        mapped = ("accel", "tcg")
    elif provider == "qemu" and key == "use_kvm":
        mapped = ("accel", "auto")
    if mapped is None:
        why = {
            "bwrap": "pysb passes no extra bwrap arguments and never shares the host network",
            "unshare": "pysb passes no extra unshare arguments",
            "firejail": "pysb passes no extra firejail arguments",
        }.get(provider, f"pysb's {provider} provider has no such option")
        out.drop(line, why)
        return
    out.provider_options.setdefault(provider, []).append((mapped[0], mapped[1], line.where))


def convert_lines(
    lines: list[Line],
    out: Converted,
    *,
    known_api: Callable[[str], str | None],
    landlock_default: str,
) -> None:
    """Turn every collected line into a rule, a dropped entry or an error."""
    for line in lines:
        key = line.key
        if key in SINGLE_KEYS:
            out.single_seen.setdefault(key, []).append(line.where)
        if not _check_variables(line, out):
            continue
        if key == "env":
            _env(line, out)
        elif key == "unenv":
            if not line.value:
                out.error(line, f"Invalid rule '{line.text}': empty name")
            else:
                out.add("unenv", line.value, line.where)
        elif key in ("expose-ro", "expose-rw"):
            _exposure(line, out)
        elif key == "ignore":
            _ignore(line, out)
        elif key == "net":
            _net(line, out)
        elif key == "python-import":
            _imports(line, out)
        elif key == "python-api":
            _api(line, out, known_api)
        elif key == "os-sandbox":
            _provider(line, out, landlock_default)
        elif key == "py-sandbox":
            _python_guards(line, out)
        elif key == "learn":
            _learn(line, out)
        elif key == "port":
            out.drop(line, "pysb's partial mode talks over a socket pair, not a TCP port")
        elif key in ("remote-result-guard", "remote-result-mode"):
            out.drop(line, "pysb's results travel as data only (docs/partial-mode.md)")
        elif key.split(":", 1)[0] in EVAL_KEYS:
            out.drop(line, "pysb has no eval-* sub-language: eval/exec/compile are the "
                     "api category 'dynamic-code'")  # fmt: skip
        elif "." in key:
            _provider_option(line, out)
        else:
            out.error(line, f"Invalid rule '{line.text}'")
    for key, places in out.single_seen.items():
        if len(places) > 1:
            out.errors.append(f"{places[1]}: Multiple {key} parameters ({', '.join(places)})")
