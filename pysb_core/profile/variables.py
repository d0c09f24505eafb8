"""``${NAME}`` / ``${NAME:-default}`` expansion of profile strings (SPEC §4 "Variables").

One left-to-right pass: the text a variable expands to is copied as-is and never scanned
again, so a host value holding ``${...}`` cannot inject another expansion ("never expanded
twice"). Defaults may nest (``${TMPDIR:-${TMP:-/tmp}}``) because a default is itself parsed
by the same pass. Any other ``${...}`` form is refused: a typo must not silently become an
empty string.

``$${`` is a literal ``${`` (the one escape; a ``$`` anywhere else is itself): what a
learning run writes is data, and a recorded name holding ``${`` must read back as itself,
never as a variable (issue 26: a directory named ``${X:-..}`` was learned as
``./${X:-..}`` and read as ``./..``). :func:`pysb_core.profile.learning.literal` spells any
text so (there, not here: the profile package reads the learning module).
"""

from __future__ import annotations

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping

PROFILE_DIR = "PROFILE_DIR"


class VariableError(ValueError):
    """A malformed ``${...}`` form; the message says which and where in the string."""


def _is_name_start(ch: str) -> bool:
    return ch == "_" or ("A" <= ch <= "Z") or ("a" <= ch <= "z")


def _is_name_char(ch: str) -> bool:
    return _is_name_start(ch) or ("0" <= ch <= "9")


class _Expander:
    __slots__ = ("environ", "profile_dir", "text")

    def __init__(self, text: str, environ: Mapping[str, str], profile_dir: str | None) -> None:
        self.text = text
        self.environ = environ
        self.profile_dir = profile_dir

    def lookup(self, name: str) -> str | None:
        if name == PROFILE_DIR and self.profile_dir is not None:
            return self.profile_dir
        return self.environ.get(name)

    def parse(self, pos: int, in_default: bool) -> tuple[str, int]:
        """Expand from ``pos`` until the end (or the ``}`` closing a default)."""
        text = self.text
        out: list[str] = []
        n = len(text)
        while pos < n:
            ch = text[pos]
            if ch == "$" and text.startswith("$${", pos):
                out.append("${")
                pos += 3
                continue
            if ch == "$" and text.startswith("${", pos):
                value, pos = self.variable(pos)
                out.append(value)
                continue
            if ch == "}" and in_default:
                return "".join(out), pos
            out.append(ch)
            pos += 1
        if in_default:
            raise VariableError(f"unterminated '${{' in {self.text!r}")
        return "".join(out), pos

    def variable(self, start: int) -> tuple[str, int]:
        """Expand the ``${...}`` starting at ``start``; return its value and the next index."""
        text = self.text
        pos = start + 2
        name_start = pos
        if pos < len(text) and _is_name_start(text[pos]):
            pos += 1
            while pos < len(text) and _is_name_char(text[pos]):
                pos += 1
        name = text[name_start:pos]
        if not name:
            raise VariableError(self._bad_form(start))
        if text.startswith("}", pos):
            value = self.lookup(name)
            return (value if value is not None else ""), pos + 1
        if text.startswith(":-", pos):
            default, end = self.parse(pos + 2, in_default=True)
            value = self.lookup(name)
            return (value if value else default), end + 1
        raise VariableError(self._bad_form(start))

    def _bad_form(self, start: int) -> str:
        end = self.text.find("}", start)
        form = self.text[start : end + 1] if end != -1 else self.text[start:]
        if end == -1:
            return f"unterminated '${{' in {self.text!r}"
        return f"invalid variable {form!r}: use ${{NAME}} or ${{NAME:-default}}"


def expand(text: str, environ: Mapping[str, str], profile_dir: str | None = None) -> str:
    """Return ``text`` with every ``${...}`` expanded; raise :class:`VariableError`.

    An unset variable without a default expands to the empty string; ``${NAME:-d}`` uses
    ``d`` when NAME is unset *or empty* (as the shell does).
    """
    if "${" not in text:
        return text
    value, _ = _Expander(text, environ, profile_dir).parse(0, in_default=False)
    return value


def lone_variable(text: str) -> str | None:
    """Return NAME when ``text`` is exactly ``${NAME}`` (no default), else ``None``.

    Such a value whose variable is unset means "leave this entry out" rather than "empty".
    """
    if len(text) > 3 and text.startswith("${") and text.endswith("}"):
        name = text[2:-1]
        if _is_name_start(name[0]) and all(_is_name_char(c) for c in name):
            return name
    return None


def is_absent(text: str, environ: Mapping[str, str], profile_dir: str | None = None) -> bool:
    """True when ``text`` is a lone ``${X}`` whose X is unset: the entry is left out."""
    name = lone_variable(text)
    if name is None:
        return False
    if name == PROFILE_DIR and profile_dir is not None:
        return False
    return name not in environ
