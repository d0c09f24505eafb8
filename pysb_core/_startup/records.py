"""Frozen records without ``dataclasses``.

The policy and the events are read inside the sandboxed interpreter, whose start-up is a
budget: ``dataclasses`` imports ``inspect`` (with ``ast``, ``dis``, ``tokenize``...), about
6 ms here, and generates every method with ``exec``. ``@record`` gives the same surface
the code uses -- keyword/positional construction with defaults, immutability, equality,
hashing, ``repr``, ``replace()``, ``to_dict()``, pickling -- from one set of shared methods.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~4 ms inside the sandbox; annotations stay strings
if TYPE_CHECKING:
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")
else:

    def dataclass_transform(**_kwargs):  # type checkers see typing's; nothing to do at run time
        return lambda fn: fn


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Any) -> None:
        self.make = make


def field(*, default_factory: Any) -> Any:
    """A default built afresh for each instance (like ``dataclasses.field``)."""
    return _Factory(default_factory)


_MISSING = object()


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    fields = self._fields
    if len(args) > len(fields):
        raise TypeError(f"{type(self).__name__}() takes {len(fields)} arguments, got {len(args)}")
    values = dict(zip(fields, args, strict=False))
    for key, value in kwargs.items():
        if key not in self._field_set:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {key!r}")
        if key in values:
            raise TypeError(f"{type(self).__name__}() got multiple values for argument {key!r}")
        values[key] = value
    setter = object.__setattr__
    for name in fields:
        value = values.get(name, _MISSING)
        if value is _MISSING:
            default = self._defaults.get(name, _MISSING)
            if default is _MISSING:
                raise TypeError(f"{type(self).__name__}() missing required argument {name!r}")
            value = default.make() if isinstance(default, _Factory) else default
        setter(self, name, value)


def _setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, name) for name in self._fields)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash((self.__class__.__name__, *_values(self)))


def _repr(self: Any) -> str:
    inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
    return f"{type(self).__name__}({inner})"


class Record:
    """Base of every record: the methods ``@record`` installs, declared for type checkers."""

    __slots__ = ()

    def replace(self: T, **changes: Any) -> T:
        """A copy with ``changes`` applied (like ``dataclasses.replace``)."""
        return _replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Fields as plain data, recursively (JSON-ready)."""
        return asdict(self)  # type: ignore[no-any-return]


def _replace(self: T, **changes: Any) -> T:
    values = {name: getattr(self, name) for name in self._fields}  # type: ignore[attr-defined]
    values.update(changes)
    return type(self)(**values)


def _reduce(self: Any) -> tuple[Any, tuple[Any, ...]]:
    return (type(self), _values(self))


def asdict(value: Any) -> Any:
    """Records become dicts, tuples and lists become lists, recursively (JSON-ready)."""
    if hasattr(type(value), "_fields") and hasattr(type(value), "_defaults"):
        return {name: asdict(getattr(value, name)) for name in value._fields}
    if isinstance(value, (list, tuple)):
        return [asdict(v) for v in value]
    if isinstance(value, dict):
        return {k: asdict(v) for k, v in value.items()}
    return value


@dataclass_transform(field_specifiers=(field,))
def mutable_record(cls: type[T]) -> type[T]:
    """Like :func:`record`, but fields may be assigned (and instances are not hashable)."""
    return _make(cls, frozen=False)


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen record of its annotated fields (in declaration order)."""
    return _make(cls, frozen=True)


def _make(cls: type[T], *, frozen: bool) -> type[T]:
    names = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063 - no inspect here
    defaults: dict[str, Any] = {}
    for name in names:
        if name in cls.__dict__:
            defaults[name] = cls.__dict__[name]
            delattr(cls, name)
    cls._fields = names  # type: ignore[attr-defined]
    cls._field_set = frozenset(names)  # type: ignore[attr-defined]
    cls._defaults = defaults  # type: ignore[attr-defined]
    methods = {
        "__init__": _init,
        "__eq__": _eq,
        "__hash__": _hash if frozen else None,
        "__repr__": _repr,
        "__reduce__": _reduce,
    }
    if frozen:
        methods["__setattr__"] = _setattr
        methods["__delattr__"] = _delattr
    for name, fn in methods.items():
        if name not in cls.__dict__ or name in ("__init__", "__hash__", "__eq__"):
            setattr(cls, name, fn)
    return cls
