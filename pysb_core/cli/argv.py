"""Split ``pysb run``'s arguments the way CPython splits its own.

Parsing stops at ``-m``, ``-c``, ``-``, ``--`` or the first non-option (the script);
everything after belongs to the program, untouched. CPython's short options before that
point (glued or not, grouped like ``-Im json.tool``) go to the sandboxed interpreter.
pysb's own options are long options, so the two never collide. Two exceptions, for
help: ``-h`` before the program is pysb's ``--help``, and CPython's informational options
right after ``--`` (``pysb run -- -h``, ``-- --help-all``, ``-- -V``) ask for CPython's own
text (mode ``"python-info"``), which needs no sandbox.
"""

from __future__ import annotations

from pysb_core._startup.records import Record, field, mutable_record

#: CPython flags without an argument, and those taking one.
PY_FLAGS = frozenset("bBdEhiIOPqsSuvVx")
PY_WITH_ARG = frozenset("WX")
#: CPython options that only print something (help, version): ``pysb run -- -h``.
PY_INFO_OPTIONS = frozenset(
    {"-h", "-?", "--help", "--help-env", "--help-xoptions", "--help-all", "-V", "--version"}
)

#: pysb's long options: name -> (takes a value, repeatable, value optional).
PYSB_OPTIONS: dict[str, tuple[bool, bool, bool]] = {
    "provider": (True, False, False),
    "profile": (True, False, False),
    "learn": (True, False, True),
    "no-python-guards": (False, False, False),
    "no-ipython": (False, False, False),
    "events": (True, False, False),
    "expose-ro": (True, True, False),
    "expose-rw": (True, True, False),
    "ignore": (True, True, False),
    "net": (True, True, False),
    "import": (True, True, False),
    "allow-api": (True, True, False),
    "env": (True, True, False),
    "verbose": (False, False, False),
    "quiet": (False, False, False),
    "help": (False, False, False),
    "debug": (False, False, False),
}


class UsageError(Exception):
    """A command line pysb cannot understand (exit 2, like CPython and click)."""


@mutable_record
class RunArgs(Record):
    options: dict[str, object] = field(default_factory=dict)
    python_opts: list[str] = field(default_factory=list)
    #: "code" | "module" | "script" | "stdin" | "auto" (REPL or stdin) | "python-info"
    mode: str = "auto"
    target: str | None = None
    args: list[str] = field(default_factory=list)

    def get(self, name: str, default: object = None) -> object:
        return self.options.get(name, default)

    def many(self, name: str) -> list[str]:
        value = self.options.get(name, [])
        return list(value) if isinstance(value, list) else []


def _long_option(arg: str, rest: list[str], out: RunArgs) -> None:
    name, eq, value = arg[2:].partition("=")
    spec = PYSB_OPTIONS.get(name)
    if spec is None:
        import difflib  # only for a mistyped option

        hint = difflib.get_close_matches(name, PYSB_OPTIONS, n=1)
        suggestion = f" (did you mean --{hint[0]}?)" if hint else ""
        raise UsageError(f"no such option: --{name}{suggestion}")
    takes_value, repeatable, optional = spec
    if not takes_value:
        if eq:
            raise UsageError(f"option --{name} does not take a value")
        out.options[name] = True
        return
    if not eq:
        if optional:
            out.options[name] = True
            return
        if not rest:
            raise UsageError(f"option --{name} requires a value")
        value = rest.pop(0)
    if repeatable:
        values = out.options.setdefault(name, [])
        assert isinstance(values, list)
        values.append(value)
    else:
        out.options[name] = value


def split_run_args(argv: list[str]) -> RunArgs:
    """Parse ``pysb run``'s arguments (everything after ``run``)."""
    out = RunArgs()
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            if rest and rest[0] in PY_INFO_OPTIONS:
                out.mode, out.target, out.args = "python-info", rest.pop(0), rest
                return out
            if rest:
                out.mode, out.target = "script", rest.pop(0)
                if out.target == "-":
                    out.mode = "stdin"
            out.args = rest
            return out
        if arg == "-":
            out.mode, out.args = "stdin", rest
            return out
        if arg.startswith("--"):
            _long_option(arg, rest, out)
            continue
        if not arg.startswith("-"):
            out.mode, out.target, out.args = "script", arg, rest
            return out
        # A group of CPython short options: -Im json.tool, -Werror, -cprint(1), -OO.
        i = 1
        while i < len(arg):
            ch = arg[i]
            if ch == "h":  # pysb's help; CPython's is `pysb run -- -h`
                out.options["help"] = True
                return out
            if ch in "cm":
                value = arg[i + 1 :]
                if not value:
                    if not rest:
                        raise UsageError(f"Argument expected for the -{ch} option")
                    value = rest.pop(0)
                out.mode = "code" if ch == "c" else "module"
                out.target, out.args = value, rest
                return out
            if ch in PY_WITH_ARG:
                value = arg[i + 1 :]
                if not value:
                    if not rest:
                        raise UsageError(f"Argument expected for the -{ch} option")
                    value = rest.pop(0)
                out.python_opts += [f"-{ch}", value]
                break
            if ch in PY_FLAGS:
                out.python_opts.append(f"-{ch}")
                i += 1
                continue
            raise UsageError(f"Unknown option: -{ch}")
    return out
