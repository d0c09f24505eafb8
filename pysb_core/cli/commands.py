"""click commands: ``check``, ``providers``, ``plugins`` (and ``run --help``).

Domain errors never import click; they are mapped to exit codes here, in one place.
"""

from __future__ import annotations

import json
import sys

import click

from pysb_core import __version__
from pysb_core.errors import ExitCode, ProfileError, SandboxError

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="pysb", message="%(prog)s %(version)s")
def cli() -> None:
    """pysb: run Python code with only the capabilities a profile grants."""


@cli.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.pass_context
def run(ctx: click.Context) -> None:
    """Run a program in the sandbox (see `pysb run --help`)."""
    from pysb_core.cli.run import run_main

    ctx.exit(run_main(list(ctx.args)))


@cli.command()
@click.option("--profile", "profile", type=click.Path(dir_okay=False), help="Profile to check.")
@click.option("--provider", "provider", help="Provider to check against.")
@click.option("--no-python-guards", is_flag=True, help="Check the OS layer alone.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def check(profile: str | None, provider: str | None, no_python_guards: bool, as_json: bool) -> None:
    """Validate a profile and show which layer enforces each rule."""
    from pysb_core.cli.check import run_check

    sys.exit(run_check(profile, provider, no_python_guards, as_json))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def providers(as_json: bool) -> None:
    """List installed providers, whether they run here, and what they enforce."""
    from pysb_core.drivers import describe_providers

    infos = describe_providers()
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "name": i.name,
                        "distribution": i.distribution,
                        "version": i.version,
                        "available": i.status.available,
                        "reason": i.status.reason,
                        "fix": i.status.fix,
                        "enforces": list(i.enforces),
                        "description": i.description,
                        "details": i.status.details,
                    }
                    for i in infos
                ],
                indent=2,
                default=str,
            )
        )
        return
    for i in infos:
        state = "available" if i.status.available else "unavailable"
        click.echo(f"{i.name:<11} {i.distribution} {i.version}  {state}")
        if i.description:
            click.echo(f"    {i.description}")
        if not i.status.available:
            click.echo(f"    why: {i.status.reason}")
            if i.status.fix:
                click.echo(f"    fix: {i.status.fix}")
        click.echo(f"    enforces: {', '.join(i.enforces) or 'nothing at the OS level'}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins(as_json: bool) -> None:
    """List installed guards, providers and plugins with their hooks."""
    from pysb_core.cli.plugins import list_plugins

    rows = list_plugins()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        click.echo(f"{r['kind']:<8} {r['name']:<10} {r['distribution']} {r['version']}")
        click.echo(f"    hooks: {', '.join(r['hooks']) or '-'}")


def fail(exc: SandboxError) -> None:
    errors = exc.errors if isinstance(exc, ProfileError) else str(exc).splitlines()
    for line in errors:
        click.echo(f"pysb: error: {line}", err=True)
    sys.exit(ExitCode.SETUP_FAILED)
