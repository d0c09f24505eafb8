"""``enum.StrEnum`` for the start path, without ``enum``.

``Capability`` (the plugin kits' ``StrEnum`` of what a provider enforces) is built at every
``pysb run``; ``enum`` costs about 2 ms to import, with ``functools``, ``collections``,
``operator``, ``keyword`` and ``reprlib`` that it brings. :class:`StrEnum` gives what a
``StrEnum`` member and class are to the code that uses them: each member is a ``str``
(equal to its value, hashed, sorted, formatted, JSON-encoded as it), with ``name``,
``value`` and enum's ``repr``; the class iterates, counts and lists its members in
definition order, ``Cls(value)`` and ``Cls[name]`` find one (``ValueError`` /
``KeyError`` otherwise), ``in`` takes members (and values from 3.12 on, as enum does);
members pickle and copy as themselves. Type checkers see ``enum.StrEnum`` itself
(``pysb_core.provider``). tests/test_startup_shims.py holds it to ``enum.StrEnum`` with
the same members.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # on the start path: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Any


#: Before 3.12, ``value in EnumClass`` raises ``TypeError`` for anything but a member.
_NO_VALUES_IN = sys.version_info < (3, 12)


class StrEnumType(type):
    """The metaclass: every public ``str`` attribute of the class body becomes a member."""

    _member_map_: dict[str, Any]
    _value2member_map_: dict[str, Any]

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> StrEnumType:
        cls = super().__new__(mcls, name, bases, ns)
        members: dict[str, Any] = {}
        for key, value in ns.items():
            if key.startswith("_") or type(value) is not str:
                continue
            member = str.__new__(cls, value)
            member._name_ = key
            member._value_ = value
            members[key] = member
            type.__setattr__(cls, key, member)
        cls._member_map_ = members
        cls._value2member_map_ = {m._value_: m for m in members.values()}
        return cls

    def __call__(cls, value: object) -> Any:
        if type(value) is cls:
            return value
        try:
            return cls._value2member_map_[value]
        except (KeyError, TypeError):
            raise ValueError(f"{value!r} is not a valid {cls.__qualname__}") from None

    def __getitem__(cls, name: str) -> Any:
        return cls._member_map_[name]

    def __iter__(cls) -> Iterator[Any]:
        return iter(list(cls._member_map_.values()))

    def __reversed__(cls) -> Iterator[Any]:
        return reversed(list(cls._member_map_.values()))

    def __len__(cls) -> int:
        return len(cls._member_map_)

    def __contains__(cls, value: object) -> bool:
        if type(value) is cls:
            return True
        if _NO_VALUES_IN:  # 3.11: a member only (enum warns first, then raises this)
            raise TypeError(
                f"unsupported operand type(s) for 'in': '{type(value).__qualname__}' and 'EnumType'"
            )
        try:
            return value in cls._value2member_map_
        except TypeError:
            return False

    @property
    def __members__(cls) -> Mapping[str, Any]:
        import types

        return types.MappingProxyType(cls._member_map_)

    def __repr__(cls) -> str:
        return f"<enum {cls.__name__!r}>"


class StrEnum(str, metaclass=StrEnumType):
    """Base of a light string enumeration (see the module's docstring)."""

    _name_: str
    _value_: str

    @property
    def name(self) -> str:
        return self._name_

    @property
    def value(self) -> str:
        return self._value_

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self._name_}: {str.__repr__(self)}>"

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)

    def __reduce_ex__(self, protocol: object) -> tuple[Any, tuple[str]]:
        return type(self), (self._value_,)

    def __copy__(self) -> StrEnum:
        return self

    def __deepcopy__(self, memo: object) -> StrEnum:
        return self

    __hash__ = str.__hash__
