"""Partial mode: ``@sandbox`` functions run in a sandboxed worker, the rest stays on the host.

Layout: ``api`` (the decorator, ``sandboxes()``, ``run()``), ``client`` (the host side of
one worker), ``worker`` (the sandboxed side), ``transport`` (frames over the inherited
socketpair), ``unpickler`` (the host's restricted decoder), ``exceptions`` (remote
exceptions and tracebacks), ``launcher`` (starting a worker through the pipeline).

Names are resolved lazily: the sandboxed worker imports this package too, and must not pay
for the host-side modules.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # typing is not imported inside the sandbox (start-up budget)

_EXPORTS = {
    "sandbox": "pysb_core.remote.api",
    "sandboxes": "pysb_core.remote.api",
    "run": "pysb_core.remote.api",
    "Sandboxes": "pysb_core.remote.api",
    "call_encoded": "pysb_core.remote.api",
    "decode_answer": "pysb_core.remote.answer",
    "is_in_sandbox": "pysb_core.remote.state",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pysb_core.remote' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from pysb_core.remote.answer import decode_answer as decode_answer
    from pysb_core.remote.api import Sandboxes as Sandboxes
    from pysb_core.remote.api import call_encoded as call_encoded
    from pysb_core.remote.api import run as run
    from pysb_core.remote.api import sandbox as sandbox
    from pysb_core.remote.api import sandboxes as sandboxes
    from pysb_core.remote.state import is_in_sandbox as is_in_sandbox
