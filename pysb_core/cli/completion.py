"""Shell completion (click's ``_PYSB_COMPLETE``) for what click cannot see by itself.

``pysb run`` parses its own arguments (CPython's way, see :mod:`pysb_core.cli.argv`), so
click knows none of its options: the run command's catch-all argument completes them
here, and the values of ``--provider`` (installed provider names) and of the path
options. Setup for bash, zsh and fish is in the README ("Shell completion").
"""

from __future__ import annotations

from typing import Any

import click
from click.shell_completion import CompletionItem

from pysb_core.cli.argv import PYSB_OPTIONS

#: Options of ``pysb run`` whose value is a path (files or directories).
_PATH_OPTIONS = {
    "--profile": "file",
    "--events": "file",
    "--expose-ro": "dir",
    "--expose-rw": "dir",
}


def provider_items(incomplete: str) -> list[CompletionItem]:
    """Installed provider names starting with ``incomplete`` (entry-point metadata only:
    nothing is imported, so completion stays fast)."""
    from pysb_core.launch.drivers import provider_names

    return [CompletionItem(n) for n in provider_names() if n.startswith(incomplete)]


def complete_provider(_ctx: Any, _param: Any, incomplete: str) -> list[CompletionItem]:
    """``shell_complete`` callback of every ``--provider`` option."""
    return provider_items(incomplete)


def program_named(before: list[str]) -> bool:
    """The words typed so far name the program (a script, ``-m``/``-c``, ``-``): what
    follows is the program's, and pysb's options would be wrong there."""
    from pysb_core.cli.argv import UsageError, split_run_args

    try:
        return split_run_args(before).mode != "auto"
    except UsageError:
        return False  # a word pysb would refuse, or an option still waiting for its value


def complete_run_args(ctx: Any, _param: Any, incomplete: str) -> list[CompletionItem]:
    """Complete ``pysb run``: its long options, then the value of the option before;
    after the program's name, files only (the program's own arguments)."""
    before = list(ctx.params.get("args") or ())
    if program_named(before):
        return [CompletionItem(incomplete, type="file")]
    previous = before[-1] if before else ""
    if previous == "--provider":
        return provider_items(incomplete)
    if previous in _PATH_OPTIONS:
        return [CompletionItem(incomplete, type=_PATH_OPTIONS[previous])]
    if incomplete.startswith("-"):
        return run_option_items(incomplete)
    return [CompletionItem(incomplete, type="file")]


def run_option_items(incomplete: str) -> list[CompletionItem]:
    """pysb's own options of ``pysb run`` starting with ``incomplete``."""
    options = [f"--{name}" for name in PYSB_OPTIONS] + ["-h"]
    return [CompletionItem(o) for o in options if o.startswith(incomplete)]


class RunCommand(click.Command):
    """The ``run`` command as click sees it: click would complete a word starting with
    ``-`` from the command's declared options, and ``run`` declares none."""

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        if incomplete.startswith("-") and not program_named(list(ctx.params.get("args") or ())):
            return run_option_items(incomplete)
        return super().shell_complete(ctx, incomplete)
