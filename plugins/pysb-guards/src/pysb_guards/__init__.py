"""pysb-guards: the Python layer of pysb.

Each guard family is a package with the same layout: ``imports``, ``files``, ``network``,
``api`` (with :mod:`~pysb_guards.registry`) and ``env``. ``<family>.hooks`` is registered
from the ``pysb.guards`` entry-point group and holds the hooks the host calls (profile
validation, launch plan, ``pysb check``, learned rules); it stays light because every
``pysb run`` imports it. It names in ``PYSB_CHILD_MODULE`` the guard itself,
``<family>.guard``, whose ``pysb_child_install`` / ``pysb_child_arm`` hooks run inside the
sandboxed interpreter before the program, and which only that interpreter imports; it
installs the sealed decisions of ``<family>.engine``. :mod:`~pysb_guards._seal` holds the
doors, faces and audit hook every family builds on. This package (and each family's) imports
nothing at import time: the sandbox starts fast.
"""
