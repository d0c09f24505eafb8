"""The sandboxed interpreter started ahead, while ``pysb run`` still reads the profile.

``pysb run`` spends about as long before it starts the sandbox (its own interpreter, its
modules, the profile, the plugins, the checks, the plan) as the sandboxed interpreter then
spends starting up before it reads what to run. Neither needs the other for that part: on
a machine with two cores or more, the second can start when the first does. So, for the
providers that exec the interpreter directly (subprocess and landlock: the base
``Provider.launch``), ``pysb run`` starts it first thing, with the command line and the
environment the previous run of the same command gave it, and the interpreter waits on an
empty pipe. When the launch comes, the plan's own command line, environment, working
directory, descriptors and pre-exec steps are compared with those of the waiting
interpreter, all of them exactly; only when they are equal does it get the plan's payload
(policy, program, guards) on its pipe -- the same bytes a fresh one would read, and the
only thing that makes it run anything of the program's. Anything else (a profile that
changed, another provider, an error before the launch) ends it with SIGKILL, before it has
read a byte, and the launch forks a fresh one as always.

What is remembered (``<state dir>/prestart/``, one small file per working directory and
set of pysb options -- not per program: ``pysb run -c CODE`` shares one whatever the code --,
this user's only, like the other caches of :mod:`pysb_core.linux.statedir`)
are the *names* of the environment variables the sandbox got, never their values: the
interpreter ahead gets this run's values of those names, and its command line is computed
here, not read from the file (this interpreter, the user's CPython options, pysb's own
stub). A file that names more variables than the profile allows only lets pysb's own
bootstrap hold them for a moment before it is killed.

Never tried: on a terminal (the interpreter would take the terminal's foreground before the
checks), for an interpreter that prints while it starts (``-v``, ``-X importtime``: one
killed would have printed it too), in learning runs and with event hooks (more descriptors
than the payload's), in partial mode (only the ``pysb run`` process starts one), with
``PYSB_PRESTART=0``. ``PYSB_DEBUG_PRESTART=1`` says on stderr what happened
(tests/test_prestart.py).

Why one module: starting the interpreter, hinting it, comparing it with the launch and
ending it are one protocol over one piece of state (the waiting interpreter, its pipe,
its directory, the entry); split, each half would have to trust what the other recorded,
and the comparison that makes it safe is easiest to check when it sits beside what it
compares.
"""

from __future__ import annotations

import marshal
import os
import sys

from pysb_core.launch.bootargv import HINT_MAGIC, boot_argv

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from pysb_core.cli.argv import RunArgs
    from pysb_core.plan import LaunchPlan, LaunchSpec, PreExecStep

#: The format of a remembered entry: ``(FORMAT, names)``; no entry: nothing to start ahead.
FORMAT = 1
#: At most this many variable names are remembered (an environment is not that big).
MAX_NAMES = 4096
#: At most this many entries are kept: writing one more removes the oldest half.
MAX_ENTRIES = 256


class _Ahead:
    """The interpreter started ahead, and what it was started with."""

    def __init__(self, proc: Any, write_fd: int, argv: list[str], env: dict[str, str]) -> None:
        self.proc = proc
        self.write_fd = write_fd
        self.argv = argv  # its payload descriptor last
        self.env = env
        self.cwd = os.path.realpath(os.getcwd())
        self.hint: tuple[list[str], list[str]] | None = None  # guards, sys_path: sent


#: The state of this ``pysb run`` process (one run per process).
_state: dict[str, Any] = {
    "entry": None,  # the remembered entry's path (set by begin: a pysb run process)
    "names": None,  # what the entry said (None: nothing usable), written again on a change
    "ahead": None,  # the _Ahead, until claimed or discarded
    "python_opts": None,  # the user's CPython options (set by begin)
    "preexec": None,  # standard_preexec()
}


def _trace(message: str) -> None:
    if os.environ.get("PYSB_DEBUG_PRESTART") == "1":
        os.write(2, f"pysb: prestart: {message}\n".encode(errors="replace"))


