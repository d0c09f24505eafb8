"""``pysb run``: the whole program in the sandbox, with CPython's command line.

This path does not import click: ``pysb run -c pass`` must start fast, and CPython-style
argument splitting is not click's job anyway. ``pysb run --help`` goes through click.
"""

from __future__ import annotations

import os
import sys

from pysb_core.cli.argv import RunArgs, UsageError, split_run_args
from pysb_core.errors import ProfileError, SandboxError

TYPE_CHECKING = False  # `pysb run` start-up: no typing at run time
if TYPE_CHECKING:
    from typing import NoReturn

#: ``ExitCode.SETUP_FAILED`` as a plain int: the IntEnum would import ``enum`` at every
#: start (tests/test_startup_imports.py).
SETUP_FAILED = 125

RUN_HELP = """\
Usage: pysb run [PYSB OPTIONS] [PYTHON OPTIONS] [-m MODULE | -c CODE | SCRIPT | -] [ARGS]...

  Run a Python program with only the capabilities the profile grants.

  Arguments are split as CPython splits them: parsing stops at -m, -c, -, -- or the
  script; everything after is the program's. CPython's short options (-I -O -B -u -E
  -s -S -b -q -W arg -X opt, grouped or not) go to the sandboxed interpreter.

PYSB OPTIONS:
  --provider NAME       OS sandbox (env PYSB_PROVIDER; else the profile's; else auto: the
                        first of bwrap, unshare, landlock, firejail that runs here and
                        enforces the profile; subprocess = no OS boundary, only when named)
  --profile PATH        profile (env PYSB_PROFILE; else .pysb.yaml next to SCRIPT or in
                        MODULE's package; else ./.pysb.yaml)
  --learn[=PATH]        learning run: refuse nothing, record everything, write the profile
  --no-python-guards    OS layer only
  --no-ipython          the prompt is Python's own even when IPython is installed and
                        allowed (env PYSB_NO_IPYTHON=1)
  --events PATH         append a JSON line for every denial and learned access
  --expose-ro PATH      add a read-only exposure for this run (repeatable)
  --expose-rw PATH      add a read-write exposure (repeatable)
  --ignore GLOB         hide matching paths (repeatable)
  --net RULE            add a network rule, e.g. "allow tcp 127.0.0.1 8000 out"
  --import NAME         allow importing a top-level module
  --allow-api NAME      allow a sensitive function or category
  --env NAME=VALUE      set an environment variable inside
  --verbose / --quiet   more or less of pysb's own messages
  --debug               with an error, the traceback behind it (env PYSB_DEBUG=1)
  -h, --help            this text; CPython's own options: pysb run -- -h

Exit status: the program's; 128+N if killed by signal N; 124 when wall-time expires;
125 when pysb fails before the program starts.
"""


def _fail(message: str) -> int:
    for line in message.splitlines() or [message]:
        sys.stderr.write(f"pysb: error: {line}\n" if not _located(line) else f"{line}\n")
    sys.stderr.flush()
    return SETUP_FAILED


#: ``--debug`` (or ``PYSB_DEBUG``): an error also prints the traceback behind it.
_debug: list[bool] = []


def _fail_with(exc: BaseException, message: str | None = None) -> int:
    """``_fail`` for an exception; under ``--debug`` its traceback (and its cause's) first."""
    if _debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    return _fail(str(exc) if message is None else message)


def _located(line: str) -> bool:
    """A ``FILE:LINE: message`` line is printed as it is."""
    head = line.split(": ", 1)[0]
    return ":" in head and head.rsplit(":", 1)[1].isdigit()


def _cli_rules(args: RunArgs):
    from pysb_core.profile import CliRules

    return CliRules(
        expose_ro=args.many("expose-ro"),
        expose_rw=args.many("expose-rw"),
        ignore=args.many("ignore"),
        net=args.many("net"),
        imports=args.many("import"),
        allow_api=args.many("allow-api"),
        env=args.many("env"),
    )


def _program(args: RunArgs, session) -> tuple[object, bool]:
    from pysb_core.launch.pipeline import Program

    if args.mode == "code":
        return Program("code", argv=["-c", *args.args], code=args.target), False
    if args.mode == "module":
        return Program("module", argv=["-m", *args.args], module=args.target), False
    if args.mode == "script":
        return Program("script", argv=[args.target or "", *args.args], path=args.target), False
    if args.mode == "stdin":
        return Program("stdin", argv=["-", *args.args]), False
    if sys.stdin.isatty():
        policy = session.policy
        banner = (
            f"Python {sys.version.split()[0]} in a pysb sandbox — "
            f"provider {session.provider.name}, "
            f"profile {policy.profile_path or '(none: learning run)'}"
        )
        ipython = not _ipython_refused(args) and _ipython_allowed(policy)
        return Program("repl", argv=[""], banner=banner, ipython=ipython), True
    return Program("stdin", argv=[""]), False


