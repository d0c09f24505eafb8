"""The sandboxed interpreter started ahead, while ``pysb run`` still reads the profile.

``pysb run`` spends about as long before it starts the sandbox (its own interpreter, its
modules, the profile, the plugins, the checks, the plan) as the sandboxed interpreter then
spends starting up before it reads what to run. Neither needs the other for that part: on
a machine with two cores or more, the second can start when the first does. So, for the
providers whose launch is the base ``Provider.launch`` (subprocess, landlock, and bwrap,
which wraps it), ``pysb run`` starts the command first thing, as the previous run of the
same command started it, and the interpreter waits on an empty pipe. When the launch comes,
the plan's own command line, environment, working directory, descriptors (what each one
holds: ``LaunchSpec.ahead``, :mod:`pysb_core.launch.aheadfds`) and pre-exec steps are
compared with those of the waiting command, all of them exactly; only when they are equal
does it get the plan's payload (policy, program, guards) on its pipe -- the same bytes a
fresh one would read, and the only thing that makes it run anything of the program's.
Anything else (a profile that changed, another provider, an error before the launch) ends
it with SIGKILL, before it has read a byte, and the launch forks a fresh one as always.

What is remembered (``<state dir>/prestart/``, one small file per working directory and
set of pysb options -- not per program: ``pysb run -c CODE`` shares one whatever the code --,
this user's only, like the other caches of :mod:`pysb_core.linux.statedir`, and read-only
inside every sandbox) is the *names* of the environment variables the sandbox got, never
their values (the command ahead gets this run's values of those names), the provider, the
temporary and working directories, a wrapper's words before the interpreter (bwrap's
options, with each descriptor replaced by what it held: a copy of which host file, which
directory, which bytes), and the last payload's guard modules and import roots: they are
hinted as soon as the command starts (when every root is on this pysb's own ``sys.path``),
so the interpreter imports them while pysb loads its plugins, and the launch compares them
with the payload's. The interpreter's own command line is computed here (this
interpreter, the user's CPython options, pysb's own stub), never read from the file, and
every descriptor is made anew (the host file copied now, the directory opened now). A
wrapper's words are run as the file says before the profile is read: the file is trusted
as the other caches beside it are (the parsed-profile cache decides the policy itself):
this user's alone, never writable inside a sandbox. With a genuine entry the command ahead
runs no code but pysb's bootstrap, which waits, until the comparison passes; a file that
names more variables than the profile allows only lets that bootstrap hold them for a
moment before it is killed.

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

#: The format of a remembered entry: ``(FORMAT, record)``, the record a dict of
#: :data:`RECORD_KEYS`; no entry: nothing to start ahead.
FORMAT = 2
#: What a record holds: the provider whose launch it was, the variables' names, the
#: temporary directory (None, "host": one made for the run, or a path the plan set), the
#: working directory, the words (items: :mod:`pysb_core.launch.aheadfds`) of a wrapper
#: before the interpreter's own command line (empty for subprocess and landlock), and the
#: payload's guard modules and import roots (the hint sent as soon as the command starts).
RECORD_KEYS = frozenset({"provider", "names", "tmpdir", "cwd", "prefix", "hint"})
#: At most this many variable names are remembered (an environment is not that big).
MAX_NAMES = 4096
#: At most this many entries are kept: writing one more removes the oldest half.
MAX_ENTRIES = 256


class _Ahead:
    """The interpreter started ahead, and what it was started with."""

    def __init__(
        self, proc: Any, write_fd: int, record: dict[str, Any], env: dict[str, str], made: Any
    ) -> None:
        self.proc = proc
        self.write_fd = write_fd
        self.record = record
        self.env = env
        self.made = made  # aheadfds.Started: the wrapper's descriptors, what to compare
        self.hint: tuple[list[str], list[str]] | None = None  # guards, sys_path: sent


#: The state of this ``pysb run`` process (one run per process).
_state: dict[str, Any] = {
    "entry": None,  # the remembered entry's path (set by begin: a pysb run process)
    "record": None,  # what the entry said (None: nothing usable), written again on a change
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


def _read(path: str) -> dict[str, Any] | None:
    """The remembered record, None when there is nothing (usable) to start ahead."""
    from pysb_core.linux.statedir import trusted

    try:
        with open(path, "rb") as f:
            if not (trusted(os.path.dirname(path)) and trusted("", os.fstat(f.fileno()))):
                return None
            data = f.read(1 << 20)
        fmt, record = marshal.loads(data)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return record if fmt == FORMAT and _valid(record) else None


def _valid(record: object) -> bool:
    """Whether ``record`` (data from a file) has exactly the shape :func:`remember` writes."""
    from pysb_core.launch.aheadfds import valid_items

    if type(record) is not dict or set(record) != RECORD_KEYS:
        return False
    names, tmpdir, cwd = record["names"], record["tmpdir"], record["cwd"]
    if type(record["provider"]) is not str or type(names) is not tuple or len(names) > MAX_NAMES:
        return False
    if not all(type(n) is str and n and "=" not in n and "\0" not in n for n in names):
        return False
    if not (tmpdir is None or tmpdir == "host" or (type(tmpdir) is str and tmpdir[:1] == "/")):
        return False
    if type(cwd) is not str or cwd[:1] != "/" or "\0" in cwd or "\0" in (tmpdir or ""):
        return False
    return valid_items(record["prefix"]) and _valid_hint(record["hint"])


def _valid_hint(hint: object) -> bool:
    """None, or (guard module names, absolute import roots) as :func:`remember` keeps them."""
    if hint is None:
        return True
    if type(hint) is not tuple or len(hint) != 2:
        return False
    guards, roots = hint
    if type(guards) is not tuple or type(roots) is not tuple or len(guards) + len(roots) > 1024:
        return False
    return all(
        type(g) is str and all(part.isidentifier() for part in g.split(".")) for g in guards
    ) and all(type(r) is str and r[:1] == "/" and "\0" not in r for r in roots)


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
        record = _read(path)
        _state["record"] = record
        if record is None or _speaks(python_opts, record["names"]):
            _trace("nothing remembered" if record is None else "not for PYTHONVERBOSE and kin")
            _stand_in()
            return
        if record["cwd"] not in ("/", os.path.realpath(os.getcwd())):
            _trace("not in another working directory")
            _stand_in()
            return
        _start(record, python_opts)
        _stand_in()
    except Exception as exc:  # an optimisation only: the launch starts one as always
        _trace(f"not started ({type(exc).__name__}: {exc})")
        discard()


def _start(record: dict[str, Any], python_opts: list[str]) -> None:
    """Start the command ``record`` says the last launch started, with this run's values."""
    from pysb_core.launch import aheadfds, tmphost

    env = {n: os.environ[n] for n in record["names"] if n in os.environ}
    if record["tmpdir"] == "host":
        tmp = tmphost.make_host_dir(os.environ)
        tmphost.premade[:] = [tmp]  # the plan takes it (and removes it at the end)
        env["TMPDIR"] = tmp
    elif record["tmpdir"] is not None:
        env["TMPDIR"] = record["tmpdir"]  # the plan's own (bwrap's /tmp): compared
    made = aheadfds.start(record["prefix"])
    try:
        read_fd, write_fd = os.pipe()
    except BaseException:
        made.close()
        raise
    try:
        from pysb_core.linux.spawn import Process

        proc = Process(
            [*made.argv, *boot_argv(python_opts, read_fd)],
            env=env,
            cwd=record["cwd"],
            pass_fds=(read_fd, *made.child_fds),
            process_group=0,
            preexec_fn=standard_preexec(),
        )
    except BaseException:
        os.close(write_fd)
        made.close_reports()
        raise
    finally:
        os.close(read_fd)
        made.close_child_fds()
    _state["ahead"] = _Ahead(proc, write_fd, record, env, made)
    _trace(f"started ahead (pid {proc.pid})")
    remembered = record["hint"]
    # The last payload's guards, at once: the interpreter imports them while pysb loads its
    # plugins. Only from import roots this pysb imports from itself; the launch compares
    # them with the payload's (claim), and a run whose plugins changed gets a fresh one.
    if remembered is not None and all(root in sys.path for root in remembered[1]):
        hint(list(remembered[0]), list(remembered[1]))


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


