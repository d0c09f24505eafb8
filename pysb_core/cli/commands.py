"""click commands: ``check``, ``trust``, ``providers``, ``plugins`` (and ``run --help``).

Domain errors never import click; they are mapped to exit codes here, in one place.
"""

from __future__ import annotations

import json
import os
import sys
from typing import NoReturn

import click

from pysb_core import __version__
from pysb_core.cli.completion import RunCommand, complete_provider, complete_run_args
from pysb_core.cli.output import QUIET, VERBOSE, level, paint, verbosity_options
from pysb_core.errors import ExitCode, ProfileError, SandboxError

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.group(context_settings=CONTEXT, invoke_without_command=True)
@click.version_option(
    __version__, "-V", "--version", prog_name="pysb", message="%(prog)s %(version)s"
)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """pysb: run Python code with only the capabilities a profile grants.

    -q/--quiet and -v/--verbose may also come before the command.
    """
    if ctx.invoked_subcommand is None:
        # `pysb` alone asks what pysb does: the help, on stdout, and success (as pip and
        # docker do; click's default is exit 2, git's is 1)
        click.echo(ctx.get_help())
        ctx.exit(0)


def main(args: list[str]) -> int:
    """The click commands, with their usage errors in pysb's words: ``pysb: error:``,
    the same wording as ``pysb run``'s own parser (:mod:`pysb_core.cli.argv`), then
    where the help is; exit status 2."""
    try:
        return int(cli.main(args=args, prog_name="pysb", standalone_mode=False) or 0)
    except click.exceptions.NoSuchOption as exc:
        hint = f" (did you mean {exc.possibilities[0]}?)" if exc.possibilities else ""
        message = f"no such option: {exc.option_name}{hint}"
        return _usage_error(exc.ctx, message)
    except click.UsageError as exc:
        return _usage_error(exc.ctx, exc.format_message())
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        sys.stderr.write("Aborted!\n")
        return 1
    except click.ClickException as exc:
        sys.stderr.write(f"pysb: error: {exc.format_message()}\n")
        return exc.exit_code


def _usage_error(ctx: click.Context | None, message: str) -> int:
    where = ctx.command_path if ctx is not None else "pysb"
    first, *rest = message.splitlines() or [""]
    sys.stderr.write(f"pysb: error: {first[:1].lower()}{first[1:]}\n")
    for line in rest:
        sys.stderr.write(f"pysb: error: {line}\n")
    sys.stderr.write(f"pysb: error: see '{where} --help'\n")
    return 2


