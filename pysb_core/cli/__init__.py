"""The ``pysb`` command.

``pysb run`` takes a fast path without click (start-up time is a feature of a sandbox
you put in front of every tool call); every other command is a click command.
"""

from __future__ import annotations

import sys

#: Options every command takes that may also come before the command's name
#: (``pysb -q providers`` is ``pysb providers -q``).
GLOBAL_OPTIONS = ("-q", "--quiet", "-v", "--verbose")


def _command_first(args: list[str]) -> list[str]:
    """Move the :data:`GLOBAL_OPTIONS` typed before the command's name after it."""
    lead = 0
    while lead < len(args) and args[lead] in GLOBAL_OPTIONS:
        lead += 1
    if 0 < lead < len(args):
        return [args[lead], *args[:lead], *args[lead + 1 :]]
    return args


def main(argv: list[str] | None = None) -> int:
    args = _command_first(sys.argv[1:] if argv is None else list(argv))
    if args and args[0] == "run" and argv is None:
        from pysb_core.cli.run import process_main

        process_main(args[1:])  # this process is pysb run: it ends there
    if args and args[0] == "run":
        from pysb_core.cli.run import run_main

        code = run_main(args[1:])
        sys.stdout.flush()
        raise SystemExit(code)
    from pysb_core.cli.commands import main as click_main

    return click_main(args)


__all__ = ["main"]