def chosen(provider: str) -> None:
    """End the interpreter ahead now when the launch will be another provider's than the
    one that started the command it remembers (an optimisation: the launch would refuse it)."""
    ahead = _state["ahead"]
    if ahead is not None and ahead.record["provider"] != provider:
        decline(f"provider {provider} was not the last run's")


def _shape(
    plan: LaunchPlan, spec: LaunchSpec, popen_kwargs: Mapping[str, Any], steps: Sequence[Any]
) -> tuple[list[Any], list[int]] | str:
    """This launch as a record's prefix items (and the descriptor behind each described
    one), or why it is not one an interpreter ahead can stand for."""
    if _state["entry"] is None:
        return "not a pysb run"
    if plan.payload_fd is None:
        return "no payload"
    described = spec.ahead or {}
    expected = [plan.payload_fd, *described]
    if len(spec.pass_fds) != len(expected) or set(spec.pass_fds) != set(expected):
        return "other descriptors"
    if not (spec.light or not spec.on_started):
        return "the provider wants a Popen"
    if set(popen_kwargs) != {"process_group", "preexec_fn"} or popen_kwargs["process_group"] != 0:
        return "other streams or process group"
    if len(steps) != 1 or steps[0].run is not _state.get("preexec"):
        return "other pre-exec steps"
    tmp = spec.env.get("TMPDIR")
    if tmp is not None and tmp[:1] != "/":
        return "a relative temporary directory"
    if spec.cwd not in ("/", os.path.realpath(os.getcwd())):
        return "another working directory"
    if any(k != "TMPDIR" and os.environ.get(k) != v for k, v in spec.env.items()):
        return "values set by the profile"
    boot = boot_argv(_state["python_opts"], plan.payload_fd)
    if list(spec.argv[len(spec.argv) - len(boot) :]) != boot:
        return "another command line"
    from pysb_core.launch.aheadfds import describe

    return describe(spec.argv, described, len(boot))


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
    from pysb_core.launch import aheadfds

    described = spec.ahead or {}
    shape = _shape(plan, spec, popen_kwargs, steps)
    why = shape if isinstance(shape, str) else None
    if why is None:
        items, fds = shape
        if plan.policy.provider != ahead.record["provider"]:
            why = "another provider"
        elif tuple(items) != ahead.record["prefix"]:
            why = "another command line"
        elif dict(spec.env) != ahead.env:
            why = "another environment"
        elif spec.cwd != ahead.record["cwd"]:
            why = "another working directory"
        elif ahead.hint is not None and ahead.hint != (
            plan.payload.get("guards"),
            plan.payload.get("sys_path"),
        ):
            why = "other guards than the hint named"
        else:
            why = aheadfds.differs(ahead.made, described, fds)
    if why is not None:
        _trace(f"discarded: {why}")
        discard()
        return None
    try:
        saved = aheadfds.take_reports(ahead.made, described, fds)
    except OSError as exc:
        _trace(f"discarded: its reports could not be taken ({exc})")
        discard()
        return None
    _state["ahead"] = None
    write_fd, ahead.write_fd = ahead.write_fd, -1  # _send_payload closes it, whatever happens
    try:
        _send_payload(plan.payload_fd, write_fd)  # type: ignore[arg-type]
    except OSError as exc:  # it died meanwhile: a fresh one is started
        aheadfds.give_back(saved)
        _trace(f"discarded: the payload could not be sent ({exc})")
        _end(ahead)
        return None
    aheadfds.forget(saved)
    ahead.made.close_reports()  # their numbers are the launch's own now
    _trace("used")
    return ahead.proc