@cli.command(
    cls=RunCommand,
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, shell_complete=complete_run_args)
@click.pass_context
def run(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Run a program in the sandbox (see `pysb run --help`)."""
    from pysb_core.cli.run import run_main

    ctx.exit(run_main([*args, *ctx.args]))


@cli.command()
@click.option("--profile", "profile", type=click.Path(dir_okay=False), help="Profile to check.")
@click.option(
    "--provider", "provider", help="Provider to check against.", shell_complete=complete_provider
)
@click.option("--no-python-guards", is_flag=True, help="Check the OS layer alone.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@verbosity_options
def check(
    profile: str | None,
    provider: str | None,
    no_python_guards: bool,
    as_json: bool,
    verbose: bool,
    quiet: bool,
) -> None:
    """Validate a profile and show which layer enforces each rule."""
    from pysb_core.cli.check import run_check

    verbosity = level(verbose, quiet)
    sys.exit(run_check(profile, provider, no_python_guards, as_json, verbosity=verbosity))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@verbosity_options
def providers(as_json: bool, verbose: bool, quiet: bool) -> None:
    """List installed providers, whether they run here, and what they enforce;
    then the first-party provider packages that are not installed."""
    from pysb_core.launch.drivers import describe_providers

    verbosity = level(verbose, quiet)
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
        state = paint("available", "green") if i.status.available else paint("unavailable", "red")
        click.echo(
            f"{paint(f'{i.name:<11}', 'cyan', bold=True)} {i.distribution} {i.version}  {state}"
        )
        if verbosity == QUIET:
            continue
        if i.description:
            click.echo(f"    {i.description}")
        if not i.status.available:
            click.echo(f"    why: {i.status.reason}")
            if i.status.fix:
                click.echo(f"    fix: {i.status.fix}")
        click.echo(f"    enforces: {', '.join(i.enforces) or 'nothing at the OS level'}")
        if verbosity == VERBOSE:
            for key, value in sorted((i.status.details or {}).items()):
                click.echo(f"    {key}: {value}")
    if verbosity != QUIET:
        _not_installed()


def _not_installed() -> None:
    """What ``pip install`` of each missing first-party package would add."""
    from pysb_core.launch.catalog import installed_distributions, missing_first_party

    missing = missing_first_party(installed_distributions())
    if not missing:
        return
    click.echo("")
    click.echo("Not installed (first-party packages):")
    for package in missing:
        click.echo(
            f"{paint(f'{package.distribution:<15}', 'yellow')} pip install {package.distribution}"
        )
        click.echo(f"    {package.description}")
        if package.provider:
            enforces = ", ".join(package.capabilities)
            click.echo(f"    provider '{package.provider}' would enforce: {enforces}")
        click.echo(f"    needs: {package.needs}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@verbosity_options
def plugins(as_json: bool, verbose: bool, quiet: bool) -> None:
    """List installed guards, providers and plugins with their hooks."""
    from pysb_core.cli.plugins import list_plugins

    verbosity = level(verbose, quiet)
    try:
        rows = list_plugins()
    except SandboxError as exc:  # a plugin that does not load: one paragraph, 125
        fail(exc)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        click.echo(f"{r['kind']:<8} {r['name']:<10} {r['distribution']} {r['version']}")
        if verbosity == QUIET:
            continue
        if r.get("family"):
            arms = (
                f"armed in the sandbox by {r['arms']}"
                if r.get("arms")
                else "NOTHING to arm: it enforces nothing"
            )
            click.echo(f"    family {r['family']}: {r['distribution']} {r['version']} ({arms})")
        if verbosity == VERBOSE:
            click.echo(f"    module: {r['module']}")
        click.echo(f"    hooks: {', '.join(r['hooks']) or '-'}")


@cli.command("import-profile")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option(
    "-o", "--output", "output", type=click.Path(dir_okay=False),
    help="Write the profile here (never overwrites); default: standard output.",
)  # fmt: skip
@verbosity_options
def import_profile(path: str, output: str | None, verbose: bool, quiet: bool) -> None:
    """Convert a pysandboxes 0.7.0 configuration (.py-sandboxes) into a pysb profile."""
    from pysb_core.cli.import_profile import import_profile as convert

    sys.exit(convert(path, output, verbosity=level(verbose, quiet)))


@cli.command()
@click.argument("profile", required=False, type=click.Path(dir_okay=False))
@click.option("--list", "list_", is_flag=True, help="List the trusted profiles.")
@click.option("--revoke", is_flag=True, help="Forget the trust of PROFILE.")
@verbosity_options
def trust(profile: str | None, list_: bool, revoke: bool, verbose: bool, quiet: bool) -> None:
    """Trust PROFILE (default ./.pysb.yaml) as it is now, with every file it includes.

    A profile that pysb finds by itself (next to the script, in the module's package, in
    the working directory) is used only once trusted, and only while its files are
    unchanged: review it first with `pysb check --profile PROFILE`.
    """
    from pysb_core.cli.trust import run_trust

    sys.exit(run_trust(profile, list_=list_, revoke=revoke, verbosity=level(verbose, quiet)))


def fail(exc: SandboxError) -> NoReturn:
    """Exit 125 with one ``pysb: error:`` paragraph (and the traceback under PYSB_DEBUG)."""
    if os.environ.get("PYSB_DEBUG"):
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    errors = exc.errors if isinstance(exc, ProfileError) else str(exc).splitlines()
    for line in errors:
        prefix = paint("pysb: error:", "red", stream=sys.stderr, bold=True)
        click.echo(f"{prefix} {line}", err=True)
    sys.exit(ExitCode.SETUP_FAILED)
