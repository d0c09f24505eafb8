"""Starting partial-mode workers through the pipeline (profile, guards, provider).

One :class:`pysb_core.launch.pipeline.Session` per ``sandboxes()``: the profile is loaded and
checked once (fail closed, before any worker starts); every worker -- the first and each
restart -- is a ``Session.spawn`` of the "entry" program; ``finish`` writes learned rules
and runs the provider's clean-ups when the sandbox stops.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

ENTRY = "pysb_core.remote.worker:serve"


class SessionLauncher:
    """Adapter between :class:`~pysb_core.remote.client.Client` and the pipeline."""

    def __init__(self, **session_kwargs: Any) -> None:
        from pysb_core.launch.pipeline import Session

        # the caller's current stderr (warnings, the learning summary), not the one of import time
        session_kwargs.setdefault("stderr", sys.stderr)
        self.session = Session.create(**session_kwargs)
        self.provider = self.session.policy.provider
        #: Two pipes instead of a socketpair (Provider.partial_pipes, read by the Client).
        self.partial_pipes = bool(getattr(self.session.provider, "partial_pipes", False))

    def spawn(self, args: dict[str, Any], fds: list[int]) -> subprocess.Popen[bytes]:
        from pysb_core.launch.pipeline import Program

        program = Program(
            mode="entry", entry=ENTRY, args=args, argv=[sys.argv[0] if sys.argv else ""]
        )
        return self.session.spawn(program, pass_fds=fds, stdin=subprocess.DEVNULL)

    def release(self, proc: subprocess.Popen[bytes]) -> None:
        """A worker has exited: its own clean-ups run now, not at the end of the session."""
        self.session.release(proc)

    def finish(self, returncode: int | None) -> None:
        self.session.finish(returncode)
