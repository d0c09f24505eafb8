"""Which profile sections exist, their shapes, and the validators plugins attach to them.

The core knows the shape of every section of SPEC §4 (a scalar, a list, a mapping of
known sub-keys...). What a *value* means beyond its shape belongs to the family that
enforces it: the ``api`` guard knows its registry of sensitive functions, a provider knows
its options. Families receive a :class:`ProfileSchema` in the ``pysb_add_profile_keys``
hook and call :meth:`ProfileSchema.add_validator`; third-party plugins may declare whole
new top-level sections with :meth:`ProfileSchema.add_section`.

Validators are called once per file that sets the section, with the section's value as
plain data (strings expanded, each one a :class:`Located` ``str`` that knows its
``FILE:LINE``) and the location of the section key. They return messages: a message that
already starts with ``FILE:LINE: `` is kept, any other is prefixed with the section's
location.
"""

from __future__ import annotations

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    #: fn(value, location) -> list of messages
    Validator = Callable[[Any, str], "list[str] | None"]

SCALAR = "scalar"
LIST = "list"
ENV = "env"
PROVIDERS = "providers"
ANY = "any"

Shape = str | dict[str, str]

#: Top-level sections of SPEC §4 and their shapes (a dict: a mapping of known sub-keys).
BUILTIN_SECTIONS: dict[str, Shape] = {
    "version": SCALAR,
    "include": LIST,
    "provider": SCALAR,
    "python-guards": SCALAR,
    "learn": SCALAR,
    "env": ENV,
    "unenv": LIST,
    "files": {"expose-ro": LIST, "expose-rw": LIST, "ignore": LIST},
    "network": LIST,
    "imports": LIST,
    "api": {"allow": LIST, "deny": LIST},
    "limits": {
        "memory": SCALAR,
        "processes": SCALAR,
        "open-files": SCALAR,
        "cpu-time": SCALAR,
        "wall-time": SCALAR,
        "tmp": SCALAR,
    },
    "providers": PROVIDERS,
}

#: A message that already names its place (``FILE:LINE: `` or ``<cli>: ``).
_LOCATED = r"^(?:[^\s:][^:]*:\d+|<cli>): "


class Located(str):
    """A profile string that remembers where it was written (``.location`` = FILE:LINE)."""

    __slots__ = ("location",)
    location: str

    def __new__(cls, value: str, location: str) -> Located:
        self = super().__new__(cls, value)
        self.location = location
        return self


def did_you_mean(word: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """`` (did you mean 'x'?)`` when a choice is close to ``word``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ProfileSchema:
    """The sections a profile may hold and the validators that check their values."""

    def __init__(self) -> None:
        self.sections: dict[str, Shape] = dict(BUILTIN_SECTIONS)
        self._validators: dict[str, list[Validator]] = {}
        self.third_party: set[str] = set()
        self.host_only: set[str] = set()

    # -- registration (called from pysb_add_profile_keys) --

    def add_section(self, name: str, shape: Shape = ANY, *, host_only: bool = False) -> None:
        """Accept a new top-level section ``name`` (its plain value lands in Policy.extra).

        ``host_only``: the section never reaches the sandbox (secrets that a host-side
        service uses on the sandbox's behalf): the sandboxed interpreter's policy lacks it.
        """
        if name in BUILTIN_SECTIONS:
            raise ValueError(f"profile section {name!r} is built in")
        if not name or "." in name:
            raise ValueError(f"invalid profile section name {name!r}")
        self.sections[name] = shape
        self.third_party.add(name)
        if host_only:
            self.host_only.add(name)

    def add_validator(self, section: str, fn: Validator) -> None:
        """Run ``fn(value, location)`` on every occurrence of ``section``.

        ``section`` is a top-level name (``"api"``), or ``"providers.NAME"`` for the options
        of one provider. An unknown top-level name is declared as a new section.
        """
        top = section.split(".", 1)[0]
        if top not in self.sections:
            self.add_section(top)
        self._validators.setdefault(section, []).append(fn)

    # -- queries used by the merge step --

    def scalar_paths(self) -> frozenset[str]:
        """The places of the plugins' sections that hold one value (``section``, or
        ``section.key`` of a mapping shape): a learning run writes them as scalars."""
        found: set[str] = set()
        for name in self.third_party:
            shape = self.sections.get(name)
            if shape == SCALAR:
                found.add(name)
            elif isinstance(shape, dict):
                found.update(f"{name}.{key}" for key, sub in shape.items() if sub == SCALAR)
        return frozenset(found)

    def has_validators(self, section: str) -> bool:
        return section in self._validators

    def validate(self, section: str, value: Any, location: str) -> list[str]:
        """Run the validators of ``section``; a crashing validator is itself an error."""
        messages: list[str] = []
        for fn in self._validators.get(section, ()):
            try:
                found = fn(value, location) or []
            except Exception as exc:  # fail closed: a broken validator must not pass
                name = getattr(fn, "__qualname__", repr(fn))
                messages.append(f"{location}: {section}: validator {name} failed: {exc!r}")
                continue
            for msg in found:
                msg = str(msg)
                # re only here: a valid profile (every run) does not need it (~1.5 ms)
                import re

                located = re.match(_LOCATED, msg) or msg.startswith(f"{location}: ")
                messages.append(msg if located else f"{location}: {msg}")
        return messages
