"""Partial mode: ``@sandbox`` functions run in a sandboxed worker, the rest stays on the host.

Layout: ``api`` (the decorator, ``sandboxes()``, ``run()``), ``client`` (the host side of
one worker), ``worker`` (the sandboxed side), ``transport`` (frames over the inherited
socketpair), ``unpickler`` (the host's restricted decoder), ``exceptions`` (remote
exceptions and tracebacks), ``launcher`` (starting a worker through the pipeline).

Names are resolved lazily: the sandboxed worker imports this package too, and must not pay
for the host-side modules.
"""

from __future__ import annotations

from pysb_core._lazy import lazy_exports as _lazy_exports

TYPE_CHECKING = False  # typing is not imported inside the sandbox (start-up budget)

_EXPORTS = {
    "sandbox": "pysb_core.remote.api:sandbox",
    "sandboxes": "pysb_core.remote.api:sandboxes",
    "run": "pysb_core.remote.api:run",
    "Sandboxes": "pysb_core.remote.api:Sandboxes",
    "call_encoded": "pysb_core.remote.api:call_encoded",
    "decode_answer": "pysb_core.remote.answer:decode_answer",
    "is_in_sandbox": "pysb_core.remote.state:is_in_sandbox",
}

__all__ = sorted(_EXPORTS)

# pysb_core's own helper (no importlib package, hence no warnings, in the sandbox); dir()
# stays the module's own, as before
__getattr__, _dir = _lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover
    from pysb_core.remote.answer import decode_answer as decode_answer
    from pysb_core.remote.api import Sandboxes as Sandboxes
    from pysb_core.remote.api import call_encoded as call_encoded
    from pysb_core.remote.api import run as run
    from pysb_core.remote.api import sandbox as sandbox
    from pysb_core.remote.api import sandboxes as sandboxes
    from pysb_core.remote.state import is_in_sandbox as is_in_sandbox
