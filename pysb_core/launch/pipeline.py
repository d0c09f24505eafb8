"""One sandboxed run, from profile to exit status.

``Session.create`` loads the plugins and the profile into a frozen policy, loads the one
provider, pins DNS names and decides, fail closed, whether every rule is enforced by some
layer. ``Session.spawn`` builds the launch plan and starts the sandboxed interpreter;
``Session.finish`` collects what the sandbox reported and writes a learning run's profile.
Complete mode (``pysb run``) and partial mode (``sandboxes()``) both go through here.

Why one module: it is the one path every run takes, complete or partial mode: most of it is
:class:`Session`, whose create/spawn/finish share the loaded provider, the policy and the
decision of what each layer enforces. The stages around it (provider loading, drivers,
execution, stdio, the temporary directory) are already their own modules; what remains is the
order they are called in, which is best read in one place.
"""

from __future__ import annotations

import os
import sys
from _thread import allocate_lock  # `threading` (with functools, collections) only for a thread

from pysb_core._startup.records import Record, field, mutable_record
from pysb_core.check import PYTHON_ONLY_FAMILIES, CheckReport
from pysb_core.errors import ProfileError, SandboxError, UnenforceableRuleError
from pysb_core.launch.bootargv import BOOT_STUB, CORE_ROOT, boot_argv  # noqa: F401 - BOOT_STUB re-exported
from pysb_core.launch.plugins import Hooks, get_plugin_manager, plugin_failure
from pysb_core.linux.paths import is_within
from pysb_core.plan import LaunchPlan
from pysb_core.policy import AUTO, Exposure

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Mapping, Sequence
    from typing import IO, Any

    from pysb_core.check import RuleReport
    from pysb_core.events import Event
    from pysb_core.launch.autoprovider import AutoChoice
    from pysb_core.launch.execwatch.supervisor import Watch
    from pysb_core.launch.plugins import LoadedPlugin
    from pysb_core.policy import Policy
    from pysb_core.provider import Provider


def boot_paths() -> list[str]:
    """The import roots the sandboxed interpreter gets (the payload's ``sys_path``): pysb's
    own root first, then this interpreter's (:func:`pysb_core.launch.pyenv.import_roots`)."""
    from pysb_core.launch.pyenv import import_roots

    return [CORE_ROOT, *(p for p in import_roots() if p != CORE_ROOT)]


@mutable_record
class Program(Record):
    """What the sandboxed interpreter runs (one of CPython's ways, or a framework entry)."""

    mode: str  # "code" | "module" | "script" | "stdin" | "repl" | "entry"
    argv: list[str] = field(default_factory=list)
    code: str | None = None
    module: str | None = None
    path: str | None = None
    entry: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    banner: str = ""
    ipython: bool = False

    def payload(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_dict().items() if v is not None}


def _provider_id(provider: Provider | type[Provider]) -> tuple[str, str, str, str]:
    """``(name, module, distribution, version)``: who to name when the provider fails."""
    from pysb_core.launch.drivers import provider_distribution

    cls = provider if isinstance(provider, type) else type(provider)
    return (cls.name, cls.__module__, *provider_distribution(cls.name))


def _warn(stream: IO[str] | None, message: str) -> None:
    if stream is not None:
        stream.write(f"pysb: {message}\n")
        stream.flush()


def _memory_text(policy: Policy) -> str | None:
    """``512M (.pysb.yaml:7)``: how the child names the memory limit when it is hit."""
    from pysb_core.builtin.oslayer import limit_text

    if policy.limits.memory is None:
        return None
    value = limit_text("memory", policy.limits.memory)
    source = policy.limits.sources.get("memory")
    return f"{value} ({source})" if source else value


def _with_state_dirs(policy: Policy, environ: Mapping[str, str]) -> Policy:
    """Name pysb's state directories in the policy, so that no layer lets the sandbox write
    the caches the next run uses (:mod:`pysb_core.linux.statedir`) or the records of the
    profiles the user trusts (:mod:`pysb_core.profile.trust`)."""
    from pysb_core.linux.statedir import ensure, state_dir, trust_dir

    found = []
    for path in (state_dir(environ), trust_dir(environ)):
        real = ensure(path) if path else None
        if real and real not in found:
            found.append(real)
    return policy.replace(state_dirs=tuple(found)) if found else policy