def _send_payload(memfd: int, write_fd: int) -> None:
    """The sealed payload (the plan's memory file) onto the pipe, then its end."""
    from pysb_core.launch.aheadfds import write_all

    try:
        offset = 0
        while chunk := os.pread(memfd, 1 << 16, offset):
            offset += len(chunk)
            write_all(write_fd, chunk)
    finally:
        os.close(write_fd)


def remember(
    plan: LaunchPlan, spec: LaunchSpec, popen_kwargs: Mapping[str, Any], steps: Sequence[Any]
) -> None:
    """After a launch that started a fresh interpreter: what the next run of this command
    starts ahead (the variables' names, the temporary and working directories, a wrapper's
    words and what its descriptors hold), or no entry when it should not try; never raises."""
    path = _state["entry"]
    if path is None:
        return
    try:
        shape = _shape(plan, spec, popen_kwargs, steps)
        why = shape if isinstance(shape, str) else None
        record = None
        if why is None:
            from pysb_core.launch.tmphost import last_made

            names = tuple(sorted(k for k in spec.env if k != "TMPDIR"))
            tmp = spec.env.get("TMPDIR")
            if len(names) > MAX_NAMES:
                why = "too many variables"
            else:
                guards, roots = plan.payload.get("guards"), plan.payload.get("sys_path")
                record = {
                    "provider": str(plan.policy.provider),
                    "names": names,
                    "tmpdir": "host" if tmp is not None and [tmp] == last_made else tmp,
                    "cwd": spec.cwd,
                    "prefix": tuple(shape[0]),
                    "hint": (tuple(guards), tuple(roots)) if guards and roots else None,
                }
                if not _valid(record):
                    record, why = None, "nothing that can be remembered"
        if record == _state["record"]:
            if why is not None:
                _trace(f"not for this launch: {why}")
            return
        if record is None:
            os.unlink(path)
            _trace(f"forgotten: {why}")
        else:
            _write(path, record)
            _trace(f"remembered {len(record['names'])} names")
        _state["record"] = record
    except Exception as exc:  # an optimisation only
        _trace(f"not remembered ({type(exc).__name__}: {exc})")


def _write(path: str, record: dict[str, Any]) -> None:
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
            os.write(fd, marshal.dumps((FORMAT, record)))
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
    if ahead.write_fd >= 0:
        fd, ahead.write_fd = ahead.write_fd, -1
        try:
            os.close(fd)
        except OSError:
            pass
    ahead.made.close()
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
