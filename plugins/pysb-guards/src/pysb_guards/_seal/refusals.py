"""How sealed code refuses: :class:`Refusal` and :class:`Value`, made and read by C calls
only, and :func:`defer`'s placeholder for an exception built outside every sealed frame."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any


class Refusal:
    """What a door returns instead of raising: the face raises ``exc`` (with ``tb``)."""

    __slots__ = ("exc", "tb")

    def __init__(self, exc: BaseException, tb: Any = None) -> None:
        self.exc = exc
        self.tb = tb

    def raised(self) -> BaseException:
        """The exception the face raises: a :func:`defer` placeholder is built now."""
        return built(self.exc)


class Value:
    """What a judge returns to make the door answer ``value`` without calling the original
    (``os.access`` answers False for a hidden path)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


# Sealed code never calls code the program can change. Refusal, Value and every exception
# class with Python code (pysb's errors, ``socket.gaierror``...) are classes the program
# reaches through the class graph: their ``__init__`` can be replaced, and a replacement
# called from a judge would run the program's code with the judge's frame below it (a
# generator frame resumed there walks ``f_back`` to the judge's globals: nothing audits
# ``f_back``). So sealed code
#
# - raises :func:`defer`'s placeholder instead of constructing such an exception: a plain
#   ``RuntimeError`` (a static built-in type, constructed by C code alone) carrying the
#   class and its arguments. The door turns it into a Refusal and the face (or the audit
#   hook) builds the real exception with :func:`built`, when no sealed frame is left on the
#   stack. A fresh exception also carries no ``__context__`` from inside the judge;
# - makes its Refusal and Value objects with :func:`refusal_of` / :func:`value_of` (C calls:
#   ``object.__new__`` and the slots' own descriptors, taken at install), and reads them
#   with the descriptors too (``EXC_OF``): a property the program puts on the class in
#   place of a slot never runs in a sealed frame. Doors and faces do the same.
#
# The four are handed to sealed engines by :func:`builders` (``DEFER``, ``REFUSE``,
# ``NEW_VALUE``, ``EXC_OF``), as copies with private globals.

_DEFERRED = object()  # what marks a placeholder: only sealed code and built() use it


def defer(cls: type, *args: Any, **kwargs: Any) -> RuntimeError:
    """The placeholder sealed code raises (or refuses with) instead of ``cls(*args,
    **kwargs)``: the exception is built outside every sealed frame (:func:`built`)."""
    return RuntimeError(_DEFERRED, cls, args, kwargs)


def built(exc: BaseException) -> BaseException:
    """The exception ``exc`` stands for: a :func:`defer` placeholder is constructed now
    (in a face or the audit hook, where the program's code may run), anything else is
    itself. Runs outside sealed frames; what it runs is the program's own business."""
    if type(exc) is RuntimeError:
        a = exc.args
        if len(a) == 4 and a[0] is _DEFERRED:
            return a[1](*a[2], **a[3])
    return exc


def refusal_of(exc: BaseException, tb: Any = None) -> Refusal:
    """A :class:`Refusal` of ``exc``, made by C code alone (see above)."""
    r = _NEW(Refusal)
    _SET_EXC(r, exc)
    _SET_TB(r, tb)
    return r


def value_of(value: Any) -> Value:
    """A :class:`Value` of ``value``, made by C code alone (see above)."""
    v = _NEW(Value)
    _SET_VALUE(v, value)
    return v


_NEW = object.__new__
_SET_EXC = Refusal.__dict__["exc"].__set__
_SET_TB = Refusal.__dict__["tb"].__set__
_SET_VALUE = Value.__dict__["value"].__set__
_EXC_OF = Refusal.__dict__["exc"].__get__
_TB_OF = Refusal.__dict__["tb"].__get__
_VALUE_OF = Value.__dict__["value"].__get__


def _allow_all(args: tuple, kwargs: dict) -> None:
    """The judge that lets every call through (the doors use a private copy of it)."""
    return None