def unenforced_messages(missing: Sequence[RuleReport], report: CheckReport) -> list[str]:
    """One line per rule no active layer enforces, then what the user can do about it;
    nothing when every rule is enforced (a provider's notes are then only notes)."""
    if not missing:
        return []
    layer = "Python guards off" if not report.python_guards else ""
    absent = sorted(
        {r.family for r in missing if r.family not in report.python_families} & PYTHON_ONLY_FAMILIES
    )
    if report.python_guards and absent:
        layer = f"no Python guard for {', '.join(absent)} is installed"
    where = f"provider '{report.provider}'" + (f", {layer}" if layer else "")
    lines = [
        f"{r.source}: '{r.rule}' is not enforced by any active layer ({where})" for r in missing
    ]
    if report.python_guards and absent:
        lines.append(
            "install the Python layer (pip install pysb-guards), or run without it knowingly "
            "(--no-python-guards, or python-guards: false in the profile): imports and api "
            "rules are then not enforced"
        )
    # The provider's own word on why (a note it made in pysb_check, named after it).
    lines += [n for n in report.notes if n.startswith(f"{report.provider}:")]
    if any(r.family not in PYTHON_ONLY_FAMILIES for r in missing):
        lines.append(
            "for files, network, env and limits rules: choose a provider that enforces them "
            "(pysb providers), keep the Python guards on, or remove the rule"
        )
    return lines


#: How a partial-mode caller starts a learning run (the CLI names its own command).
API_LEARN_HINT = "pass learn=True to sandboxes() (or pysb_core.run())"


def _with_host_services(policy: Policy, hooks: Hooks, relay: EventRelay) -> Policy:
    """The policy with a rule for each host-side service a plugin runs for the sandbox."""
    services = hooks.host_services(policy, relay.emit)
    if not services:
        return policy
    from pysb_core.policy.hostservice import service_rules

    withheld = {name for service in services for name in service.withhold_env}
    return policy.replace(
        network=(*policy.network, *service_rules(services)),
        env={k: v for k, v in policy.env.items() if k not in withheld},
        env_sources={k: v for k, v in policy.env_sources.items() if k not in withheld},
    )


def _without_service_traffic(records: list[Event], policy: Policy) -> list[Event]:
    """The learned accesses less the connections to a host service (its rule comes from
    the plugin every run, with another port: learning it would grant a stale port)."""
    from pysb_core.policy.hostservice import LOOPBACK, service_ports

    ports = service_ports(policy.network)
    if not ports:
        return records

    def to_service(event: Event) -> bool:
        data = event.data
        return (
            event.guard == "network"
            and data.get("kind") == "inet"
            and data.get("direction") == "out"
            and data.get("host") == LOOPBACK
            and data.get("port") in ports
        )

    return [event for event in records if not to_service(event)]


class EventRelay:
    """Events of host-side services, before and after the session exists.

    A service starts deciding as soon as the sandbox starts; its first events may come
    before :meth:`attach` (never in practice, but bounded all the same).
    """

    LIMIT = 1024

    def __init__(self) -> None:
        self._lock = allocate_lock()
        self._early: list[Event] = []
        self._deliver: Callable[[Event], None] | None = None

    def emit(self, event: Event) -> None:
        with self._lock:
            deliver = self._deliver
            if deliver is None:
                if len(self._early) < self.LIMIT:
                    self._early.append(event)
                return
        deliver(event)

    def attach(self, deliver: Callable[[Event], None]) -> None:
        with self._lock:
            self._deliver = deliver
            early, self._early = self._early, []
        for event in early:
            deliver(event)


def _learning_notice(policy: Policy, cwd: str) -> str:
    """What a learning run says before the program starts: it is not sandboxed."""
    from pysb_core.profile.loader import display_path

    target = display_path(policy.learn_path, cwd) if policy.learn_path else "the profile"
    asked = "the default 'auto'" if policy.provider == AUTO else f"'{policy.provider}'"
    swapped = (
        f" instead of {asked} (a learning run must see every access)"
        if policy.provider != "subprocess"
        else ""
    )
    return (
        "learning run: the program runs WITHOUT a sandbox (provider 'subprocess'"
        f"{swapped}); nothing is refused, every access is recorded into {target}"
    )


