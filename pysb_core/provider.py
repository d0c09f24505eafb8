"""The provider contract: one named class per OS sandbox, loaded by stevedore.

A provider turns a :class:`~pysb_core.plan.LaunchPlan` into a kernel-enforced launch. A
third party ships one by declaring an entry point in the ``pysb.providers`` group whose
name equals the class's ``name``::

    # pyproject.toml of pysb-nsjail
    [project.entry-points."pysb.providers"]
    nsjail = "pysb_nsjail:NsjailProvider"

    # pysb_nsjail/__init__.py
    import shutil
    from pysb_core import Capability, LaunchSpec, Provider, ProviderStatus

    class NsjailProvider(Provider):
        name = "nsjail"
        description = "Google's nsjail"
        capabilities = frozenset({Capability.FILES, Capability.FILES_WRITE, Capability.ENV,
                                  Capability.LIMITS})
        install_hint = "apt-get install nsjail"

        def probe(self) -> ProviderStatus:
            if shutil.which("nsjail") is None:
                return ProviderStatus.missing("nsjail is not installed", fix=self.install_hint)
            return ProviderStatus.ok()

        def prepare(self, plan):
            argv = ["nsjail", "-Mo", "--cwd", plan.cwd]
            for e in plan.exposures:
                argv += ["--bindmount" if e.writable else "--bindmount_ro",
                         f"{e.path}:{e.target}"]
            return LaunchSpec(argv=[*argv, "--", *plan.argv], env=plan.env, cwd=plan.cwd,
                              pass_fds=plan.pass_fds)

Nothing in pysb-core names the built-in providers: they are found the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from pysb_core._startup.records import Record, field, record

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping, Sequence
    from typing import Any, ClassVar

    from pysb_core.errors import SandboxError
    from pysb_core.linux.pidlimit import PidsCgroup
    from pysb_core.plan import LaunchPlan, LaunchSpec, PreExecStep

if TYPE_CHECKING:
    from enum import StrEnum as _StrEnum
else:  # the light stand-in: `enum` (~2 ms with what it imports) stays off `pysb run`
    from pysb_core._startup.strenum import StrEnum as _StrEnum


class Capability(_StrEnum):
    """What a provider can enforce at the OS level (shown by ``pysb providers``).

    A ``StrEnum`` (type checkers see ``enum.StrEnum``; at run time the start path's light
    stand-in, :mod:`pysb_core._startup.strenum`, with the same behaviour)."""

    #: Reads are confined to the exposures.
    FILES = "files"
    #: Writes are confined to the read-write exposures.
    FILES_WRITE = "files-write"
    #: ``ignore`` globs hide paths below an exposure.
    IGNORE = "ignore"
    #: ``SRC:DEST`` exposes a directory under another name.
    RENAME = "rename"
    #: TCP filtered by port.
    TCP_PORT = "tcp-port"
    #: TCP filtered by address (and so by pinned host name).
    TCP_HOST = "tcp-host"
    #: UDP filtered by port.
    UDP_PORT = "udp-port"
    #: UDP filtered by address.
    UDP_HOST = "udp-host"
    #: The environment is exactly the whitelist (every provider that starts a fresh process).
    ENV = "env"
    #: Resource limits (rlimits; cgroups where delegated).
    LIMITS = "limits"


@record
class ProviderStatus(Record):
    """Whether a provider can run on this machine, and if not, why and how to fix it."""

    available: bool
    reason: str | None = None
    fix: str | None = None
    version: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def ok(cls, version: str | None = None, **details: Any) -> ProviderStatus:
        return cls(True, None, None, version, dict(details))

    @classmethod
    def missing(cls, reason: str, *, fix: str | None = None) -> ProviderStatus:
        return cls(False, reason, fix)


def unknown_option(key: object, known: Sequence[str]) -> str:
    """The message for an option a provider does not know, with a "did you mean" hint."""
    import difflib

    hint = difflib.get_close_matches(str(key), known, n=1)
    if hint:
        return f"unknown option '{key}' (did you mean '{hint[0]}'?)"
    return f"unknown option '{key}' (known: {', '.join(known) or 'none'})"


class Provider(ABC):
    """Base class of every OS sandbox provider (see the module docstring for an example).

    Subclasses set ``name`` (equal to the entry-point name), ``description``,
    ``capabilities`` and ``install_hint``, and implement :meth:`probe` and :meth:`prepare`.
    Providers that are not a wrapper command (a VM) override :meth:`launch` instead.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    install_hint: ClassVar[str | None] = None
    #: Processes of the provider itself inside the sandbox's process count (a wrapper and
    #: its init); ``limits: processes`` for a root pysb is enforced with a pids cgroup of
    #: ``processes + own_processes`` (:meth:`pids_cgroup`).
    own_processes: ClassVar[int] = 0
    #: True when the base :meth:`launch` must not put the host process into the pids
    #: cgroup: the provider has it joined otherwise (from inside, after its own set-up:
    #: :meth:`pids_cgroup`), or enforces the limit another way (a cgroup in a VM).
    manages_process_limit: ClassVar[bool] = False
    #: Where the provider mounts a fresh, empty, writable tmpfs of its own (``"/tmp"``
    #: under a mount namespace), given to the program as ``TMPDIR``; None: pysb makes a
    #: private host directory and the provider exposes it like any exposure
    #: (:mod:`pysb_core.launch.tmpdir`).
    private_tmp: ClassVar[str | None] = None
    #: Where the provider mounts a private, writable tmpfs for POSIX shared memory and
    #: semaphores (``"/dev/shm"``), bounded like ``private_tmp`` (``limits: tmp``). An
    #: exposure of the host's ``/dev/shm`` at itself then means this one (one profile
    #: for multiprocessing on every provider: landlock needs the rule, and grants the
    #: host's); None: the provider gives none of its own.
    private_shm: ClassVar[str | None] = None
    #: Where the provider mounts a devpts instance of its own (``"/dev/pts"``): the
    #: sandbox's pseudo-terminals, none of the host's. The Python layer then lets the
    #: program open them by name (``os.ptsname``; ``os.openpty`` needs no rule), and an
    #: exposure of the host's ``/dev/pts`` at itself means this one (one profile on every
    #: provider: landlock and subprocess need the rule, on the host's). None: no such mount.
    private_pts: ClassVar[str | None] = None
    #: The provider's ``private_tmp`` / ``private_shm`` are tmpfs mounts it cannot give a
    #: size (firejail): pysb's parent watches them against ``limits: tmp`` through
    #: descriptors its bootstrap sends out (:mod:`pysb_core.launch.tmpwatch`; not a boundary).
    tmp_unbounded: ClassVar[bool] = False
    #: The sandboxed interpreter is a local process that holds the very fds it inherits
    #: (``plan.pass_fds``): partial mode then talks to its workers over two pipes, ~6 µs
    #: cheaper per call than the socketpair (:mod:`pysb_core.remote.transport`). False
    #: (the default): one bidirectional Unix socket, for a provider that relays each fd as
    #: a port of its own (a VM).
    partial_pipes: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = dict(options or {})

    # -- configuration --------------------------------------------------------------

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> list[str]:
        """Return one message per problem in ``providers: {<name>: {...}}`` (the caller
        prefixes the section). The default accepts only an empty mapping; override to
        accept keys, and report the others with :func:`unknown_option`."""
        return [unknown_option(key, ()) for key in options]

    # -- discovery ------------------------------------------------------------------

    @abstractmethod
    def probe(self) -> ProviderStatus:
        """Say whether this provider can run here (binary present, kernel feature enabled)."""

    def enforced(self) -> frozenset[Capability]:
        """What this provider enforces on *this* machine (may be less than ``capabilities``,
        e.g. landlock on an older ABI)."""
        return self.capabilities

    def describe(self, plan: LaunchPlan) -> list[str]:
        """Extra lines for ``pysb check`` (a generated ruleset, a mount table...)."""
        return []

    def preflight(self, plan: LaunchPlan) -> None:
        """Do what :meth:`launch` will do with ``plan``, short of starting anything the
        program could run in, and raise :class:`~pysb_core.errors.SandboxError` with what
        would fail: ``pysb check`` calls it, so that what depends only on the profile, the
        provider and this machine fails there, with the rule's ``FILE:LINE``, and not at
        launch (since kit 1.3).

        Build what :meth:`prepare` builds (a mount plan, an argument list) and have the
        kernel's own checker judge what is loaded into it (the namespace providers load
        their packet filter into a throwaway namespace). Must leave nothing behind and
        start nothing that outlives the call. The default does nothing.
        """
        return None

    # -- launch ---------------------------------------------------------------------

    @abstractmethod
    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        """Compile the plan into this provider's own command line / rulesets."""

    def pids_cgroup(self, plan: LaunchPlan) -> PidsCgroup | None:
        """The pids cgroup that enforces ``limits: processes`` for a root pysb, or ``None``.

        The one place pysb makes one (:mod:`pysb_core.linux.pidlimit`): sized ``processes +
        own_processes``, removed with the plan's cleanups; ``None`` when the limit is unset
        or ``RLIMIT_NPROC`` does the job (pysb is not root). Raises :class:`SandboxError`
        when the limit is needed and cannot be enforced. The base :meth:`launch` calls it
        and joins the cgroup first thing after ``fork``; a provider that sets
        ``manages_process_limit`` calls it itself and has the program join it
        (:attr:`~pysb_core.linux.pidlimit.PidsCgroup.procs`).
        """
        processes = plan.policy.limits.processes
        if processes is None:
            return None
        from pysb_core.linux import pidlimit  # (only a run with a process limit needs it)

        if not pidlimit.needed(processes):
            return None
        cgroup = pidlimit.PidsCgroup.create(processes + self.own_processes)
        plan.add_cleanup(cgroup.remove)
        return cgroup

    def launch(self, plan: LaunchPlan, **popen_kwargs: Any) -> subprocess.Popen[bytes]:
        """Start the sandbox and return the host process to wait for.

        Between ``fork`` and ``exec`` the host process runs, in order: joining the pids
        cgroup (:meth:`pids_cgroup`), the plan's ``pre_exec`` steps, and the caller's own
        ``preexec_fn``; a step that fails stops the launch with a :class:`SandboxError`
        naming the steps. The caller runs ``spec.cleanups`` (kept on ``plan.cleanups``)
        after it exits.
        """
        from pysb_core.plan import PreExecStep

        spec = self.prepare(plan)
        plan.cleanups.extend(spec.cleanups)
        plan.seal()
        cgroup = None if self.manages_process_limit else self.pids_cgroup(plan)
        first = [PreExecStep("joining the pids cgroup", cgroup.join_self)] if cgroup else []
        steps = set_pre_exec(popen_kwargs, plan, first=first)
        # Popen's way, without importing subprocess on the start path (pysb_core.linux.spawn);
        # a provider whose on_started hooks want a Popen (a subclass of its own) gets a real
        # one unless it says they take the light process too (spec.light).
        from pysb_core.linux.spawn import start

        # An interpreter `pysb run` started ahead, started exactly as this one would be
        # (pysb_core.launch.prestart compares all of it), takes the payload instead.
        stand_in = STAND_IN[0] if STAND_IN else None
        proc: subprocess.Popen[bytes] | None = None
        if stand_in is not None:
            proc = stand_in.claim(plan, spec, popen_kwargs, steps)
        try:
            if proc is None:
                proc = start(  # or a light Process, its equal here
                    spec.argv,
                    light=spec.light or not spec.on_started,
                    env=spec.env,
                    cwd=spec.cwd,
                    pass_fds=tuple(spec.pass_fds),
                    **popen_kwargs,
                )
                if stand_in is not None:
                    stand_in.remember(plan, spec, popen_kwargs, steps)
        except OSError:
            raise
        except Exception as exc:
            import subprocess

            if not steps or not isinstance(exc, subprocess.SubprocessError):
                raise
            # a step failed in the child: nothing ran
            raise pre_exec_failed(self.name, steps, exc) from exc
        try:
            for started in spec.on_started:
                started(proc)
        except BaseException:
            # Fail closed: a sandbox whose set-up did not complete never runs the program.
            proc.kill()
            proc.wait()
            raise
        return proc


