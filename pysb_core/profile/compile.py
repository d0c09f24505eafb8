"""Turn the merged profile (plus CLI/API additions) into the frozen :class:`Policy`.

This is where values get their meaning: paths are resolved against the working directory
and must be existing directories, network rules are parsed, limits get their units, the
child environment is computed (nothing from the host but what ``env`` names), and the
``learn: false`` lock refuses additions. Every problem of every file is collected first
and raised together as one :class:`ProfileError`.

Why one module: it is the one place where profile values get their meaning; :class:`_Compiler`
collects every problem of every file before raising, and the CLI/API additions and learning lock
must go through the same collector. Splitting would mean passing that collector across modules,
and the profile room already holds loading, variables and merging apart.
"""

from __future__ import annotations

import errno
import os
import stat

from pysb_core.errors import ProfileError
from pysb_core.linux.paths import is_within
from pysb_core.policy import AUTO, ApiRule, Exposure, IgnoreRule, Limits, NetworkRule, Policy
from pysb_core.profile.loader import expand_user, load_files
from pysb_core.profile.merge import NAMED_SCALARS, Item, merge_files
from pysb_core.profile.schema import Located, ProfileSchema
from pysb_core.profile.variables import VariableError, expand, is_absent

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from pysb_core.profile import CliRules
    from pysb_core.profile.loader import ProfileFile
    from pysb_core.profile.merge import Collected, EnvEntry

    OptionChecker = Callable[[str], Callable[[Mapping[str, Any]], list[str]] | None]

CLI = "<cli>"
DEFAULT_PROFILE = ".pysb.yaml"
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_GLOB_CHARS = "*?["


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    return None


