"""The sensitive-API guard: every function of the registry is denied unless a rule allows it.

One layout for every family: :mod:`.hooks` (the host side, the ``pysb.guards`` entry
point), :mod:`.guard` (installed inside the sandbox, ``PYSB_CHILD_MODULE``) and
:mod:`.engine` (the sealed decisions the guard installs). Nothing is imported here: the
host imports ``hooks`` at every start, the sandbox ``guard``.
"""