#: What may stand in for the process the base :meth:`Provider.launch` starts: set by the
#: ``pysb run`` process alone (:mod:`pysb_core.launch.prestart`, an interpreter started
#: ahead); its ``claim(plan, spec, popen_kwargs, steps)`` returns the process or None, its
#: ``remember(...)`` hears of each launch that started a fresh one.
STAND_IN: list[Any] = []


def set_pre_exec(
    popen_kwargs: dict[str, Any], plan: LaunchPlan, *, first: Sequence[PreExecStep] = ()
) -> list[PreExecStep]:
    """Make ``popen_kwargs["preexec_fn"]`` run ``first``, the plan's ``pre_exec`` steps and
    the caller's own ``preexec_fn`` (if any), in that order; return the steps.

    The base :meth:`Provider.launch` uses it; a provider that starts its host process
    itself calls it before its ``Popen``.
    """
    from pysb_core.plan import PreExecStep

    steps = [*first, *plan.pre_exec]
    caller = popen_kwargs.pop("preexec_fn", None)
    if caller is not None:
        steps.append(PreExecStep("the caller's preexec_fn", caller))
    if steps:
        functions = tuple(step.run for step in steps)

        def pre_exec() -> None:
            for run in functions:
                run()

        popen_kwargs["preexec_fn"] = pre_exec
    return steps


def pre_exec_failed(
    provider: str, steps: Sequence[PreExecStep], exc: BaseException
) -> SandboxError:
    """The error for a launch whose pre-exec steps failed (the child cannot say which)."""
    from pysb_core.errors import SandboxError

    what = ", ".join(step.what for step in steps)
    return SandboxError(f"{provider}: the set-up before {provider} starts failed ({what}): {exc}")