class _Compiler:
    def __init__(
        self, c: Collected, *, cwd: str, environ: Mapping[str, str], schema: ProfileSchema
    ) -> None:
        self.c = c
        self.cwd = cwd
        self.environ = environ
        self.schema = schema
        self.errors: list[str] = []

    def err(self, loc: str, msg: str) -> None:
        self.errors.append(f"{loc}: {msg}")

    def items(self, key: str) -> list[Item]:
        return self.c.lists.get(key, [])

    # -- paths --

    def abspath(self, text: str) -> str:
        path = expand_user(text, self.environ)
        return os.path.normpath(os.path.join(self.cwd, path))

    def exposures(self) -> tuple[Exposure, ...]:
        found: dict[tuple[str, str], Exposure] = {}
        links: list[tuple[Exposure, str, str, list[tuple[str, str]]]] = []
        for key, writable in (("files.expose-ro", False), ("files.expose-rw", True)):
            for item in self.items(key):
                resolved = self.exposure(item, key, writable)
                if resolved is None:
                    continue
                exp, followed = resolved
                if followed:
                    links.append((exp, key, item.value, followed))
                old = found.get((exp.path, exp.target))
                if old is None or (writable and not old.writable):
                    found[(exp.path, exp.target)] = exp  # rw wins over ro of the same dir
        writable_dirs = [e for e in found.values() if e.writable]
        for exp, key, text, followed in links:
            self.refuse_planted_links(exp, key, text, followed, writable_dirs)
        return tuple(found.values())

    def refuse_planted_links(
        self,
        exp: Exposure,
        key: str,
        text: str,
        followed: list[tuple[str, str]],
        writable: list[Exposure],
    ) -> None:
        """An exposure must never be resolved through a path the sandbox could write: a
        symbolic link inside a read-write exposure may have been put there by an earlier
        run to point this exposure anywhere on the host (issue 22). The run is refused
        rather than the link followed."""
        for link, target in followed:
            parent = os.path.dirname(link)
            holder = next((w for w in writable if is_within(parent, w.path)), None)
            if holder is None:
                continue
            self.err(
                exp.source,
                f"{key}: {text!r} is reached through the symbolic link {link} -> {target}, "
                f"which lies inside the read-write exposure {holder.path} ({holder.source}): "
                "a sandboxed program could have made it to redirect this exposure. Name the "
                "directory by its real path, or remove the link",
            )
            return

    def exposure(
        self, item: Item, key: str, writable: bool
    ) -> tuple[Exposure, list[tuple[str, str]]] | None:
        """The exposure an entry names, with the symbolic links its resolution followed
        (checked by :meth:`refuse_planted_links` once every read-write exposure is known)."""
        text: str = item.value
        src, dest = text, None
        if ":" in text and not os.path.isdir(self.abspath(text)):
            src, dest = text.rsplit(":", 1)
            if not src or not dest:
                self.err(item.loc, f"{key}: {text!r}: write SRC:DEST with both parts")
                return None
        path = self.abspath(src)
        if not os.path.isdir(path):
            if os.path.exists(path):
                why = "is not a directory (expose the directory that holds it)"
            else:
                why = "does not exist (an exposure must be an existing directory)"
            self.err(item.loc, f"{key}: {src!r} {why}")
            return None
        try:
            real, followed = resolve(path)
        except OSError as exc:
            self.err(item.loc, f"{key}: {src!r} cannot be resolved: {exc.strerror or exc}")
            return None
        target = real if dest is None else self.abspath(dest)
        return Exposure(path=real, target=target, writable=writable, source=item.loc), followed

    def ignore(self) -> tuple[IgnoreRule, ...]:
        rules: list[IgnoreRule] = []
        for item in self.items("files.ignore"):
            pattern = item.value.strip()
            if pattern.startswith("~") or pattern.startswith(("./", "../")) or pattern == ".":
                # a path spelled relative to the working directory means that path, not a
                # component glob ("./secrets" must not also hide ./data/secrets)
                pattern = self.abspath(pattern)
            rules.append(IgnoreRule(pattern=pattern, source=item.loc))
        return tuple(rules)

    # -- network, imports, api --

    def network(self) -> tuple[NetworkRule, ...]:
        items = self.items("network")
        if not items:
            return ()
        try:
            from pysb_core.policy.netrules import parse_rule
        except ImportError:
            self.err(
                items[0].loc, "network: rules cannot be checked (pysb_core.policy.netrules missing)"
            )
            return ()
        rules: list[NetworkRule] = []
        for item in items:
            try:
                rules.append(parse_rule(item.value, item.loc))
            except ValueError as exc:
                self.err(item.loc, f"network: {exc}")
        return tuple(rules)

    def imports(self) -> tuple[tuple[str, ...] | None, str]:
        items = self.items("imports")
        if not items and "imports" not in self.c.seen:
            return None, ""
        names: list[str] = []
        for item in items:
            for name in (n.strip() for n in item.value.split(",")):
                if name == "*":
                    names.append("*")
                elif not all(part.isidentifier() for part in name.split(".")):
                    self.err(item.loc, f"imports: {name!r} is not a module name")
                elif "." in name:
                    top = name.split(".", 1)[0]
                    self.err(
                        item.loc,
                        f"imports: {name!r} is not a top-level name; write {top!r} "
                        "(a submodule follows its top-level package)",
                    )
                elif name not in names:
                    names.append(name)
        source = items[0].loc if items else ""
        if "*" in names:
            return ("*",), source
        return tuple(names), source

    def api(self) -> tuple[ApiRule, ...]:
        rules: list[ApiRule] = []
        for action in ("allow", "deny"):
            for item in self.items(f"api.{action}"):
                target = item.value.strip()
                if not target or any(c.isspace() for c in target):
                    self.err(item.loc, f"api.{action}: {item.value!r} is not an api target")
                    continue
                rules.append(ApiRule(action=action, target=target, source=item.loc))  # type: ignore[arg-type]
        return tuple(rules)

    # -- env --

    def env(self, learning: bool, cli_env: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        env: dict[str, str] = {}
        sources: dict[str, str] = {}
        if learning:  # the child must see the host's variables for their reads to be learned
            env.update(self.environ)
            sources.update(dict.fromkeys(self.environ, "<learning>"))
        entries = list(self.c.env.items())
        for name, entry in entries:  # globs first: an explicit name beats a glob's match
            if any(ch in name for ch in _GLOB_CHARS):
                self.env_glob(name, entry, env, sources)
        for name, entry in entries:
            if any(ch in name for ch in _GLOB_CHARS):
                continue
            value = self.env_text(name, entry.text, entry)
            if value is not None:
                env[name], sources[name] = value, entry.loc
        for spec in cli_env:
            name, sep, value = spec.partition("=")
            if not name or "\0" in spec:
                self.err(CLI, f"--env: {spec!r}: write NAME=VALUE")
                continue
            if not sep:  # --env NAME forwards the host's value
                if name not in self.environ:
                    continue
                value = self.environ[name]
            env[name], sources[name] = value, CLI
        for item in self.items("unenv"):
            from fnmatch import fnmatchcase  # (fnmatch imports re: only when needed)

            for name in [n for n in env if fnmatchcase(n, item.value.strip())]:
                del env[name]
                sources.pop(name, None)
        return env, sources

    def env_text(self, name: str, text: str, entry: EnvEntry) -> str | None:
        if not entry.expand:
            return text
        try:
            if is_absent(text, self.environ, entry.directory):
                return None
            value = expand(text, self.environ, entry.directory)
        except VariableError as exc:
            self.err(entry.loc, f"env: {name}: {exc}")
            return None
        if "\0" in value:  # execve cannot pass it: refuse rather than truncate
            self.err(entry.loc, f"env: {name}: the value holds a NUL character")
            return None
        return value

    def env_glob(
        self, pattern: str, entry: EnvEntry, env: dict[str, str], sources: dict[str, str]
    ) -> None:
        def rewrite(text: str, name: str) -> str:
            return text.replace("${" + pattern + "}", "${" + name + "}").replace(
                "${" + pattern + ":-", "${" + name + ":-"
            )

        if entry.expand:  # check the form even when no host variable matches
            try:
                expand(rewrite(entry.text, "PYSB_GLOB_CHECK"), {}, entry.directory)
            except VariableError as exc:
                self.err(entry.loc, f"env: {pattern}: {exc}")
                return
        from fnmatch import fnmatchcase

        for name in sorted(self.environ):
            if fnmatchcase(name, pattern):
                value = self.env_text(name, rewrite(entry.text, name), entry)
                if value is not None:
                    env[name], sources[name] = value, entry.loc

    # -- limits --

    def limits(self) -> Limits:
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        if not any(key.startswith("limits.") for key in self.c.scalars):
            return Limits(sources=sources)
        from pysb_core.profile.units import parse_count, parse_duration, parse_size

        parsers = {
            "memory": ("memory", parse_size),
            "processes": ("processes", parse_count),
            "open-files": ("open_files", parse_count),
            "cpu-time": ("cpu_time", parse_duration),
            "wall-time": ("wall_time", parse_duration),
            "tmp": ("tmp", parse_size),
        }
        for key, (attr, parse) in parsers.items():
            item = self.c.scalars.get(f"limits.{key}")
            if item is None:
                continue
            try:
                value = parse(item.value)
            except ValueError as exc:
                self.err(item.loc, f"limits.{key}: {exc}")
                continue
            if attr == "cpu_time":
                value = max(1, int(-(-value // 1)))  # rlimits count whole seconds: round up
            values[attr] = value
            sources[key] = item.loc
        tmp, memory = values.get("tmp"), values.get("memory")
        if tmp is not None and memory is not None and tmp > memory:
            self.err(
                sources["tmp"],
                "limits.tmp is larger than limits.memory: the private /tmp is memory "
                "(a tmpfs) under bwrap, unshare, firejail and qemu, and counts against it",
            )
        return Limits(**values, sources=sources)


def resolve(path: str) -> tuple[str, list[tuple[str, str]]]:
    """The canonical form of the absolute ``path``, as :func:`os.path.realpath` gives it,
    and every symbolic link followed on the way: ``(link, link text)``, each link named by
    its canonical directory. Who could have made a link is decided from where it lies.
    ``OSError`` (ELOOP) on a link loop; a missing component ends the walk as is."""
    pending = [p for p in reversed(path.split(os.sep)) if p]
    current = os.sep
    followed: list[tuple[str, str]] = []
    while pending:
        name = pending.pop()
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            st = os.lstat(candidate)
        except OSError:  # gone or unreadable: the rest is taken literally
            return os.path.normpath(os.path.join(candidate, *reversed(pending))), followed
        if not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        if len(followed) >= 40:  # as the kernel's MAXSYMLINKS
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        target = os.readlink(candidate)
        followed.append((candidate, target))
        if target.startswith(os.sep):
            current = os.sep
        pending.extend(p for p in reversed(target.split(os.sep)) if p)
    return current, followed


def verify_exposures(exposures: tuple[Exposure, ...] | list[Exposure]) -> None:
    """Refuse (:class:`SandboxError`, exit 125) when a profile exposure, canonical when
    the profile was read, now reaches its directory through a symbolic link: a component
    was swapped for a link in between (a sandbox running meanwhile can do that inside its
    read-write exposures). Checked again for every sandbox started, just before the
    provider mounts or opens the paths; Landlock then opens them without following links
    at all, the namespace providers bind them by path (docs/security.md)."""
    from pysb_core.errors import SandboxError

    for exp in exposures:
        if exp.implicit:
            continue
        try:
            real, followed = resolve(exp.path)
        except OSError as exc:
            raise SandboxError(f"{exp.source}: exposure {exp.path}: {exc.strerror}") from None
        if followed or real != exp.path:
            link, target = followed[0] if followed else (exp.path, real)
            raise SandboxError(
                f"{exp.source}: the exposure {exp.path} now goes through the symbolic link "
                f"{link} -> {target}, made after the profile was read: refusing to start"
            )


def _cli_items(values: list[str] | None) -> list[Item]:
    return [Item(v, CLI) for v in values or ()]


def _add_cli(c: Collected, cli: CliRules) -> None:
    for key, values in (
        ("files.expose-ro", cli.expose_ro),
        ("files.expose-rw", cli.expose_rw),
        ("files.ignore", cli.ignore),
        ("network", cli.net),
        ("imports", cli.imports),
        ("api.allow", cli.allow_api),
    ):
        if values:
            c.lists.setdefault(key, []).extend(_cli_items(values))
            c.seen.add(key.split(".", 1)[0])


def _cli_options(cli: CliRules | None) -> list[str]:
    if cli is None:
        return []
    names = {
        "expose_ro": "--expose-ro",
        "expose_rw": "--expose-rw",
        "ignore": "--ignore",
        "net": "--net",
        "imports": "--import",
        "allow_api": "--allow-api",
        "env": "--env",
    }
    return [opt for attr, opt in names.items() if getattr(cli, attr)]


def load_policy(
    profile: str | None,
    *,
    cwd: str,
    environ: Mapping[str, str],
    cli: CliRules | None = None,
    provider: str | None = None,
    python_guards: bool | None = None,
    learn: bool | str | None = None,
    schema: ProfileSchema | None = None,
    option_checker: OptionChecker | None = None,
) -> Policy:
    """Load ``profile`` (with includes), add ``cli`` rules, and compile the frozen policy.

    ``option_checker(name)``: the ``validate_options`` of installed provider ``name`` (None
    when it is not installed: its options are kept and ignored), so that the options of
    ``providers:`` are reported with every other error, each at its own line.

    ``profile=None``, or a path that does not exist, compiles no file at all: the empty,
    deny-everything policy -- or, with ``learn``, a learning run that creates the profile.
    Whether a run may start without a profile is decided before, by
    :meth:`~pysb_core.profile.discovery.ProfileChoice.require` (it may not, unless learning).
    Arguments override the profile's scalars. Raises :class:`ProfileError` listing every
    problem as ``FILE:LINE: message``.
    """
    schema = schema or ProfileSchema()
    cwd = os.path.abspath(cwd)
    errors: list[str] = []
    files: list[ProfileFile] = []
    profile_path: str | None = None
    if profile is not None:
        profile_path = os.path.normpath(os.path.join(cwd, expand_user(profile, environ)))
        if not _missing(profile_path):
            files, errs = load_files(profile_path, cwd=cwd, environ=environ)
            errors.extend(errs)
    collected, errs = merge_files(files, schema, environ)
    errors.extend(errs)

    comp = _Compiler(collected, cwd=cwd, environ=environ, schema=schema)
    sc = collected.scalars

    # lock and learning
    lock_item = sc.get("learn")
    if lock_item is not None and _as_bool(lock_item.value) is not False:
        lock_item = None
    locked = lock_item is not None
    if lock_item is not None:
        for opt in _cli_options(cli):
            comp.err(CLI, f"{opt} refused: 'learn: false' at {lock_item.loc} locks the rules")
        if learn:
            comp.err(CLI, f"learning refused: 'learn: false' at {lock_item.loc} locks this profile")
    learning, learn_path = _learning(comp, sc.get("learn"), learn, profile_path, cwd)

    if cli is not None and not locked:
        _add_cli(collected, cli)
        if cli.allow_api and schema.has_validators("api"):
            located = [Located(t, CLI) for t in cli.allow_api]
            comp.errors.extend(schema.validate("api", {"allow": located}, CLI))

    # scalars
    version = sc.get("version")
    if version is not None and str(version.value).strip() != "1":
        comp.err(version.loc, f"version: unsupported version {version.value!r} (expected 1)")
    chosen = provider
    if chosen is not None and not _provider_name(chosen):
        comp.err(CLI, f"provider: {chosen!r} is not a provider name")
    elif chosen is None and "provider" in sc:
        item = sc["provider"]
        chosen = str(item.value).strip()
        if not chosen:
            comp.err(item.loc, f"provider: empty value; {NAMED_SCALARS['provider']}")
        elif not _provider_name(chosen):
            comp.err(item.loc, f"provider: {item.value!r} is not a provider name")
    # Nothing named: the strongest that qualifies (the pipeline chooses; a learning run
    # uses subprocess whatever is asked, and says so).
    chosen = chosen or AUTO
    guards = python_guards
    if guards is None and "python-guards" in sc:
        item = sc["python-guards"]
        guards = _as_bool(item.value)
        if guards is None:
            comp.err(item.loc, f"python-guards: expected true or false, got {item.value!r}")
    guards = True if guards is None else guards

    exposures = comp.exposures()
    ignore = comp.ignore()
    network = comp.network()
    imports, imports_source = comp.imports()
    api = comp.api()
    env, env_sources = comp.env(learning, [] if cli is None or locked else cli.env)
    limits = comp.limits()
    errors.extend(comp.errors)
    if option_checker is not None:
        errors.extend(_option_errors(collected, option_checker))
    if errors:
        raise ProfileError(_ordered(_dedupe(errors), files))

    all_options = {
        name: {k: item.value for k, item in opts.items()}
        for name, opts in collected.providers.items()
    }
    return Policy(
        exposures=exposures,
        ignore=ignore,
        network=network,
        imports=imports,
        imports_source=imports_source,
        api=api,
        env=env,
        env_sources=env_sources,
        limits=limits,
        provider=chosen,
        provider_options=all_options,
        python_guards=guards,
        learn=learning,
        learn_path=learn_path,
        locked=locked,
        profile_files=tuple(pf.path for pf in files),
        profile_digests=tuple(pf.digest for pf in files),
        profile_path=profile_path if files else None,
        cwd=cwd,
        extra=_third_party_values(collected, schema),
        extra_sources={k: tuple(v) for k, v in collected.extra_sources.items()},
        host_only=tuple(sorted(schema.host_only & set(collected.extra))),
    )


def _third_party_values(collected: Any, schema: Any) -> dict[str, Any]:
    """``Policy.extra``: the plugins' sections. An ``ANY`` section is merged generically
    into ``collected.extra``; one declared ``SCALAR`` or ``LIST`` (or a mapping of such
    keys) is merged as built-in sections are, so its value is read from there -- before,
    such a section was validated and then lost (``policy.extra`` lacked it)."""
    extra = dict(collected.extra)
    for name in sorted(schema.third_party):
        if name in extra:
            continue
        if name in collected.scalars:
            extra[name] = collected.scalars[name].value
        elif name in collected.lists:
            extra[name] = [item.value for item in collected.lists[name]]
        else:
            prefix = f"{name}."
            keyed = {
                k[len(prefix) :]: v.value
                for k, v in collected.scalars.items()
                if k.startswith(prefix)
            }
            keyed.update(
                (k[len(prefix) :], [i.value for i in v])
                for k, v in collected.lists.items()
                if k.startswith(prefix)
            )
            if keyed:
                extra[name] = keyed
    return extra


def _option_errors(collected: Collected, checker: OptionChecker) -> list[str]:
    """``FILE:LINE: providers: NAME: message`` for every problem in the options of an
    installed provider: each option is checked alone (its own line), then all together
    (what only their combination breaks, at the first option's line)."""
    errors: list[str] = []
    for name, opts in collected.providers.items():
        check = checker(name)
        if check is None or not opts:
            continue
        seen: set[str] = set()
        try:
            for key, item in opts.items():
                for message in check({key: item.value}):
                    seen.add(message)
                    errors.append(f"{item.loc}: providers: {name}: {message}")
            first = next(iter(opts.values()))
            for message in check({key: item.value for key, item in opts.items()}):
                if message not in seen:
                    errors.append(f"{first.loc}: providers: {name}: {message}")
        except Exception as exc:  # fail closed: a broken validator must not pass
            loc = next(iter(opts.values())).loc
            errors.append(f"{loc}: providers: {name}: option check failed: {exc!r}")
    return errors


def _provider_name(name: str) -> bool:
    """A provider name as entry points spell them (never empty: no silent default)."""
    return bool(name) and all(ch.isalnum() or ch in "-_." for ch in name)


def _missing(path: str) -> bool:
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def _learning(
    comp: _Compiler,
    item: Item | None,
    learn: bool | str | None,
    profile_path: str | None,
    cwd: str,
) -> tuple[bool, str | None]:
    """Decide whether this is a learning run, and into which file it writes."""
    default_path = profile_path or os.path.join(cwd, DEFAULT_PROFILE)
    if isinstance(learn, str):
        return True, comp.abspath(learn)
    if learn is not None:
        return bool(learn), default_path if learn else None
    if item is not None:
        value = _as_bool(item.value)
        if value is True:
            return True, default_path
        if value is False:
            return False, None
        text = str(item.value).strip()
        if not text:
            comp.err(item.loc, "learn: expected true, false or a file path")
            return False, None
        path = expand_user(text, comp.environ)
        return True, os.path.normpath(os.path.join(item.directory or cwd, path))
    return False, None


def _ordered(errors: list[str], files: list[ProfileFile]) -> list[str]:
    """Errors by file (reading order) then line; ``<cli>`` last; otherwise stable."""
    order = {pf.display: i for i, pf in enumerate(files)}

    def key(message: str) -> tuple[int, int]:
        head = message.split(": ", 1)[0]
        if head == CLI:
            return (len(order) + 1, 0)
        name, _, line = head.rpartition(":")
        if name in order and line.isdigit():
            return (order[name], int(line))
        return (len(order), 0)

    return sorted(errors, key=key)


def _dedupe(errors: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for e in errors:
        if e not in seen:
            seen.add(e)
            out.append(e)
    return out
