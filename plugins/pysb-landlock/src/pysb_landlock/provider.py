"""The ``landlock`` provider class (parent side): probe, capabilities, compile, prepare.

No wrapper process, no namespace, no root: the launch is the plain interpreter command,
and a :class:`~pysb_core.plan.ChildSetup` makes the bootstrap call
:func:`pysb_landlock.child.restrict` before user code. The kernel then confines reads and
writes to the exposures, TCP bind/connect to the allowed ports (ABI >= 4), and signals and
abstract Unix sockets to the sandbox (ABI >= 6).

What Landlock cannot do (hide or rename paths, filter hosts or UDP) is not claimed in
``capabilities``; ``pysb check`` therefore reports those rules as enforced by the Python
layer only, and refuses them under ``--no-python-guards``.
"""

from __future__ import annotations

import os

from pysb_core import hookimpl
from pysb_core.providerkit import (
    Capability,
    ChildSetup,
    LaunchSpec,
    Provider,
    ProviderStatus,
    ProviderUnavailableError,
    is_within,
    unknown_option,
)

#: The provider kit this plugin is written against (:mod:`pysb_core.kitversion`).
PYSB_PROVIDERKIT = "1.7"

TYPE_CHECKING = False  # typing costs ~1.5 ms at every start
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from pysb_core.providerkit import CheckReport, LaunchPlan, Policy
    from pysb_landlock.compiler import Compiled

_FIX = (
    "boot a Linux >= 5.13 kernel built with CONFIG_SECURITY_LANDLOCK=y and with landlock in "
    "its LSM list (CONFIG_LSM, or the boot parameter lsm=landlock,...); TCP port rules need "
    "Linux >= 6.7 (ABI 4), signal and abstract-socket scoping Linux >= 6.12 (ABI 6)"
)


