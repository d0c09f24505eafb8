"""The launch plan: what the provider must start, and with which view of the system.

The pipeline fills a :class:`LaunchPlan` from the policy; guards add to it through the
``pysb_contribute`` hook (a typed collector, not ad-hoc return values); the provider turns
it into a :class:`LaunchSpec` (its own argv, mounts, rulesets) and starts it.
"""

from __future__ import annotations

import os

from pysb_core._startup.records import Record, field, mutable_record, record

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from typing import Any

    from pysb_core.policy import Exposure, Policy


@record
class ChildSetup(Record):
    """A function the sandboxed interpreter calls after the guards are installed and before
    the program starts: ``module.function(**args)``. Landlock restricts the process here."""

    module: str
    function: str
    args: dict[str, Any] = field(default_factory=dict)


@record
class PreExecStep(Record):
    """A step the provider's host process runs between ``fork`` and ``exec``.

    The steps of a launch (``LaunchPlan.pre_exec``) run in order in the forked child, which
    must do nothing but system calls (no locks, no imports, no threads: ``preexec_fn``'s
    rules). ``what`` names the step in the error when one fails (the run does not start).
    """

    what: str
    run: Callable[[], None]


@mutable_record
class LaunchPlan(Record):
    """Everything a provider needs to start the sandboxed interpreter.

    ``argv`` is the interpreter command *as it must run inside* (absolute interpreter path,
    CPython options, the bootstrap); ``env`` the complete environment; ``pass_fds`` the file
    descriptors the child must inherit (the policy payload, the report channel, the
    partial-mode socket). ``exposures`` = the profile's exposures plus the implicit ones
    (interpreter symlink chain, standard library, site-packages, CA certificates).
    ``hidden`` = existing paths below the exposures that ``ignore`` globs match (providers
    that can mask paths mask these). ``protected`` = profile files, never writable inside.
    """

    policy: Policy
    python: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    exposures: list[Exposure] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
    pass_fds: list[int] = field(default_factory=list)
    hosts_file: str | None = None
    child_setups: list[ChildSetup] = field(default_factory=list)
    interactive: bool = False
    #: The sandbox's process group takes the foreground of pysb's controlling terminal
    #: (job control: pysb_core.launch.jobcontrol); a provider may keep the program in the
    #: terminal's session then instead of giving it a session of its own.
    terminal: bool = False
    notes: list[str] = field(default_factory=list)
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    #: What the host process does between fork and exec, in order (the base
    #: ``Provider.launch`` runs them; the pids cgroup, when there is one, goes first).
    pre_exec: list[PreExecStep] = field(default_factory=list)
    #: stdin/stdout/stderr (and similar) for the host process, from the caller.
    popen_kwargs: dict[str, Any] = field(default_factory=dict)
    #: The bootstrap payload (JSON-able) and the inherited fd it is written to by seal().
    payload: dict[str, Any] = field(default_factory=dict)
    payload_fd: int | None = None
    #: The report channel (denials, learned accesses): the parent reads, the child writes.
    report_read_fd: int | None = None
    report_write_fd: int | None = None
    #: Host directories whose size pysb's parent watches against ``limits: tmp`` while it
    #: waits (:mod:`pysb_core.launch.tmpwatch`): the private temporary directory of a provider
    #: without a tmpfs of its own; and paths inside the sandbox's mount namespace, for a
    #: provider whose own tmpfs mounts have no size (:attr:`Provider.tmp_unbounded`).
    tmp_watch: list[str] = field(default_factory=list)
    tmp_watch_inside: list[str] = field(default_factory=list)
    #: (parent's end, sandbox's end) of the socket the bootstrap sends the descriptors of
    #: ``tmp_watch_inside`` on (pysb_core.launch.tmpwatch); pysb-internal.
    tmp_watch_channel: tuple[int, int] | None = None
    _sealed: bool = False

    def seal(self) -> None:
        """Write the payload (with the provider's child set-ups) to its fd.

        Providers call this after ``prepare`` and before starting anything that reads it
        (the base ``Provider.launch`` does). Idempotent.
        """
        if self._sealed or self.payload_fd is None:
            return
        import marshal  # built in, no import cost on either side; same interpreter both ends

        self.payload["child_setups"] = [
            {"module": s.module, "function": s.function, "args": s.args} for s in self.child_setups
        ]
        data = marshal.dumps(self.payload)
        view = memoryview(data)
        while view:
            n = os.write(self.payload_fd, view)
            view = view[n:]
        self._sealed = True

    @property
    def provider_options(self) -> dict[str, Any]:
        return self.policy.provider_options.get(self.policy.provider, {}) or {}

    def add_exposure(self, exposure: Exposure) -> None:
        """Add an exposure unless an identical one is already there."""
        if exposure not in self.exposures:
            self.exposures.append(exposure)

    def add_child_setup(self, setup: ChildSetup) -> None:
        self.child_setups.append(setup)

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        self.cleanups.append(fn)

    def add_pre_exec(self, what: str, run: Callable[[], None]) -> None:
        """Run ``run`` in the host process between fork and exec, after the steps before."""
        self.pre_exec.append(PreExecStep(what, run))

    def note(self, message: str) -> None:
        self.notes.append(message)


@mutable_record
class LaunchSpec(Record):
    """A provider's concrete start: the host command, and hooks around it.

    ``on_started(proc)`` runs right after the host process is spawned (attach a user-mode
    network to its PID, write the payload...). ``cleanups`` run after it exits, always.
    ``light`` (kit 1.6): every ``on_started`` hook takes pysb's light process object
    (``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``kill``, ``terminate``:
    what ``adopt_wrapper`` and ``watch_wrapper_setup`` need) as well as a ``Popen``, so the
    launch need not import ``subprocess``; without it a launch with hooks starts a real
    ``Popen``.

    ``ahead`` (kit 1.7): what each descriptor of ``pass_fds`` besides the payload's holds,
    for a provider whose command ``pysb run`` may start ahead of the plan on the next run
    of the same command (:mod:`pysb_core.launch.prestart`); ``None``: never started ahead.
    Each value is one of ``("copy", HOST_PATH)`` (a memory file holding a copy of that host
    file, read from its start), ``("dir", PATH)`` (an ``O_PATH`` descriptor of that
    directory, opened with ``open_dir_nofollow``), ``("bytes", DATA)`` (a pipe's read end
    that yields ``DATA``, then end of file) or ``("report", READ_FD)`` (a pipe's write end
    whose read end ``READ_FD`` an ``on_started`` hook reads). The launch compares every one
    (contents, directory identity, bytes) with what the command started ahead was given.
    """

    argv: list[str]
    env: dict[str, str]
    cwd: str
    pass_fds: list[int] = field(default_factory=list)
    on_started: list[Callable[[subprocess.Popen[bytes]], None]] = field(default_factory=list)
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    light: bool = False
    ahead: dict[int, tuple[str, Any]] | None = None
