"""The ``pysb`` command.

``pysb run`` takes a fast path without click (start-up time is a feature of a sandbox
you put in front of every tool call); every other command is a click command.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "run" and argv is None:
        from pysb_core.cli.run import process_main

        process_main(args[1:])  # this process is pysb run: it ends there
    if args and args[0] == "run":
        from pysb_core.cli.run import run_main

        code = run_main(args[1:])
        sys.stdout.flush()
        raise SystemExit(code)
    from pysb_core.cli.commands import cli

    return cli.main(args=args, prog_name="pysb")


__all__ = ["main"]