def _entry_path(args: RunArgs) -> str | None:
    """The entry for this command: what decides the sandbox's environment (pysb's own
    options, the interpreter, where the profile is looked for), not the program's code or
    arguments, so that ``pysb run -c CODE`` with other code each time shares one."""
    from _blake2 import blake2b

    from pysb_core.linux.statedir import state_dir

    base = state_dir()
    if base is None:
        return None
    where = args.target if args.mode == "module" else None
    if args.mode == "script" and args.target:
        where = os.path.dirname(os.path.abspath(args.target))
    options = sorted((k, repr(v)) for k, v in args.options.items())
    key = repr(
        (FORMAT, sys.executable, os.getcwd(), os.geteuid(), options, args.python_opts, where)
    )
    name = blake2b(key.encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()
    return os.path.join(base, "prestart", name)


def _read(path: str) -> tuple[str, ...] | None:
    """The remembered names, None when there is nothing (usable) to start ahead."""
    from pysb_core.linux.statedir import trusted

    try:
        with open(path, "rb") as f:
            if not (trusted(os.path.dirname(path)) and trusted("", os.fstat(f.fileno()))):
                return None
            data = f.read(1 << 20)
        fmt, names = marshal.loads(data)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if fmt != FORMAT or type(names) is not tuple or len(names) > MAX_NAMES:
        return None
    if not all(type(n) is str and n and "=" not in n and "\0" not in n for n in names):
        return None
    return names  # type: ignore[no-any-return]


def _attempted() -> bool:
    if os.environ.get("PYSB_PRESTART") == "0":
        return False
    try:
        return not any(os.isatty(fd) for fd in (0, 1, 2))
    except OSError:
        return False


#: Variables that make the interpreter print while it starts (see :func:`_speaks`).
_SPEAKING_VARIABLES = frozenset({"PYTHONVERBOSE", "PYTHONPROFILEIMPORTTIME"})


def _speaks(python_opts: Sequence[str], names: Sequence[str] = ()) -> bool:
    """Whether the interpreter prints while it starts (``-v``, ``-X importtime``): one
    started ahead and then killed would have printed it too, before the fresh one."""
    if "-v" in python_opts or _SPEAKING_VARIABLES.intersection(names):
        return True
    return any(
        python_opts[i] == "-X" and python_opts[i + 1].partition("=")[0] == "importtime"
        for i in range(len(python_opts) - 1)
    )


def standard_preexec() -> Callable[[], None]:
    """What ``pysb run`` runs in the sandbox's first process before its exec when there is
    no terminal to hand over: die with pysb (``PR_SET_PDEATHSIG``), and not start at all
    when pysb died first. One function per process, so that a launch can tell it is the
    one the interpreter ahead ran."""
    found = _state.get("preexec")
    if found is None:
        from pysb_core.linux.cfuncs import Long, function

        prctl = function("prctl")
        parent = os.getpid()

        def found() -> None:
            prctl(Long(1), Long(9))  # PR_SET_PDEATHSIG, SIGKILL
            if os.getppid() != parent:  # pysb died before the call
                os._exit(125)

        _state["preexec"] = found
    return found  # type: ignore[no-any-return]


def begin(args: RunArgs) -> None:
    """Start the interpreter ahead when the previous run of this command says how (called
    by ``pysb run`` once its arguments are split, before anything else); never raises."""
    try:
        if not _attempted():
            return
        python_opts = list(args.python_opts)
        if _speaks(python_opts):
            _trace("not for an interpreter that prints while it starts")
            return
        path = _entry_path(args)
        if path is None:
            return
        _state["entry"], _state["python_opts"] = path, python_opts
        names = _read(path)
        _state["names"] = names
        if names is None or _speaks(python_opts, names):
            _trace("nothing remembered" if names is None else "not for PYTHONVERBOSE and kin")
            _stand_in()
            return
        from pysb_core.launch import tmphost

        tmp = tmphost.make_host_dir(os.environ)
        tmphost.premade[:] = [tmp]  # the plan takes it (and removes it at the end)
        env = {n: os.environ[n] for n in names if n in os.environ}
        env["TMPDIR"] = tmp
        read_fd, write_fd = os.pipe()
        try:
            from pysb_core.linux.spawn import Process

            argv = boot_argv(python_opts, read_fd)
            proc = Process(
                argv,
                env=env,
                cwd=os.path.realpath(os.getcwd()),  # as the plan names it
                pass_fds=(read_fd,),
                process_group=0,
                preexec_fn=standard_preexec(),
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        _state["ahead"] = _Ahead(proc, write_fd, argv, env)
        _trace(f"started ahead (pid {proc.pid})")
        _stand_in()
    except Exception as exc:  # an optimisation only: the launch starts one as always
        _trace(f"not started ({type(exc).__name__}: {exc})")
        discard()


def _stand_in() -> None:
    """Have the base ``Provider.launch`` ask :func:`claim` and tell :func:`remember`
    (after the fork: the provider module is not needed for it)."""
    from pysb_core import provider

    provider.STAND_IN[:] = [sys.modules[__name__]]


def waiting() -> bool:
    """An interpreter ahead waits, and has had no hint yet."""
    ahead = _state["ahead"]
    return ahead is not None and ahead.hint is None


def hint(guards: list[str], sys_path: list[str]) -> None:
    """Tell the interpreter ahead what the payload will ask it to import (the guard modules
    and the import roots: known once the plugins are loaded, long before the payload), so
    that it imports them while it waits. The launch then takes it only for a payload that
    asks for exactly these (:func:`claim`); never raises."""
    ahead = _state["ahead"]
    if ahead is None or ahead.hint is not None:
        return
    try:
        data = marshal.dumps({"guards": list(guards), "sys_path": list(sys_path)})
        frame = HINT_MAGIC + len(data).to_bytes(4, "little") + data
        if len(frame) > 60_000:  # a pipe holds 64 KiB: the write must not wait for the reader
            return
        os.write(ahead.write_fd, frame)
        ahead.hint = (list(guards), list(sys_path))
        _trace(f"hinted {len(guards)} guard modules")
    except OSError as exc:
        _trace(f"no hint ({exc})")


def _simple_shape(
    plan: LaunchPlan, spec: LaunchSpec, popen_kwargs: Mapping[str, Any], steps: Sequence[Any]
) -> str | None:
    """Why this launch is not one an interpreter ahead can stand for; None when it is."""
    if _state["entry"] is None:
        return "not a pysb run"
    if plan.payload_fd is None or list(spec.pass_fds) != [plan.payload_fd]:
        return "other descriptors"
    if not (spec.light or not spec.on_started):
        return "the provider wants a Popen"
    if set(popen_kwargs) != {"process_group", "preexec_fn"} or popen_kwargs["process_group"] != 0:
        return "other streams or process group"
    if len(steps) != 1 or steps[0].run is not _state.get("preexec"):
        return "other pre-exec steps"
    from pysb_core.launch.tmphost import last_made

    if spec.env.get("TMPDIR") is None or [spec.env["TMPDIR"]] != last_made:
        return "no private host directory"
    if spec.cwd != os.path.realpath(os.getcwd()):
        return "another working directory"
    if any(k != "TMPDIR" and os.environ.get(k) != v for k, v in spec.env.items()):
        return "values set by the profile"
    return None


def claim(
    plan: LaunchPlan,
    spec: LaunchSpec,
    popen_kwargs: Mapping[str, Any],
    steps: Sequence[PreExecStep],
) -> Any:
    """The interpreter ahead, given the plan's payload, when it was started exactly as this
    launch would start one (``Provider.launch``, after ``plan.seal()``); else None (and it
    is ended)."""
    ahead = _state["ahead"]
    if ahead is None:
        return None
    why = _simple_shape(plan, spec, popen_kwargs, steps)
    if why is None:
        if list(spec.argv[:-1]) != ahead.argv[:-1] or spec.argv[-1] != str(plan.payload_fd):
            why = "another command line"
        elif dict(spec.env) != ahead.env:
            why = "another environment"
        elif spec.cwd != ahead.cwd:
            why = "another working directory"
        elif ahead.hint is not None and ahead.hint != (
            plan.payload.get("guards"),
            plan.payload.get("sys_path"),
        ):
            why = "other guards than the hint named"
    if why is not None:
        _trace(f"discarded: {why}")
        discard()
        return None
    _state["ahead"] = None
    try:
        _send_payload(plan.payload_fd, ahead.write_fd)  # type: ignore[arg-type]
    except OSError as exc:  # it died meanwhile: a fresh one is started
        _trace(f"discarded: the payload could not be sent ({exc})")
        _end(ahead)
        return None
    _trace("used")
    return ahead.proc


def _send_payload(memfd: int, write_fd: int) -> None:
    """The sealed payload (the plan's memory file) onto the pipe, then its end."""
    try:
        offset = 0
        while chunk := os.pread(memfd, 1 << 16, offset):
            offset += len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(write_fd, view) :]
    finally:
        os.close(write_fd)


def remember(
    plan: LaunchPlan, spec: LaunchSpec, popen_kwargs: Mapping[str, Any], steps: Sequence[Any]
) -> None:
    """After a launch that started a fresh interpreter: the variables' names the next run
    of this command starts one ahead with, or no entry when it should not try; never
    raises."""
    path = _state["entry"]
    if path is None:
        return
    try:
        why = _simple_shape(plan, spec, popen_kwargs, steps)
        if why is None and list(spec.argv[:-1]) != boot_argv(_state["python_opts"], 0)[:-1]:
            why = "another command line"
        names = None if why is not None else tuple(sorted(k for k in spec.env if k != "TMPDIR"))
        if names is not None and len(names) > MAX_NAMES:
            names, why = None, "too many variables"
        if names == _state["names"]:
            if why is not None:
                _trace(f"not for this launch: {why}")
            return
        if names is None:
            os.unlink(path)
            _trace(f"forgotten: {why}")
        else:
            _write(path, names)
            _trace(f"remembered {len(names)} names")
        _state["names"] = names
    except Exception as exc:  # an optimisation only
        _trace(f"not remembered ({type(exc).__name__}: {exc})")


def _write(path: str, names: tuple[str, ...] | None) -> None:
    from pysb_core.linux.statedir import trusted

    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if not trusted(directory):
        return
    if not os.path.exists(path):
        _prune(directory)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, marshal.dumps((FORMAT, names)))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _prune(directory: str) -> None:
    """Keep the directory small: past :data:`MAX_ENTRIES`, the older half goes."""
    with os.scandir(directory) as found:
        entries = [(e.stat().st_mtime_ns, e.path) for e in found if e.is_file()]
    if len(entries) < MAX_ENTRIES:
        return
    entries.sort()
    for _mtime, old in entries[: len(entries) - MAX_ENTRIES // 2]:
        try:
            os.unlink(old)
        except OSError:
            pass


def _end(ahead: _Ahead) -> None:
    """End the interpreter ahead: our own child (we started it and have not reaped it),
    by its PID, before it read anything."""
    try:
        os.close(ahead.write_fd)
    except OSError:
        pass
    proc = ahead.proc
    if proc.returncode is None:
        try:
            proc.kill()
        except OSError:
            pass
        proc.wait()


def decline(why: str) -> None:
    """End the interpreter ahead now: this run cannot use it (``why``)."""
    if _state["ahead"] is not None:
        _trace(f"discarded: {why}")
        discard()


def discard() -> None:
    """End the interpreter ahead if no launch took it, and remove its temporary directory
    if no plan took that (``pysb run`` calls it on its way out); never raises."""
    ahead = _state["ahead"]
    _state["ahead"] = None
    if ahead is not None:
        try:
            _end(ahead)
        except OSError:
            pass
    from pysb_core.launch import tmphost

    for tmp in tmphost.premade:  # not the plan's: its own clean-ups do not know it
        try:
            os.rmdir(tmp)
        except OSError:
            pass
    tmphost.premade.clear()