def renamed_by_mounts(policy: Policy) -> Policy:
    """``policy`` as the sandbox sees it when the provider mounts each renamed exposure
    (``SRC:DEST``) at its target: the exposure is ``DEST`` (renamed no more), and a
    profile file or state directory below ``SRC`` is named below ``DEST``."""
    renames = sorted(
        (
            (e.path.rstrip("/") or "/", e.target.rstrip("/") or "/")
            for e in policy.exposures
            if e.renamed
        ),
        key=lambda pair: -len(pair[0]),
    )
    if not renames:
        return policy

    def inside(path: str) -> str:
        for host, target in renames:
            if is_within(path, host):
                rest = path[len(host) :].lstrip("/")
                return target.rstrip("/") + "/" + rest if rest else target
        return path

    return policy.replace(
        exposures=tuple(e.replace(path=e.target) if e.renamed else e for e in policy.exposures),
        profile_files=tuple(inside(p) for p in policy.profile_files),
        state_dirs=tuple(inside(d) for d in policy.state_dirs),
    )


def _option_checker(name: str) -> Callable[[Mapping[str, Any]], list[str]] | None:
    """The options check of installed provider ``name`` (for the profile loader); None
    when it is not installed (its options are kept and ignored) or does not load (the
    run that uses it says why)."""
    from pysb_core.launch.drivers import load_provider_class, provider_names

    if name not in provider_names():
        return None
    try:
        return load_provider_class(name).validate_options
    except SandboxError:
        return None


def _check(
    policy: Policy, hooks: Hooks, provider: Provider, python_families: frozenset[str]
) -> CheckReport:
    """Who enforces each rule of ``policy`` under ``provider`` (every plugin's word)."""
    report = CheckReport(
        provider.name, python_guards=policy.python_guards, python_families=python_families
    )
    hooks.check(policy, provider, report)
    report.python_only_from(report.python_families)
    return report


def _choose_auto(policy: Policy, hooks: Hooks, python_families: frozenset[str]) -> AutoChoice:
    """The provider ``auto`` chooses (:mod:`pysb_core.launch.autoprovider`). Each candidate is
    judged as the run would judge it, by the same check, its own ``pysb_check`` included
    (a candidate is registered as a plugin only once chosen)."""
    from pysb_core.launch.autoprovider import choose

    def trial(candidate: Provider) -> CheckReport:
        report = _check(policy, hooks, candidate, python_families)
        own = getattr(candidate, "pysb_check", None)
        if own is not None:
            own(policy=policy, provider=candidate, report=report)
            report.python_only_from(report.python_families)
        return report

    return choose(policy.provider_options, trial)


