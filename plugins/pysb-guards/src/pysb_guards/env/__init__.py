"""The environment guard: enforced by construction, learned by watching ``os.environ``.

One layout for every family: :mod:`.hooks` (the host side, the ``pysb.guards`` entry
point), :mod:`.guard` (installed inside the sandbox, ``PYSB_CHILD_MODULE``) and
:mod:`.engine` (the decisions the guard installs: here, which reads a learning run
records; nothing is refused, so nothing is sealed but the recorder). Nothing is imported
here: the host imports ``hooks`` at every start, the sandbox ``guard``.
"""
