"""pysb-guards: the Python layer of pysb.

Each guard family is two modules. ``<family>_hooks`` is registered from the ``pysb.guards``
entry-point group and holds the hooks the host calls (profile validation, launch plan,
``pysb check``, learned rules); it stays light because every ``pysb run`` imports it. It
names in ``PYSB_CHILD_MODULE`` the guard itself -- :mod:`~pysb_guards.imports`,
:mod:`~pysb_guards.files`, :mod:`~pysb_guards.network`, :mod:`~pysb_guards.api` (with its
:mod:`~pysb_guards.registry`) and :mod:`~pysb_guards.env` -- whose ``pysb_child_install`` /
``pysb_child_arm`` hooks run inside the sandboxed interpreter before the program, and which
only that interpreter imports. This package imports nothing at import time: the sandbox
starts fast.
"""
