"""How the click commands talk: verbosity options and colour.

Colour only on a terminal, never when ``NO_COLOR`` is set to anything non-empty
(https://no-color.org) or ``TERM=dumb``; piped output (scripts, ``--json``) stays plain.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import IO, Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: Verbosity levels shared by every command.
QUIET, NORMAL, VERBOSE = -1, 0, 1


def colour_enabled(stream: IO[str] | None) -> bool:
    """Whether to colour what goes to ``stream``."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, colour: str, *, stream: IO[str] | None = None, bold: bool = False) -> str:
    """``text`` in ``colour`` when :func:`colour_enabled` for ``stream`` (stdout by default)."""
    target = stream if stream is not None else sys.stdout
    if not colour_enabled(target):
        return text
    return click.style(text, fg=colour, bold=bold)


def verbosity_options(func: F) -> F:
    """``--verbose`` / ``--quiet`` (``-v`` / ``-q``) for a command, which receives both
    flags and turns them into a level with :func:`level`."""
    func = click.option(
        "-q", "--quiet", is_flag=True, help="Print only what was asked for (and errors)."
    )(func)
    func = click.option("-v", "--verbose", is_flag=True, help="Print more: details of each item.")(
        func
    )
    return func


def level(verbose: bool, quiet: bool) -> int:
    """:data:`QUIET`, :data:`NORMAL` or :data:`VERBOSE`; both flags is a usage error."""
    if verbose and quiet:
        raise click.UsageError("--verbose and --quiet cannot be used together")
    return VERBOSE if verbose else QUIET if quiet else NORMAL