def _ipython_refused(args: RunArgs) -> bool:
    """``--no-ipython`` or ``PYSB_NO_IPYTHON`` (any value but empty, 0, false, no)."""
    if args.get("no-ipython"):
        return True
    value = os.environ.get("PYSB_NO_IPYTHON", "").strip().lower()
    return value not in ("", "0", "false", "no")


def _ipython_allowed(policy) -> bool:
    """IPython is installed and the profile lets the program import it."""
    import importlib.util

    if importlib.util.find_spec("IPython") is None:
        return False
    return policy.imports is not None and ("*" in policy.imports or "IPython" in policy.imports)


def _python_info(args: RunArgs) -> int:
    """``pysb run -- -h``: CPython's own help or version text. It runs nothing of the
    user's, so no sandbox (and no learning run) is started for it."""
    import subprocess

    sys.stdout.flush()
    return subprocess.call([sys.executable, *args.python_opts, args.target or "-h"])


def run_main(argv: list[str], *, ahead: bool = False) -> int:
    """Entry of ``pysb run``; returns the exit status. ``ahead``: the ``pysb run`` process
    itself, which may start the sandboxed interpreter ahead (pysb_core.launch.prestart)."""
    try:
        args = split_run_args(argv)
    except UsageError as exc:
        # in the words of the click commands' usage errors (pysb_core.cli.commands.main)
        sys.stderr.write(f"pysb: error: {exc}\npysb: error: see 'pysb run --help'\n")
        return 2
    if args.get("help"):
        sys.stdout.write(RUN_HELP)
        return 0
    if args.mode == "python-info":
        return _python_info(args)
    learn = args.get("learn")
    if args.get("debug") or os.environ.get("PYSB_DEBUG"):
        _debug.append(True)
    if ahead and not learn and not args.get("events"):
        from pysb_core.launch import prestart

        prestart.begin(args)
    from pysb_core.launch.pipeline import Session
    from pysb_core.profile.discovery import ProfileNotFoundError

    try:
        session = Session.create(
            profile=args.get("profile"),  # type: ignore[arg-type]
            provider=args.get("provider"),  # type: ignore[arg-type]
            cli=_cli_rules(args),
            python_guards=False if args.get("no-python-guards") else None,
            learn=learn,  # type: ignore[arg-type]
            events=args.get("events"),  # type: ignore[arg-type]
            script=args.target if args.mode == "script" else None,
            module=args.target if args.mode == "module" else None,
            stderr=None if args.get("quiet") else sys.stderr,
            verbose=bool(args.get("verbose")),
        )
    except ProfileNotFoundError as exc:
        return _fail(
            "\n".join([*_provider_problem(args), *exc.with_hint(learn_command(argv)).errors])
        )
    except ProfileError as exc:
        return _fail_with(exc, "\n".join(exc.errors))
    except SandboxError as exc:
        return _fail_with(exc)
    except KeyboardInterrupt:
        return 130
    status = _run(session, args)
    if _learning_failed:
        # the program ran, but what the learning run is for failed: said above
        _learning_failed.clear()
        return SETUP_FAILED
    return status


def _provider_problem(args: RunArgs) -> list[str]:
    """An unknown ``--provider`` name, said beside a missing profile (every reason at once)."""
    name = args.get("provider") or os.environ.get("PYSB_PROVIDER")
    if not name:
        return []
    from pysb_core.launch.drivers import provider_names, unknown_provider

    installed = provider_names()
    return [] if name in installed else [str(unknown_provider(name, installed))]


def learn_command(argv: list[str]) -> str:
    """The command that starts a learning run of what the user asked to run."""
    import shlex

    return shlex.join(["pysb", "run", "--learn", *argv])


#: Set by :func:`process_main`: the collector is paused until the sandbox has started.
_gc_paused: list[bool] = []
#: Set when a learning run could not write all it learned (exit 125).
_learning_failed: list[bool] = []


def _resume_gc() -> None:
    if _gc_paused:
        import gc

        _gc_paused.clear()
        gc.enable()


def process_main(argv: list[str]) -> NoReturn:
    """The ``pysb run`` process itself (the console script), where start-up time counts.

    The cyclic garbage collector is paused until the sandbox has started (start-up
    allocates much and frees little; about 20 collections otherwise), and the process
    ends through :func:`pysb_core.linux.quickexit.finish`: threads joined, ``atexit``
    callbacks run and the standard streams flushed as a normal exit does them, then
    ``os._exit`` when no object is left whose finalizer could do anything -- tearing down
    ~100 modules and collecting them would only delay the exit status (about 2 ms).
    Whatever plugins are installed: one with something left to finalize (an open file)
    gets the normal exit.
    """
    import gc

    if gc.isenabled():
        gc.disable()
        _gc_paused.append(True)
    try:
        code = run_main(argv, ahead=True)
    finally:
        _resume_gc()
        prestart = sys.modules.get("pysb_core.launch.prestart")
        if prestart is not None:
            prestart.discard()  # an interpreter started ahead that no launch took
    from pysb_core.linux.quickexit import finish

    finish(code)  # returns when the normal exit must run
    raise SystemExit(code)