class LandlockProvider(Provider):
    """Landlock LSM: files by path hierarchy, TCP by port; no hosts, UDP, hiding, renames."""

    name = "landlock"
    partial_pipes = True  # a local process: partial mode over two pipes
    description = "Linux Landlock LSM: the interpreter restricts itself (no root, no namespaces)"
    capabilities = frozenset(
        {
            Capability.FILES,
            Capability.FILES_WRITE,
            Capability.TCP_PORT,
            Capability.ENV,
            Capability.LIMITS,
        }
    )
    install_hint = _FIX

    _abi_probe: int | None
    _abi_error: str | None

    def _abi(self) -> int | None:
        """The kernel's ABI (asked once per provider instance, i.e. once per run).

        A success is remembered for this kernel and boot (:mod:`pysb_core.launch.probecache`):
        asking imports the system calls (:mod:`pysb_landlock.ruleset`) in the parent. A
        stale answer cannot weaken the sandbox: the child asks the kernel again and refuses
        to start when its ABI is lower than the one compiled for.
        """
        if not hasattr(self, "_abi_probe"):
            from pysb_core.providerkit import cached_probe

            status = cached_probe("landlock", (), _probe_abi)
            abi = status.details.get("abi")
            if status.available and isinstance(abi, int):
                self._abi_probe, self._abi_error = abi, None
            else:
                self._abi_probe, self._abi_error = None, status.reason
        return self._abi_probe

    def probe(self) -> ProviderStatus:
        abi = self._abi()
        if abi is None:
            return ProviderStatus.missing(self._abi_error or "landlock unavailable", fix=_FIX)
        return ProviderStatus.ok(version=f"ABI {abi}", abi=abi)

    def enforced(self) -> frozenset[Capability]:
        abi = self._abi()
        if abi is None:
            return frozenset()
        out = {Capability.FILES, Capability.ENV, Capability.LIMITS}
        if abi >= 3:
            # Before ABI 3, truncate(2) cannot be denied: writes are not confined.
            out.add(Capability.FILES_WRITE)
        if abi >= 4:
            out.add(Capability.TCP_PORT)
        return frozenset(out)

    def compile(self, plan: LaunchPlan) -> Compiled:
        """The ruleset for ``plan`` on this kernel (raises when Landlock is unavailable)."""
        from pysb_landlock.compiler import compile_plan

        abi = self._abi()
        if abi is None:
            raise ProviderUnavailableError(
                f"provider 'landlock' cannot run here: {self._abi_error}", fix=_FIX
            )
        compiled = compile_plan(plan, abi, framework_dirs=_framework_dirs())
        compiled.unix = bool(self.options.get("unix-sockets", False))
        compiled.sysv_ipc = bool(self.options.get("sysv-ipc", False))
        return compiled

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> list[str]:
        """``unix-sockets: true`` lets the program create Unix sockets. Landlock does not
        mediate connect() to a named socket, so that opens every host socket the user may
        reach (docker.sock, D-Bus): off by default. ``sysv-ipc: true`` lets it use SysV
        message queues, semaphores and shared memory: there is no IPC namespace under
        Landlock, so that opens the host's segments (by key or id) too: off by default."""
        known = ("unix-sockets", "sysv-ipc")
        problems = []
        for key, value in options.items():
            if key not in known:
                problems.append(unknown_option(key, known))
            elif not isinstance(value, bool):
                problems.append(f"'{key}' must be true or false")
        return problems

    def describe(self, plan: LaunchPlan) -> list[str]:
        try:
            return self.compile(plan).describe()
        except ProviderUnavailableError as exc:
            return [f"landlock unavailable: {exc.reason}"]

    @hookimpl
    def pysb_check(self, policy: Policy, provider: Provider | None, report: CheckReport) -> None:
        """Report what no capability flag shows: Landlock grants the union of all rules on a
        path, so a read-only exposure, a profile file or pysb's state directory (caches,
        trusted-profile records) inside an ``expose-rw`` directory is writable at the OS
        layer. Only the Python file guard keeps it read-only (and
        without it, ``pysb run`` refuses to start)."""
        if provider is not self:
            return

        layers = ["python"] if "files" in report.python_families else []
        writable = [e for e in policy.exposures if e.writable]
        for p in policy.profile_files:
            real = os.path.realpath(p)
            w = next((e for e in writable if is_within(real, e.path)), None)
            if w is not None:
                rule = f"files: profile {p} stays read-only (inside expose-rw {w.path})"
                report.add(rule, w.source, layers, "files")
        for p in policy.state_dirs:  # caches and trusted-profile records steer the next run
            w = next((e for e in writable if is_within(p, e.path)), None)
            if w is not None:
                rule = f"files: pysb's state {p} stays read-only (inside expose-rw {w.path})"
                report.add(rule, w.source, layers, "files")
        for e in policy.exposures:
            if e.writable or e.implicit:
                continue
            w = next((x for x in writable if x.path != e.path and is_within(e.path, x.path)), None)
            if w is not None:
                rule = f"files: expose-ro: {e.path} stays read-only (inside expose-rw {w.path})"
                report.add(rule, e.source, layers, "files")

    def prepare(self, plan: LaunchPlan) -> LaunchSpec:
        compiled = self.compile(plan)
        for warning in compiled.warnings:
            plan.note(f"landlock: {warning}")
        plan.add_child_setup(ChildSetup("pysb_landlock.child", "restrict", compiled.args()))
        return LaunchSpec(
            argv=list(plan.argv),
            env=dict(plan.env),
            cwd=plan.cwd,
            pass_fds=list(plan.pass_fds),
        )


def _probe_abi() -> ProviderStatus:
    """Ask the kernel for its Landlock ABI (a C call, pysb_landlock._libc)."""
    try:
        from pysb_landlock import ruleset

        abi = ruleset.abi_version()
    except OSError as exc:
        return ProviderStatus.missing(_reason(exc), fix=_FIX)
    except (ImportError, AttributeError) as exc:  # no _ctypes, or a libc without capset
        return ProviderStatus.missing(f"cannot call the kernel: {exc}", fix=_FIX)
    return ProviderStatus.ok(version=f"ABI {abi}", abi=abi)


def _reason(exc: OSError) -> str:
    import errno

    if exc.errno == errno.ENOSYS:
        return "this kernel is built without Landlock (CONFIG_SECURITY_LANDLOCK)"
    if exc.errno == errno.EOPNOTSUPP:
        return "Landlock is built in but not enabled at boot (not in the LSM list)"
    return str(exc.strerror or exc)


def _framework_dirs() -> list[str]:
    """Package directories the sandboxed interpreter imports from after the restriction
    (pysb_core's lazily imported submodules, this package)."""
    import pysb_core

    return [
        os.path.dirname(os.path.realpath(pysb_core.__file__)),
        os.path.dirname(os.path.realpath(__file__)),
    ]
