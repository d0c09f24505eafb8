"""pysb on a Ray cluster: ``@sandboxed`` functions run as Ray tasks inside pysb sandboxes.

Names are resolved lazily: the sandboxed worker imports this package too (the modules that
define sandboxed functions import it to decorate them), and must import neither Ray nor the
driver-side modules there. The two modules the sandbox loads (this one and ``decorator``)
import nothing but ``sys`` and ``pysb_core``: when pysb-ray is not installed in
site-packages (an editable install), the import guard judges their imports as the
program's, against the user's profile.
"""

import sys

TYPE_CHECKING = False  # typing is not imported inside the sandbox

__version__ = "0.1.0"

_EXPORTS = {
    "sandboxed": "pysb_ray.decorator",
    "SandboxedFunction": "pysb_ray.decorator",
    "SandboxPool": "pysb_ray.pool",
    "ProfileSpec": "pysb_ray.spec",
}

__all__ = ["ProfileSpec", "SandboxPool", "SandboxedFunction", "__version__", "sandboxed"]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pysb_ray' has no attribute {name!r}")
    __import__(module)
    value = getattr(sys.modules[module], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover
    from pysb_ray.decorator import SandboxedFunction as SandboxedFunction
    from pysb_ray.decorator import sandboxed as sandboxed
    from pysb_ray.pool import SandboxPool as SandboxPool
    from pysb_ray.spec import ProfileSpec as ProfileSpec
