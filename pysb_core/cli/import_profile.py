"""``pysb import-profile PATH [-o OUT]``: a pysandboxes 0.7.0 ``.py-sandboxes`` as ``.pysb.yaml``.

Reading and converting the lines is :mod:`pysb_core.cli.pysandboxes_format`; this module
asks the installed plugins which ``api`` targets exist, writes the YAML and maps problems
to exit statuses (125 and one ``FILE:LINE: message`` per problem for a file pysandboxes
itself would refuse, as every pysb user error).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from pysb_core.cli.pysandboxes_format import Converted, collect, convert_lines
from pysb_core.errors import ExitCode

#: ``python-sb`` adds this rule to every run; the converted profile says it explicitly.
IMPLICIT_ENV = ("TERM", "${TERM}")


def _api_checker() -> Callable[[str], str | None]:
    """``target -> None`` when pysb's api guard knows it, else why it does not."""
    from pysb_core.launch.plugins import Hooks, get_plugin_manager
    from pysb_core.profile import ProfileSchema

    schema = ProfileSchema()
    pm, _ = get_plugin_manager(light=True)
    Hooks(pm).add_profile_keys(schema)
    if not schema.has_validators("api"):
        return lambda _target: None

    def check(target: str) -> str | None:
        problems = schema.validate("api", {"allow": [target]}, "<import>")
        if not problems:
            return None
        return problems[0].split(": api: ", 1)[-1].split("; a target is", 1)[0]

    return check


def _landlock_default() -> str:
    """What pysandboxes writes for ``@DEFAULT_OS_SANDBOX@`` on this machine: landlock when
    the kernel supports it, else subprocess (asked of pysb's landlock provider)."""
    from pysb_core.launch.drivers import load_provider_class, provider_names

    if "landlock" not in provider_names():
        return "subprocess"
    try:
        return "landlock" if load_provider_class("landlock")({}).probe().available else "subprocess"
    except Exception:  # a broken probe: the portable choice
        return "subprocess"


def convert_file(path: str, *, cwd: str, environ: Mapping[str, str]) -> Converted:
    """Read ``path`` (with its includes) and convert every line."""
    out = Converted()
    lines = collect(os.path.join(cwd, path), cwd=cwd, environ=environ, out=out, seen=set())
    convert_lines(lines, out, known_api=_api_checker(), landlock_default=_landlock_default())
    return out


def _scalar(value: str) -> str:
    from pysb_core.profile.writer import scalar_text

    return scalar_text(value)


def render(out: Converted) -> str:
    """The converted profile as YAML, with where each rule came from."""
    sources = ", ".join(out.sources)
    text = [
        f"# pysb profile converted by `pysb import-profile` from {sources} (pysandboxes 0.7.0).",
        "# Each rule names the line it came from; what could not be carried over is listed",
        "# at the end. Review it, then check it: pysb check --provider NAME. docs/migrating.md",
        "version: 1",
    ]
    for key in ("provider", "python-guards", "learn"):
        if key in out.scalars:
            value, where = out.scalars[key]
            shown = value if key != "provider" else _scalar(value)  # the others are booleans
            text.append(f"{key}: {shown}  # {where}")
    text.append("env:")
    names = {name for name, _, _ in out.env}
    if IMPLICIT_ENV[0] not in names:
        text.append(
            f"  {IMPLICIT_ENV[0]}: {_scalar(IMPLICIT_ENV[1])}  # python-sb adds it to every run"
        )
    for name, value, where in out.env:
        text.append(f"  {_scalar(name)}: {_scalar(value)}  # {where}")
    _block_list(text, "unenv", out.lists.get("unenv", []), indent="")
    files = [k for k in ("files.expose-ro", "files.expose-rw", "files.ignore") if k in out.lists]
    if files:
        text.append("files:")
        for key in files:
            _block_list(text, key.split(".", 1)[1], out.lists[key], indent="  ")
    _block_list(text, "network", out.lists.get("network", []), indent="")
    imports = out.lists.get("imports", [])
    if any(name == "*" for name, _ in imports):
        where = next(w for name, w in imports if name == "*")
        text.append(f'imports: "*"  # {where}')
    else:
        _block_list(text, "imports", imports, indent="")
    api = [k for k in ("api.allow", "api.deny") if k in out.lists]
    if api:
        text.append("api:")
        for key in api:
            _block_list(text, key.split(".", 1)[1], out.lists[key], indent="  ")
    if out.provider_options:
        text.append("providers:")
        for provider, options in out.provider_options.items():
            text.append(f"  {provider}:")
            for key, value, where in options:
                text.append(f"    {key}: {_scalar(value)}  # {where}")
    if out.dropped:
        text += ["", "# Not carried over:"]
        for where, line, why in out.dropped:
            text.append(f"# {where}: {line}")
            text.append(f"#     {why}")
    return "\n".join(text) + "\n"


def _block_list(text: list[str], key: str, items: list[tuple[str, str]], *, indent: str) -> None:
    if not items:
        return
    text.append(f"{indent}{key}:")
    seen: set[str] = set()
    for item, where in items:
        if item in seen:
            continue
        seen.add(item)
        text.append(f"{indent}  - {_scalar(item)}  # {where}")


def import_profile(path: str, output: str | None, *, verbosity: int = 0) -> int:
    """Convert ``path``; write ``output`` (stdout when None or ``-``); return the status.

    ``verbosity`` -1 prints nothing but errors; 1 also lists, on stderr, each line not
    carried over."""
    cwd = os.getcwd()
    if not os.path.isfile(path):
        sys.stderr.write(f"pysb: error: {path}: no such file\n")
        return ExitCode.SETUP_FAILED
    out = convert_file(path, cwd=cwd, environ=os.environ)
    if out.errors:
        for message in out.errors:
            sys.stderr.write(f"{message}\n")
        sys.stderr.write(
            f"pysb: error: {path} is not a valid pysandboxes 0.7.0 configuration; "
            "nothing was written\n"
        )
        return ExitCode.SETUP_FAILED
    text = render(out)
    if output in (None, "-"):
        sys.stdout.write(text)
    else:
        assert output is not None
        try:
            with open(output, "x", encoding="utf-8") as f:
                f.write(text)
        except FileExistsError:
            sys.stderr.write(f"pysb: error: {output} exists; not overwritten\n")
            return ExitCode.SETUP_FAILED
        except OSError as exc:
            sys.stderr.write(f"pysb: error: cannot write {output}: {exc.strerror}\n")
            return ExitCode.SETUP_FAILED
        if verbosity >= 0:
            rules = sum(len(v) for v in out.lists.values()) + len(out.env)
            sys.stderr.write(
                f"pysb: wrote {output}: {rules} rule(s), {len(out.dropped)} line(s) "
                "not carried over (listed at its end)\n"
            )
    if verbosity > 0:
        for where, line, why in out.dropped:
            sys.stderr.write(f"{where}: not carried over: {line}\n    {why}\n")
    return 0