def _stdio_relay(session):
    """Under a provider that confines files, file-backed standard streams become pipes
    (a file descriptor would reopen its file through /proc/self/fd: pysb_core.launch.stdio);
    None under one that does not."""
    from pysb_core.provider import Capability

    if Capability.FILES in session.provider.enforced():
        from pysb_core.launch.stdio import StdioRelay

        return StdioRelay()
    return None


def _before_exec(terminal):
    """What the sandbox's first process runs before its exec, in the process group of its
    own that it always has (pysb_core.launch.jobcontrol): a SIGKILL of pysb's group no longer
    reaches it, so it dies with pysb (``PR_SET_PDEATHSIG``; a set-uid wrapper drops it at
    exec and has its own ``--die-with-parent``); on a terminal whose foreground pysb
    holds, it takes that foreground."""
    from pysb_core.launch.prestart import standard_preexec

    die_with_pysb = standard_preexec()  # also what an interpreter started ahead ran
    take_terminal = terminal.child_step() if terminal is not None and terminal.foreground else None
    if take_terminal is None:
        return die_with_pysb

    def preexec() -> None:
        die_with_pysb()
        take_terminal()

    return preexec


def _run(session, args: RunArgs) -> int:
    from pysb_core.launch.execute import held_signals, wait
    from pysb_core.launch.jobcontrol import Job, Terminal
    from pysb_core.linux import proctree

    program, interactive = _program(args, session)
    policy = session.policy
    status: int = SETUP_FAILED

    def wall_time_hit() -> None:
        src = policy.limits.sources.get("wall-time", "the profile")
        sys.stderr.write(
            f"pysb: wall-time limit of {policy.limits.wall_time:g}s reached ({src}); "
            "the sandbox was killed\n"
        )

    relay = _stdio_relay(session)
    # The run's orphans (a double-forked daemon) become our children, to be ended with it.
    subreaper = proctree.become_subreaper()
    known: set[int] = set()
    terminal = Terminal.find()
    if terminal is not None and terminal.foreground:
        terminal.given = os.getpgrp()  # the child takes it; given back at the end in any case
    try:
        with held_signals() as pending:
            try:
                proc = session.spawn(
                    program,
                    python_opts=args.python_opts,
                    interactive=interactive,
                    terminal=terminal is not None and terminal.foreground,
                    **(relay.popen_kwargs if relay is not None else {}),
                    process_group=0,
                    preexec_fn=_before_exec(terminal),
                )
            except SandboxError as exc:
                return _fail_with(exc)
            except OSError as exc:
                return _fail_with(exc, f"could not start the sandbox: {exc}")
            except KeyboardInterrupt:
                status = 130
                return status
            job_terminal = terminal
            if terminal is not None and getattr(proc, "pysb_own_session", False):
                # The program is in a session of its own: pysb keeps the terminal and
                # forwards what it sends (pysb_core.launch.jobcontrol).
                terminal.take_back()
                job_terminal = None
            elif terminal is not None and terminal.foreground:
                terminal.given = proc.pid  # taken by the child before its exec
            # The sandbox is in a group of its own: any signal pysb gets is pysb's to
            # forward, a Ctrl-C included (pysb_core.launch.execute).
            proc.pysb_own_session = True
            known.update(proctree.children(os.getpid()))  # the sandbox and pysb's helpers
            if relay is not None:
                relay.start()
            _resume_gc()
            status = wait(
                proc,
                wall_time=policy.limits.wall_time,
                on_wall_time=wall_time_hit,
                pending=pending,
                on_child=(lambda: proctree.reap_adopted(known)) if subreaper else None,
                job=Job(proc.pid, job_terminal),
            )
        if status == 128 + 24 and policy.limits.cpu_time is not None:  # SIGXCPU
            src = policy.limits.sources.get("cpu-time", "the profile")
            sys.stderr.write(f"pysb: cpu-time limit of {policy.limits.cpu_time}s reached ({src})\n")
        return status
    finally:
        if terminal is not None:
            terminal.close()
        if relay is not None:
            relay.finish()
        try:
            session.finish(status)
        except SandboxError as exc:
            _fail_with(exc)
            _learning_failed.append(True)
        except OSError as exc:
            _fail_with(exc, f"could not write the learned profile: {exc}")
            _learning_failed.append(True)
        if subreaper:
            proctree.end_adopted(known)


def main(argv: list[str] | None = None) -> int:
    return run_main(sys.argv[2:] if argv is None else argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
