"""The one pysb-ray module that runs inside the sandbox (as the worker's ``init_fn``).

Naming it as ``init_fn`` makes ``pysb_ray`` a program module of the sandboxed worker, so
``import pysb_ray`` in the user's module is allowed there as ``import pysb_core`` is.
"""


def ready() -> None:
    """Nothing to prepare: the user's modules are imported on their first call."""
