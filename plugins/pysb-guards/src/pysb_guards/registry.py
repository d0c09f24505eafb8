"""The registry of sensitive functions: one table for patches, validation and the docs.

Each :class:`Entry` is one *spelling* of a sensitive function (``os.system`` and
``posix.system`` are two entries of one alias group, decided together). The table says
where the function lives (module and attribute path, ``Popen.__init__`` for a class that
is judged when it is built), in which Python versions and on which platforms it exists, and
which PEP 578 audit events its C code raises (the API guard's backstop: an original reached
without its face still meets the policy).

``python -m pysb_guards.registry`` prints docs/api-registry.md (a test checks it is current).

Why one module: the table is the module: most of its lines are the entries themselves, and the
few functions beside them (look-up, platform filter, the Markdown page) read that one table.
Split by guard, the alias groups that span modules (``os.system`` and ``posix.system``) would be
cut apart, and the docs page would no longer come from the same place as the patches.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

CATEGORIES: dict[str, str] = {
    "process-exec": "start programs or interpreters (exec, spawn, fork, subprocess, pty)",
    "process-control": "signal, renice or limit processes; abort the interpreter",
    "privileges": "change user, group, umask or namespaces",
    "threads": "start threads, or hook every thread (trace, profile, interrupt)",
    "native": "load native libraries and read or write raw memory (ctypes)",
    "introspection": "reach the interpreter's internals (tracing, audit hooks, gc graph, reload)",
    "dynamic-code": "eval, exec and compile called by the program itself",
    "deserialization": "unpickle data (a pickle can call any function)",
}

#: Categories shown with a warning sign in learned profiles.
DANGEROUS_CATEGORIES = frozenset(
    {"process-exec", "privileges", "native", "dynamic-code", "deserialization"}
)


class Entry:
    """One spelling of one sensitive function (immutable; a plain class, so that the
    sandbox does not import ``dataclasses`` to read the table)."""

    __slots__ = (
        "alias_of",
        "attr",
        "category",
        "events",
        "module",
        "optional",
        "patch",
        "platform",
        "qualname",
        "since",
        "until",
    )

    qualname: str
    category: str
    module: str
    attr: str
    alias_of: str | None
    since: tuple[int, int] | None
    until: tuple[int, int] | None
    platform: str | None
    optional: bool
    events: tuple[str, ...]
    patch: bool

    def __init__(
        self,
        qualname: str,
        category: str,
        module: str,
        attr: str,
        alias_of: str | None = None,
        since: tuple[int, int] | None = None,
        until: tuple[int, int] | None = None,  # exclusive
        platform: str | None = None,  # "posix", "linux" or "win32"
        optional: bool = False,  # may be missing even where it applies (test modules)
        events: tuple[str, ...] = (),
        patch: bool = True,  # False: judged through its audit events only (immutable C types)
    ) -> None:
        # One write per slot, spelled out: a loop over the names cost twice as much (165
        # entries are made at every sandbox start).
        write = object.__setattr__
        write(self, "qualname", qualname)
        write(self, "category", category)
        write(self, "module", module)
        write(self, "attr", attr)
        write(self, "alias_of", alias_of)
        write(self, "since", since)
        write(self, "until", until)
        write(self, "platform", platform)
        write(self, "optional", optional)
        write(self, "events", events)
        write(self, "patch", patch)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("registry entries are immutable")

    def __repr__(self) -> str:
        return f"Entry({self.qualname!r}, {self.category!r})"

    @property
    def group(self) -> str:
        """The name that decides every spelling of this function."""
        return self.alias_of or self.qualname

    def applies(self, version: tuple[int, int] | None = None, platform: str | None = None) -> bool:
        version = version or sys.version_info[:2]
        platform = platform or sys.platform
        if self.since is not None and version < self.since:
            return False
        if self.until is not None and version >= self.until:
            return False
        if self.platform == "posix":
            return platform != "win32"
        if self.platform is not None:
            return platform.startswith(self.platform)
        return True


_ENTRIES: list[Entry] = []


def _add(category: str, names: str, **kw: object) -> None:
    """Add entries; ``a=b`` in ``names`` makes ``a`` an alias of ``b``; ``module:attr``
    spells an attribute path inside a module whose name has dots."""
    for token in names.split():
        alias = None
        if "=" in token:
            token, alias = token.split("=", 1)
        if ":" in token:
            module, attr = token.split(":", 1)
            qualname = f"{module}.{attr}"
        else:
            module, _, attr = token.rpartition(".")
            qualname = token
        if attr.endswith(".__init__"):
            qualname = qualname[: -len(".__init__")]
        _ENTRIES.append(Entry(qualname, category, module, attr, alias, **kw))  # type: ignore[arg-type]


# -- process-exec -------------------------------------------------------------------------
_add("process-exec", "os.system", events=("os.system",))
_add("process-exec", "posix.system=os.system", platform="posix", events=("os.system",))
_add("process-exec", "os.popen os.spawnv os.spawnve os.spawnl os.spawnle")
_add("process-exec", "os.spawnvp os.spawnvpe os.spawnlp os.spawnlpe", platform="posix")
_add("process-exec", "os.execl os.execle os.execlp os.execlpe os.execvp os.execvpe")
_add("process-exec", "os.execv os.execve", events=("os.exec",))
_add(
    "process-exec",
    "posix.execv=os.execv posix.execve=os.execve",
    platform="posix",
    events=("os.exec",),
)
_add("process-exec", "os.posix_spawn os.posix_spawnp", platform="posix", events=("os.posix_spawn",))
_add(
    "process-exec",
    "posix.posix_spawn=os.posix_spawn posix.posix_spawnp=os.posix_spawnp",
    platform="posix",
    events=("os.posix_spawn",),
)
_add("process-exec", "os.fork posix.fork=os.fork", platform="posix", events=("os.fork",))
_add(
    "process-exec", "os.forkpty posix.forkpty=os.forkpty", platform="posix", events=("os.forkpty",)
)
_add("process-exec", "subprocess:Popen.__init__", events=("subprocess.Popen",))
_add("process-exec", "subprocess.run subprocess.call subprocess.check_call")
_add("process-exec", "subprocess.check_output subprocess.getoutput subprocess.getstatusoutput")
_add("process-exec", "_posixsubprocess.fork_exec", platform="posix")
_add("process-exec", "pty.spawn pty.fork", platform="posix")
_add("process-exec", "multiprocessing.process:BaseProcess.start")
_add("process-exec", "multiprocessing:Process.start=multiprocessing.process.BaseProcess.start")
# A Tcl interpreter (tkinter.Tcl(), tkinter.Tk()) runs Tcl code that opens files and
# sockets and starts programs (``exec``) with C code of its own: starting one is process-exec.
_add("process-exec", "_tkinter.create")
_add("process-exec", "_interpreters.create", since=(3, 13))
_add("process-exec", "_xxsubinterpreters.create", until=(3, 13))
_add(
    "process-exec",
    "_testinternalcapi.create_interpreter _testinternalcapi.run_in_subinterp_with_config",
    optional=True,
)
_add(
    "process-exec",
    "_testcapi.run_in_subinterp _testcapi.run_in_subinterp_with_config",
    optional=True,
)
_add("process-exec", "nt.system=os.system nt.execv=os.execv nt.execve=os.execve", platform="win32")
_add("process-exec", "nt.spawnv=os.spawnv nt.spawnve=os.spawnve", platform="win32")
_add(
    "process-exec", "os.startfile nt.startfile=os.startfile _winapi.CreateProcess", platform="win32"
)

# -- process-control ----------------------------------------------------------------------
_add("process-control", "os.kill posix.kill=os.kill", events=("os.kill",))
_add("process-control", "os.killpg posix.killpg=os.killpg", platform="posix", events=("os.killpg",))
_add(
    "process-control",
    "os.nice posix.nice=os.nice os.setpriority posix.setpriority=os.setpriority",
    platform="posix",
)
_add("process-control", "os.abort")
_add("process-control", "posix.abort=os.abort", platform="posix")
_add(
    "process-control",
    "os.setsid posix.setsid=os.setsid os.setpgid posix.setpgid=os.setpgid",
    platform="posix",
)
_add("process-control", "os.setpgrp posix.setpgrp=os.setpgrp", platform="posix")
_add("process-control", "signal.alarm _signal.alarm=signal.alarm", platform="posix")
_add("process-control", "signal.setitimer _signal.setitimer=signal.setitimer", platform="posix")
_add("process-control", "signal.raise_signal _signal.raise_signal=signal.raise_signal")
_add(
    "process-control",
    "signal.pthread_kill _signal.pthread_kill=signal.pthread_kill",
    platform="posix",
)
_add("process-control", "resource.setrlimit", platform="posix")
_add("process-control", "resource.prlimit", platform="linux")
_add("process-control", "nt.kill=os.kill nt.abort=os.abort", platform="win32")
_add("process-control", "sys.remote_exec", since=(3, 14))

# -- privileges ---------------------------------------------------------------------------
for _fn in (
    "setuid",
    "setgid",
    "seteuid",
    "setegid",
    "setreuid",
    "setregid",
    "setgroups",
    "initgroups",
):
    _add("privileges", f"os.{_fn} posix.{_fn}=os.{_fn}", platform="posix")
for _fn in ("setresuid", "setresgid"):
    _add("privileges", f"os.{_fn} posix.{_fn}=os.{_fn}", platform="linux")
for _fn in ("unshare", "setns"):
    _add("privileges", f"os.{_fn} posix.{_fn}=os.{_fn}", platform="linux", since=(3, 12))
_add("privileges", "os.umask")
_add("privileges", "posix.umask=os.umask", platform="posix")
_add("privileges", "nt.umask=os.umask", platform="win32")

# -- threads ------------------------------------------------------------------------------
_add(
    "threads",
    "_thread.start_new_thread _thread.start_new=_thread.start_new_thread",
    events=("_thread.start_new_thread",),
)
_add("threads", "_thread.start_joinable_thread", since=(3, 13))
_add("threads", "threading._start_joinable_thread=_thread.start_joinable_thread", since=(3, 13))
_add("threads", "threading._start_new_thread=_thread.start_new_thread", until=(3, 13))
_add("threads", "threading:Thread.start _thread.interrupt_main")
_add("threads", "threading.settrace threading.setprofile")
_add("threads", "threading.stack_size=_thread.stack_size _thread.stack_size")

# -- native -------------------------------------------------------------------------------
_add("native", "ctypes:CDLL.__init__", events=("ctypes.dlopen",))
_add("native", "ctypes.cast ctypes.string_at ctypes.wstring_at ctypes.memmove ctypes.memset")
_add("native", "_ctypes.dlopen", platform="posix", events=("ctypes.dlopen",))
# Looking a symbol up (``ctypes.pythonapi.Py_...``, ``CDLL(...).getpid``) raises this event.
_add("native", "_ctypes.dlsym", platform="posix", events=("ctypes.dlsym",))
_add("native", "_ctypes.LoadLibrary", platform="win32")
# Every call of a foreign function (ctypes.pythonapi included) raises this event.
_add("native", "_ctypes.call_function", patch=False, events=("ctypes.call_function",))
# Raw memory through ctypes' types: an instance at any address (``py_object.from_address``),
# or over bytes that may hold a pointer (``POINTER(T).from_buffer_copy``), an object from
# an address, reference counts changed by hand. The class methods live on C metaclasses
# the program cannot patch: judged through the events their C code raises.
_add("native", "_ctypes:_CData.from_address", patch=False, events=("ctypes.cdata",))
_add("native", "_ctypes:_CData.from_buffer", patch=False, events=("ctypes.cdata/buffer",))
_add("native", "_ctypes.PyObj_FromPtr", events=("ctypes.PyObj_FromPtr",))
_add("native", "_ctypes.Py_INCREF _ctypes.Py_DECREF")

# -- introspection ------------------------------------------------------------------------
_add("introspection", "importlib.reload sys.settrace sys.setprofile sys.addaudithook", events=())
_add(
    "introspection",
    "threading.settrace_all_threads threading.setprofile_all_threads",
    since=(3, 12),
)
_add("introspection", "sys._settraceallthreads sys._setprofileallthreads", since=(3, 12))
_add("introspection", "sys:monitoring.use_tool_id sys:monitoring.register_callback", since=(3, 12))
_add("introspection", "gc.get_objects", events=("gc.get_objects",))
_add("introspection", "gc.get_referrers", events=("gc.get_referrers",))
_add("introspection", "gc.get_referents", events=("gc.get_referents",))
_add("introspection", "sys._current_frames", events=("sys._current_frames",))
_add("introspection", "faulthandler.enable")

# -- dynamic-code -------------------------------------------------------------------------
_add("dynamic-code", "builtins.eval builtins.exec builtins.compile")

# -- deserialization ----------------------------------------------------------------------
_add("deserialization", "pickle.loads pickle.load", events=("pickle.find_class",))
_add("deserialization", "_pickle.loads=pickle.loads _pickle.load=pickle.load", optional=True)
_add("deserialization", "pickle._loads pickle._load pickle:_Unpickler.__init__")
_add("deserialization", "pickle.Unpickler", patch=False, events=("pickle.find_class",))
_add("deserialization", "_pickle.Unpickler=pickle.Unpickler", patch=False, optional=True)
del _fn

#: Every entry, in table order.
ENTRIES: tuple[Entry, ...] = tuple(_ENTRIES)
#: qualname -> entry
BY_NAME: dict[str, Entry] = {e.qualname: e for e in ENTRIES}
assert len(BY_NAME) == len(ENTRIES), "duplicate registry entries"


def targets() -> frozenset[str]:
    """Every valid ``api`` rule target: ``*``, categories and qualified names."""
    return frozenset({"*", *CATEGORIES, *BY_NAME})


def applicable(
    version: tuple[int, int] | None = None, platform: str | None = None
) -> Iterator[Entry]:
    return (e for e in ENTRIES if e.applies(version, platform))


def resolve(
    rules: Sequence[tuple[str, str]], entries: tuple[Entry, ...] = ENTRIES
) -> dict[str, bool]:
    """Decide every entry from ``(action, target)`` rules (SPEC §4 "api").

    A rule on a function (or any spelling of it) beats a rule on its category, which beats
    ``*``; at equal specificity ``deny`` wins; the order of the rules never matters.
    """
    by_function: dict[str, set[str]] = {}
    by_category: dict[str, set[str]] = {}
    star: set[str] = set()
    for action, target in rules:
        if target == "*":
            star.add(action)
        elif target in CATEGORIES:
            by_category.setdefault(target, set()).add(action)
        elif target in BY_NAME:
            by_function.setdefault(BY_NAME[target].group, set()).add(action)
    out = {}
    for e in entries:
        for actions in (by_function.get(e.group), by_category.get(e.category), star or None):
            if actions:
                out[e.qualname] = "deny" not in actions
                break
        else:
            out[e.qualname] = False
    return out


def render_markdown() -> str:
    """docs/api-registry.md: every entry, by category, with where it applies."""
    lines = [
        "# The sensitive-API registry",
        "",
        "<!-- generated by `python -m pysb_guards.registry`; do not edit by hand -->",
        "",
        "Every function below is **denied by default**, whatever `imports` allows. Allow it",
        "with `api: allow: [NAME]` (one function, every spelling of it) or",
        "`api: allow: [CATEGORY]` (the whole category); `api: allow: ['*']` allows all.",
        "A rule on a function beats a rule on its category, which beats `*`; at equal",
        "specificity `deny` wins. A target not listed here is a profile error.",
        "",
        "A call may cross several doors (`subprocess.run` -> `subprocess.Popen` ->",
        "`_posixsubprocess.fork_exec`): each is judged, and a refusal names the door it",
        "stopped at. The *audit events* column lists the PEP 578 events through which the",
        "guard also judges the function when it is reached without its patched face.",
        "",
        f"{len(ENTRIES)} names in {len(CATEGORIES)} categories.",
        "",
    ]
    for category, help_text in CATEGORIES.items():
        members = [e for e in ENTRIES if e.category == category]
        lines += [f"## `{category}`", "", f"{help_text[0].upper()}{help_text[1:]}.", ""]
        lines += ["| name | same function as | applies | audit events |", "|---|---|---|---|"]
        for e in members:
            where = []
            if e.platform:
                where.append({"posix": "POSIX", "linux": "Linux", "win32": "Windows"}[e.platform])
            if e.since:
                where.append(f"Python >= {e.since[0]}.{e.since[1]}")
            if e.until:
                where.append(f"Python < {e.until[0]}.{e.until[1]}")
            if e.optional:
                where.append("when present")
            if not e.patch:
                where.append("audit events only")
            alias = f"`{e.alias_of}`" if e.alias_of else ""
            events = ", ".join(f"`{ev}`" for ev in e.events)
            lines.append(f"| `{e.qualname}` | {alias} | {', '.join(where) or 'all'} | {events} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - exercised by the docs test
    sys.stdout.write(render_markdown())
