"""pysb-guards: the Python layer of pysb.

Each module is one guard family, registered from the ``pysb.guards`` entry-point group:
:mod:`~pysb_guards.imports`, :mod:`~pysb_guards.files`, :mod:`~pysb_guards.network`,
:mod:`~pysb_guards.api` (with its :mod:`~pysb_guards.registry`) and :mod:`~pysb_guards.env`.
Their ``pysb_child_install`` / ``pysb_child_arm`` hooks run inside the sandboxed interpreter
before the program. This package imports nothing at import time: the sandbox starts fast.
"""