class Session:
    """A loaded policy and provider, ready to start sandboxed interpreters."""

    def __init__(
        self,
        policy: Policy,
        provider: Provider,
        hooks: Hooks,
        plugins: list[LoadedPlugin],
        report: CheckReport,
        *,
        environ: Mapping[str, str],
        stderr: IO[str] | None,
        verbose: bool = False,
    ) -> None:
        self.policy = policy
        self.provider = provider
        self.hooks = hooks
        self.plugins = plugins
        self.report = report
        self.environ = dict(environ)
        self.stderr = stderr
        self.verbose = verbose
        self.learned: list[Event] = []
        #: Whether the profile was found rather than named (it then needs the user's trust).
        self.discovered = False
        #: The single-value places of the plugins' profile sections (learned as scalars).
        self.scalars: frozenset[str] = frozenset()
        #: How ``auto`` chose the provider (None when the provider was named).
        self.auto_choice: AutoChoice | None = None
        #: Every sandbox started and not yet released: host PID -> (plan, report reader).
        self._by_pid: dict[int, tuple[LaunchPlan, threading.Thread | None, Watch | None]] = {}
        self._spawned = False
        self._lock = allocate_lock()
        self._finished = False

    # -- creation -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        *,
        profile: str | None = None,
        provider: str | None = None,
        cli: Any = None,
        python_guards: bool | None = None,
        learn: bool | str | None = None,
        events: str | None = None,
        cwd: str | None = None,
        environ: Mapping[str, str] | None = None,
        script: str | None = None,
        module: str | None = None,
        stderr: IO[str] | None = sys.stderr,
        verbose: bool = False,
        extra_plugins: Sequence[Any] = (),
        enforce: bool = True,
        discovered: bool = False,
    ) -> Session:
        """Load everything a run needs; raise a SandboxError subclass (exit 125) if not sound.

        With no profile to enforce (none found, or the named one does not exist) the run is
        refused unless ``learn`` asks for a learning run: a ``ProfileNotFoundError`` that
        says how to start one from the API (the CLI rewords it with ``with_hint``).

        ``discovered``: ``profile`` was found by looking (partial mode's package profile),
        not named by the user; like a profile this function discovers itself, it is used
        only when trusted (:mod:`pysb_core.profile.trust`). ``enforce=False`` (``pysb check``)
        skips that refusal and the one of unenforced rules: they are reported instead.
        """
        from pysb_core.launch.drivers import load_provider, load_provider_class
        from pysb_core.profile import choose_profile, load_policy
        from pysb_core.profile.discovery import DISCOVERED
        from pysb_core.profile.schema import ProfileSchema

        environ = dict(os.environ if environ is None else environ)
        cwd = os.path.realpath(cwd or os.getcwd())
        pm, plugins = get_plugin_manager(extra_plugins=extra_plugins, light=True)
        provider_id: list[tuple[str, str, str, str]] = []
        try:
            hooks = Hooks(pm)
            # A family counts when its guard has something to arm inside the sandbox (what
            # it is named proves nothing); the child then says what it armed (bootstrap).
            guard_families = frozenset(hooks.guard_children())
            ahead = sys.modules.get("pysb_core.launch.prestart")
            if ahead is not None and ahead.waiting():
                # The interpreter started ahead imports the guards while the profile is read.
                on = python_guards is not False  # else the profile may yet say no: a mismatch
                ahead.hint(hooks.child_modules() if on else [], boot_paths())  # as the payload
            if events:
                from pysb_core.builtin.events import JsonlEventSink

                hooks.register(JsonlEventSink(events), name="pysb-events-file")

            schema = ProfileSchema()
            hooks.add_profile_keys(schema)
            choice = choose_profile(profile, script=script, module=module, cwd=cwd, environ=environ)
            choice.require(learning=bool(learn), learn_hint=API_LEARN_HINT, cwd=cwd)
            if provider is None:
                provider = environ.get("PYSB_PROVIDER") or None
            policy = load_policy(
                choice.path,
                cwd=cwd,
                environ=environ,
                cli=cli,
                provider=provider,
                python_guards=python_guards,
                learn=learn,
                schema=schema,
                option_checker=_option_checker,
            )
            discovered = discovered or choice.origin == DISCOVERED
            if discovered and enforce:  # found, not named: used only as the user trusted it
                from pysb_core.profile.trust import require_trusted_policy

                require_trusted_policy(policy, environ)
            if policy.learn:
                if policy.provider != AUTO:
                    load_provider_class(policy.provider)  # an unknown one is refused here too
                _warn(stderr, _learning_notice(policy, cwd))
                policy = policy.replace(provider="subprocess")
            # Without the Python layer its rules (imports, api) have no enforcer: the check
            # below refuses a rule the user wrote unless they opted out; their defaults
            # (deny every import and sensitive call) are not rules (SPEC 2), only warned of.
            if not guard_families:
                _warn(
                    stderr,
                    "warning: the Python layer (pysb-guards) is not installed: only the OS "
                    "provider enforces this run (pip install pysb-guards)",
                )

            python_families = guard_families if policy.python_guards else frozenset()
            relay = EventRelay()

            def prepared(policy: Policy) -> Policy:
                """With the host services' rules, the pinned names and the state dirs."""
                policy = _with_host_services(policy, hooks, relay)
                return _with_state_dirs(cls._pin(policy, hooks, stderr), environ)

            auto_choice = None
            if policy.provider == AUTO:  # chosen by the rules, the services' included
                policy = prepared(policy)
                auto_choice = _choose_auto(policy, hooks, python_families)
                prov = auto_choice.provider
                policy = policy.replace(provider=prov.name)
                provider_id.append(_provider_id(prov))
            else:
                # Provider options were validated by the provider with the profile.
                options = policy.provider_options.get(policy.provider) or {}
                provider_cls = load_provider_class(policy.provider)
                provider_id.append(_provider_id(provider_cls))
                if not options:
                    # The loader checks only options a profile gives: a check that fails
                    # on none is a broken provider, refused here (fail closed, its name).
                    problems = provider_cls.validate_options({})
                    if problems:
                        raise ProfileError([f"providers: {policy.provider}: {p}" for p in problems])
                prov = load_provider(policy.provider, options)
            hooks.register(prov, name=f"provider:{prov.name}")
            if ahead is not None:
                ahead.chosen(prov.name)  # another provider's command: ended now

            if auto_choice is None:
                policy = prepared(policy)
            hooks.configure(policy)
            report = _check(policy, hooks, prov, python_families)
            if auto_choice is not None:
                report.note(auto_choice.why())
            missing = report.unenforced()
            if missing and not policy.learn and enforce:
                raise UnenforceableRuleError(unenforced_messages(missing, report))
            if not guard_families:
                policy = policy.replace(python_guards=False)  # nothing to install in the child
            session = cls(
                policy,
                prov,
                hooks,
                plugins,
                report,
                environ=environ,
                stderr=stderr,
                verbose=verbose,
            )
            session.discovered = discovered
            session.scalars = schema.scalar_paths()
            relay.attach(session.deliver)
            session.auto_choice = auto_choice
            if verbose:
                if auto_choice is not None:
                    _warn(stderr, auto_choice.why())
                _warn(
                    stderr,
                    f"provider {prov.name}; profile {policy.profile_path or '(none)'}; "
                    f"python guards {', '.join(sorted(report.python_families)) or 'off'}"
                    + ("; learning" if policy.learn else ""),
                )
            return session
        except SandboxError:
            raise
        except Exception as exc:  # a plugin's or provider's own bug: one paragraph, 125
            raise plugin_failure(exc, plugins, *provider_id) from exc

    @staticmethod
    def _pin(policy: Policy, hooks: Hooks, stderr: IO[str] | None) -> Policy:
        """Resolve the host names of network rules once, on the host, and pin them."""
        names = sorted({r.network for r in policy.network if r.is_host})
        if not names:
            return policy
        from pysb_core.policy.netrules import pin_hosts

        resolved = hooks.dns_resolve(names)
        pins, warnings, errors = pin_hosts(policy.network, resolved)
        for w in warnings:
            _warn(stderr, f"warning: {w}")
        if errors:
            raise ProfileError(errors)
        return policy.replace(pins=pins)

    # -- one sandboxed interpreter ----------------------------------------------------

    def plan(
        self,
        program: Program,
        *,
        python_opts: Sequence[str] = (),
        pass_fds: Sequence[int] = (),
        interactive: bool = False,
        terminal: bool = False,
        popen_kwargs: Mapping[str, Any] | None = None,
    ) -> LaunchPlan:
        """Build the launch plan for ``program`` (guards contribute, pins are announced)."""
        from pysb_core.launch.pyenv import implicit_exposures
        from pysb_core.profile.compile import verify_exposures

        policy = self.policy
        verify_exposures(policy.exposures)  # no link swapped in since the profile was read
        python = sys.executable
        payload_fd = os.memfd_create("pysb-payload", 0)
        report_r = report_w = None
        if policy.learn or self.hooks.implementers("pysb_event"):
            report_r, report_w = os.pipe()
        argv = boot_argv(python_opts, payload_fd)
        env = dict(policy.env)
        if policy.learn:
            # A learning run sees the host environment, so that reads can be recorded.
            env = {**self.environ, **env}
        exposures = [*implicit_exposures(python), *policy.exposures]
        if program.mode == "script" and program.path:
            script = os.path.realpath(program.path)
            if os.path.isfile(script):
                exposures.append(Exposure(script, script, False, "<program>", True))
        from pysb_core.launch.tmpdir import make_private_tmp, pts_exposures, shm_exposures

        tmp = make_private_tmp(self.provider, self.environ, policy.exposures)
        env["TMPDIR"] = tmp.inside
        if tmp.provider_sees_it:
            exposures.append(tmp.exposure)
        # The guard allows the temporary directory in both shapes (pysb_core.launch.tmpdir).
        child_exposures = exposures if tmp.provider_sees_it else [*exposures, tmp.exposure]
        exposures, shm = shm_exposures(self.provider, exposures)
        if shm is not None:
            child_exposures = [*child_exposures, shm]
        exposures, pts = pts_exposures(self.provider, exposures)
        if pts is not None:
            child_exposures = [*child_exposures, pts]
        plan = LaunchPlan(
            policy=policy,
            python=python,
            argv=argv,
            env=env,
            cwd=policy.cwd,
            exposures=exposures,
            protected=[*policy.profile_files, *policy.state_dirs],
            pass_fds=[payload_fd, *([report_w] if report_w is not None else []), *pass_fds],
            interactive=interactive,
            terminal=terminal,
            popen_kwargs=dict(popen_kwargs or {}),
        )
        plan.add_cleanup(tmp.cleanup())
        # What the provider's own tmpfs sizes do not bound, pysb's parent watches
        # (pysb_core.launch.tmpwatch): a host directory, or the provider's unsized mounts.
        plan.tmp_watch = [tmp.host_dir] if tmp.host_dir is not None else []
        if getattr(self.provider, "tmp_unbounded", False):
            own = [tmp.inside] if tmp.host_dir is None else []
            plan.tmp_watch_inside = own + ([shm.target] if shm is not None else [])
        tmp_channel = None
        if plan.tmp_watch_inside:
            import _socket  # the C module: socket.py (enum, selectors) stays off the start path

            # The bootstrap hands the parent descriptors of these directories here.
            ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
            tmp_channel = {"fd": theirs.detach(), "dirs": plan.tmp_watch_inside}
            plan.tmp_watch_channel = (ours.detach(), tmp_channel["fd"])
            plan.pass_fds.append(tmp_channel["fd"])
        plan.payload_fd = payload_fd
        child_policy = policy.for_sandbox().replace(exposures=tuple(child_exposures))
        from pysb_core.provider import Capability

        if Capability.RENAME in self.provider.enforced():
            # The provider's mounts do the renaming: the guards judge the paths as the
            # program sees them and translate nothing (each layer translates what it owns).
            child_policy = renamed_by_mounts(child_policy)
        plan.payload = {
            # The child's policy names every exposure, implicit ones included.
            "policy": child_policy.to_dict(),
            "program": program.payload(),
            "guards": self.hooks.child_modules() if policy.python_guards else [],
            **self._armed_contract(),
            "report_fd": report_w,
            "sys_path": boot_paths(),
            "memory_text": _memory_text(policy),
            "tmp_watch": tmp_channel,
        }
        from pysb_core.plan import ChildSetup

        if Capability.FILES in self.provider.enforced():
            # A confining provider must not leave the caller's keys readable (keyctl).
            plan.add_child_setup(ChildSetup("pysb_core.child.keyring", "leave_session_keyring", {}))
        if policy.ignore and Capability.IGNORE in self.provider.enforced():
            from pysb_core.launch.hidden import hidden_paths

            plan.hidden = hidden_paths(plan.exposures, policy.ignore)
        if policy.pins:
            # plan.hosts_file is a *path* (bwrap binds it, qemu copies it into the guest).
            import tempfile

            from pysb_core.linux.sysfiles import hosts_file_text

            fd, hosts_path = tempfile.mkstemp(prefix="pysb-hosts-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(hosts_file_text(policy.pins))
            os.chmod(hosts_path, 0o444)
            plan.hosts_file = hosts_path

            def remove_hosts_file(path: str = hosts_path) -> None:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass

            plan.add_cleanup(remove_hosts_file)
        try:
            self.hooks.contribute(policy, plan)
        except SandboxError:
            raise
        except Exception as exc:
            self._close_plan_fds(plan, parent_ends_only=False)
            self._cleanup(plan)
            raise self._failure(exc, "while preparing the launch") from exc
        plan.report_read_fd, plan.report_write_fd = report_r, report_w
        return plan

    def _armed_contract(self) -> dict[str, Any]:
        """What the child must arm before the program runs (``pysb_core.child.bootstrap``).

        ``guard_owners``: guard module -> ``family (distribution version)``, to name who
        armed what; ``needed_families``: every family some rule relies on the Python layer
        for. The child refuses to run the program (125) when one of them was not armed, or
        was armed by two modules.
        """
        if not self.policy.python_guards:
            return {}
        owners = {
            p.name: f"{p.distribution} {p.version}".strip()
            for p in self.plugins
            if p.kind == "guard"
        }
        children = self.hooks.guard_children()
        needed = sorted({r.family for r in self.report.rules if "python" in r.layers})
        return {
            "guard_owners": {
                module: f"{family} ({owners.get(family, '?')})"
                for family, module in children.items()
            },
            "needed_families": {f: owners.get(f, "?") for f in needed},
            "report_armed": self.verbose,
        }

    def _failure(self, exc: Exception, doing: str) -> SandboxError:
        """An exception of plugin or provider code, as one paragraph naming who raised it."""
        return plugin_failure(exc, self.plugins, _provider_id(self.provider), doing=doing)

    def spawn(self, program: Program, **kwargs: Any) -> Any:
        """Start the sandboxed interpreter for ``program``; return the host process."""
        popen_kwargs = {
            k: kwargs.pop(k)
            for k in list(kwargs)
            if k in ("stdin", "stdout", "stderr", "process_group", "preexec_fn")
        }
        plan = self.plan(program, popen_kwargs=popen_kwargs, **kwargs)
        watch = self._watch(plan)
        try:
            proc = self.hooks.launch(plan, self.provider)
        except BaseException as exc:
            if watch is not None:
                watch.close()
            self._close_plan_fds(plan, parent_ends_only=False)
            self._cleanup(plan)
            if isinstance(exc, Exception) and not isinstance(exc, (SandboxError, OSError)):
                raise self._failure(exc, "to launch the sandbox") from exc
            raise
        self._close_plan_fds(plan, parent_ends_only=True)
        if watch is not None:
            watch.launched()
            watch.start()
        report_r = plan.report_read_fd
        reader = None
        if report_r is not None:
            import threading

            reader = threading.Thread(
                target=self._read_reports, args=(report_r,), name="pysb-report", daemon=True
            )
            reader.start()
        if plan.tmp_watch or plan.tmp_watch_inside:
            from pysb_core.launch.tmpwatch import TmpWatch

            limits = plan.policy.limits
            source = limits.sources.get("tmp", "the default, docs/profile.md")
            proc.pysb_tmp_watch = TmpWatch(
                plan.tmp_watch,
                limits.tmp_bytes(),
                source,
                inside=plan.tmp_watch_inside,
                channel=plan.tmp_watch_channel[0] if plan.tmp_watch_channel else None,
            )
            plan.add_cleanup(proc.pysb_tmp_watch.close)
        with self._lock:
            self._spawned = True
            self._by_pid[proc.pid] = (plan, reader, watch)
        return proc

    def _watch(self, plan: LaunchPlan) -> Watch | None:
        """A learning run watches the programs the sandbox executes (pysb_core.launch.execwatch)."""
        if not self.policy.learn:
            return None
        from pysb_core.launch.execwatch.supervisor import prepare

        watch = prepare(plan)
        if watch is None:
            _warn(
                self.stderr,
                f"learning run: no system-call table for {os.uname().machine}: what the "
                "programs the program executes read, write or connect to is not learned",
            )
        return watch

    def release(self, proc: Any) -> None:
        """Run the clean-ups of one sandbox that has exited (a restarted partial-mode worker),
        so that a long-lived session does not accumulate them until ``finish``."""
        with self._lock:
            entry = self._by_pid.pop(proc.pid, None)
        if entry is not None:
            self._wind_up(*entry)

    def _wind_up(
        self, plan: LaunchPlan, reader: threading.Thread | None, watch: Watch | None
    ) -> None:
        """Read the sandbox's last reports (and what its watch learned), then run its
        clean-ups."""
        if reader is not None:
            reader.join(timeout=5)
        if watch is not None:
            for event in watch.events(timeout=5):
                self.deliver(event)
            for message in watch.notes:
                _warn(self.stderr, message)
        self._cleanup(plan)

    @staticmethod
    def _close_plan_fds(plan: LaunchPlan, *, parent_ends_only: bool) -> None:
        channel = plan.tmp_watch_channel
        fds = [plan.payload_fd, plan.report_write_fd, channel[1] if channel else None]
        if not parent_ends_only:
            fds.append(plan.report_read_fd)
            fds.append(channel[0] if channel else None)
            plan.tmp_watch_channel = None
        elif channel:
            plan.tmp_watch_channel = (channel[0], -1)
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        plan.payload_fd = None

    def _read_reports(self, fd: int) -> None:
        from pysb_core.launch.execute import quiet_thread

        quiet_thread()  # signals sent to pysb are the main thread's to forward
        from pysb_core.events import Event, ReportLimits, report_lines

        # Bounded: the program can write anything into the channel (pysb_core.events).
        limits = ReportLimits()
        try:
            for line in report_lines(fd, limits):
                try:
                    event = Event.from_json(line)
                except (ValueError, TypeError, RecursionError):
                    limits.malformed += 1  # the program wrote into an fd it found
                    continue
                self.deliver(event.replace(layer="python"))
        finally:
            os.close(fd)
            for message in limits.messages():
                _warn(self.stderr, message)

    def deliver(self, event: Event) -> None:
        """Hand one event to the sinks, and keep it when a learning run records it."""
        try:
            self.hooks.event(event)
        except Exception as exc:  # a broken sink must not break the run
            _warn(self.stderr, f"event sink failed: {type(exc).__name__}: {exc}")
        if event.action == "learn":
            with self._lock:
                self.learned.append(event)

    def _cleanup(self, plan: LaunchPlan) -> None:
        for fn in reversed(plan.cleanups):
            try:
                fn()
            except Exception as exc:  # keep cleaning the rest
                _warn(self.stderr, f"cleanup failed: {type(exc).__name__}: {exc}")
        plan.cleanups.clear()

    # -- the end --------------------------------------------------------------------

    def _trust_written(self, path: str, data: bytes) -> None:
        """A learning run trusts the profile it writes (the user asked for the run)."""
        from pysb_core.profile.trust import trust_written

        trust_written(path, data, cwd=self.policy.cwd, environ=self.environ)

    def finish(self, returncode: int | None = None) -> str | None:
        """Collect reports, run cleanups, and write a learning run's profile.

        Returns the learning summary (also printed on stderr), or None.
        """
        with self._lock:
            if self._finished:
                return None
            self._finished = True
            remaining = list(self._by_pid.values())
            self._by_pid.clear()
        for entry in remaining:
            self._wind_up(*entry)
        if not self.policy.learn:
            return None
        from pysb_core.profile.learning import LearnedProfile
        from pysb_core.profile.writer import merge_learned

        if returncode == 125 or not self._spawned:  # ExitCode.SETUP_FAILED (no enum at start)
            # The program never ran: writing an empty profile would turn the next run into
            # an enforcing one that refuses what was never learned.
            _warn(self.stderr, "the program did not start: no profile written")
            return None
        profile = LearnedProfile(cwd=self.policy.cwd, environ=self.environ, scalars=self.scalars)
        failures = self.hooks.learned(_without_service_traffic(self.learned, self.policy), profile)
        path = self.policy.learn_path or os.path.join(self.policy.cwd, ".pysb.yaml")
        # The others' rules are written; a plugin that failed is then said, and the run
        # fails (exit 125 for pysb run): its family's accesses were not learned.
        summary = merge_learned(path, profile, on_write=self._trust_written)
        _warn(self.stderr, summary)
        if failures:
            exc = failures[0][1]
            error = self._failure(exc, "while writing its learned rules")
            lost = ", ".join(n for n, _ in failures)
            raise type(error)(
                f"{error}\n  the rules of {lost} were not learned (the other plugins' were "
                f"written to {os.path.basename(path)})"
            ) from exc
        return summary
