"""A sandboxed call's answer on its way from a Ray worker to the driver, still encoded.

Why (issue 26, "the same class checked through pysb-ray"): a Ray task's return value or
exception reaches the driver through Ray's own serializer, whose unpickler (cloudpickle's)
imports any module and calls any constructor that a pickle names. If the Ray worker decoded
the sandbox's answer and returned the object, Ray would encode it again by reference --
and the driver would import, say, the module of an exception class that only the worker
had loaded, then run that class's constructor with arguments chosen by the sandbox.

So the Ray worker decodes nothing: it gets the answer as the sandbox sent it
(``pysb_core.call_encoded``) and returns it in an :class:`EncodedAnswer`. That object is
pickled as a call of :func:`decoded` on the bytes, so wherever Ray delivers it (the
driver's ``ray.get``, or a task that takes the ``ObjectRef`` as an argument) the bytes are
decoded by ``pysb_core.decode_answer`` -- partial mode's restricted decoder and bounds,
against the modules loaded *there*. A raised exception, or a refusal of hostile data,
becomes a ``RayTaskError`` whose cause is that exception, so ``ray.get`` raises it as
that class (``RayTaskError(ToolError)``), as Ray does for any task that raised.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from pysb_core import decode_answer


class EncodedAnswer:
    """What a Ray task of pysb-ray returns: the answer's bytes and where they came from."""

    __slots__ = ("data", "function", "ip", "pid")

    def __init__(self, data: bytes, function: str) -> None:
        self.data = data
        self.function = function
        self.pid = os.getpid()
        self.ip = _node_ip()

    def __reduce__(self) -> tuple[Any, tuple[bytes, str, int, str]]:
        return decoded, (self.data, self.function, self.pid, self.ip)


def function_name(fn: Any) -> str:
    """``module.qualname`` of a sandboxed function, for the driver's messages."""
    target = getattr(fn, "__pysb_wrapped__", fn)
    module = getattr(target, "__module__", "?")
    return f"{module}.{getattr(target, '__qualname__', '?')}"


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # not in a Ray worker (direct use, tests)
        return "127.0.0.1"


def decoded(data: bytes, function: str, pid: int, ip: str) -> Any:
    """The value of the answer, or a ``RayTaskError`` (which ``ray.get`` raises) whose
    cause is the call's exception or the refusal of what the sandbox sent."""
    try:
        return decode_answer(data)
    except Exception as exc:
        return _task_error(exc, function, pid, ip)


def _task_error(exc: Exception, function: str, pid: int, ip: str) -> Any:
    from ray.exceptions import RayTaskError

    # Only the sandbox's own frames stay (named <sandbox: PATH>, their lines carried as
    # text: formatting opens no file): the decoder's frames here say nothing to the user.
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<sandbox"):
        tb = tb.tb_next
    exc.__traceback__ = tb
    text = "".join(traceback.format_exception(exc))
    if not text.startswith("Traceback"):
        text = "Traceback (most recent call last):\n" + text
    return RayTaskError(function, text, exc, proctitle=f"ray::{function}", pid=pid, ip=ip)


__all__ = ["EncodedAnswer", "decoded", "function_name"]
