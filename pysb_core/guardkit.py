"""The supported API for writing a pysb guard family (a Python-layer guard).

A guard family is a pluggy plugin registered in the ``pysb.guards`` entry-point group. On
the host it declares and validates its profile section (``pysb_add_profile_keys``), adds
to the launch plan (``pysb_contribute``), says what it enforces (``pysb_check``) and turns
learned accesses into rules (``pysb_learned``); inside the sandbox the bootstrap calls its
``pysb_child_install`` / ``pysb_child_arm`` (see :mod:`pysb_core.hookspecs` and
docs/writing-guards.md). Everything such a family needs from pysb-core is importable from
here, and only what is here (with the names of :mod:`pysb_core` itself) is promised to
stay. The built-in guards (files, imports, network, env, api) are written against this kit
alone, and a test keeps them to it.

Versioning: :data:`KIT_VERSION` is ``(major, minor)``; a minor version adds names, a major
version removes or changes one. The module your entry point names states the kit it was
written for::

    PYSB_GUARDKIT = "1.0"

pysb refuses to load a guard built for another major version, or for a newer minor
version than it has (exit 125, naming your distribution); one that states nothing is
taken to be built for 1.0.

Names are resolved lazily: the sandboxed interpreter imports this module before the
program runs, and loads only the names a guard uses.

Groups:

- hooks: :data:`hookimpl`;
- what a guard judges by: :class:`Policy`, :class:`Exposure`, :class:`NetworkRule`,
  :class:`ApiRule`, :class:`Limits`, :func:`implicit_exposures`, :func:`is_within`,
  :data:`netmatch` (the
  reference network matcher: plain functions a guard may re-create with private globals),
  :func:`ephemeral_ports` (where a bind to port 0 lands);
- what it reports with: :class:`Recorder` (``deny`` / ``learn``), :class:`Event`,
  :func:`reporter_functions` (the recorder's encoder, for sealed judges);
- what it raises: :class:`DeniedError` and its kinds :class:`FileDeniedError`,
  :class:`WriteDeniedError`, :class:`ImportDeniedError`, :class:`NetworkDeniedError`,
  :class:`ApiDeniedError`; :class:`SandboxError`;
- learning what an executed program needs (host side): :func:`find_executable`,
  :func:`needed_files`;
- the host side: :class:`ProfileSchema`, :class:`Located`, :class:`LaunchPlan`,
  :class:`ChildSetup`, :class:`CheckReport`, :class:`Capability`, :class:`Provider`,
  :class:`LearnedProfile`, :class:`HostService` (kit 1.1: a service on the host's
  loopback that the sandbox may reach, from ``pysb_host_services``);
- ``pysb_core.call_encoded`` and ``pysb_core.decode_answer`` (since 1.2; the names of
  :mod:`pysb_core` itself are this kit's too, so adding them is a minor version): a
  sandboxed call's answer relayed undecoded and decoded by its receiver;
- light records: :func:`record`, :func:`mutable_record`, :func:`field`, :class:`Record`,
  :func:`asdict`.
"""

from __future__ import annotations

from pysb_core._lazy import lazy_exports as _lazy_exports

TYPE_CHECKING = False  # imported in the sandbox before the program: no typing at run time

#: ``(major, minor)`` of this kit (see the module docstring).
KIT_VERSION: tuple[int, int] = (1, 2)

#: The constant a guard family's module sets to the kit version it was written for.
DECLARATION = "PYSB_GUARDKIT"

#: public name -> ``module:attribute`` it is (``module:`` for a module).
_EXPORTS: dict[str, str] = {
    "hookimpl": "pysb_core._startup.markers:hookimpl",
    # what a guard judges by
    "Policy": "pysb_core.policy:Policy",
    "Exposure": "pysb_core.policy:Exposure",
    "NetworkRule": "pysb_core.policy:NetworkRule",
    "ApiRule": "pysb_core.policy:ApiRule",
    "Limits": "pysb_core.policy:Limits",
    "implicit_exposures": "pysb_core.launch.pyenv:implicit_exposures",
    "is_within": "pysb_core.linux.paths:is_within",
    "netmatch": "pysb_core.policy.netmatch:",
    "find_executable": "pysb_core.linux.execdeps:find_executable",
    "needed_files": "pysb_core.linux.execdeps:needed_files",
    "ephemeral_ports": "pysb_core.policy.netmatch:ephemeral_ports",
    # reporting
    "Recorder": "pysb_core.events:Recorder",
    "Event": "pysb_core.events:Event",
    "reporter_functions": "pysb_core.events:reporter_functions",
    # refusals
    "SandboxError": "pysb_core.errors:SandboxError",
    "DeniedError": "pysb_core.errors:DeniedError",
    "FileDeniedError": "pysb_core.errors:FileDeniedError",
    "WriteDeniedError": "pysb_core.errors:WriteDeniedError",
    "ImportDeniedError": "pysb_core.errors:ImportDeniedError",
    "NetworkDeniedError": "pysb_core.errors:NetworkDeniedError",
    "NameResolutionDeniedError": "pysb_core.errors:NameResolutionDeniedError",
    "ApiDeniedError": "pysb_core.errors:ApiDeniedError",
    # the host side
    "ProfileSchema": "pysb_core.profile.schema:ProfileSchema",
    "Located": "pysb_core.profile.schema:Located",
    "LaunchPlan": "pysb_core.plan:LaunchPlan",
    "ChildSetup": "pysb_core.plan:ChildSetup",
    "CheckReport": "pysb_core.check:CheckReport",
    "Capability": "pysb_core.provider:Capability",
    "Provider": "pysb_core.provider:Provider",
    "LearnedProfile": "pysb_core.profile.learning:LearnedProfile",
    "HostService": "pysb_core.policy.hostservice:HostService",
    # records
    "Record": "pysb_core._startup.records:Record",
    "record": "pysb_core._startup.records:record",
    "mutable_record": "pysb_core._startup.records:mutable_record",
    "field": "pysb_core._startup.records:field",
    "asdict": "pysb_core._startup.records:asdict",
}

__all__ = [
    "DECLARATION",
    "KIT_VERSION",
    "ApiDeniedError",
    "ApiRule",
    "Capability",
    "CheckReport",
    "ChildSetup",
    "DeniedError",
    "Event",
    "Exposure",
    "FileDeniedError",
    "HostService",
    "ImportDeniedError",
    "LaunchPlan",
    "LearnedProfile",
    "Limits",
    "Located",
    "NameResolutionDeniedError",
    "NetworkDeniedError",
    "NetworkRule",
    "Policy",
    "ProfileSchema",
    "Provider",
    "Record",
    "Recorder",
    "SandboxError",
    "WriteDeniedError",
    "asdict",
    "ephemeral_ports",
    "field",
    "find_executable",
    "hookimpl",
    "implicit_exposures",
    "is_within",
    "mutable_record",
    "needed_files",
    "netmatch",
    "record",
    "reporter_functions",
]


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover - what type checkers and IDEs see
    from pysb_core._startup.markers import hookimpl
    from pysb_core._startup.records import Record, asdict, field, mutable_record, record
    from pysb_core.check import CheckReport
    from pysb_core.errors import (
        ApiDeniedError,
        DeniedError,
        FileDeniedError,
        ImportDeniedError,
        NameResolutionDeniedError,
        NetworkDeniedError,
        SandboxError,
        WriteDeniedError,
    )
    from pysb_core.events import Event, Recorder, reporter_functions
    from pysb_core.launch.pyenv import implicit_exposures
    from pysb_core.linux.execdeps import find_executable, needed_files
    from pysb_core.linux.paths import is_within
    from pysb_core.plan import ChildSetup, LaunchPlan
    from pysb_core.policy import ApiRule, Exposure, Limits, NetworkRule, Policy
    from pysb_core.policy import netmatch as netmatch
    from pysb_core.policy.hostservice import HostService
    from pysb_core.policy.netmatch import ephemeral_ports
    from pysb_core.profile.learning import LearnedProfile
    from pysb_core.profile.schema import Located, ProfileSchema
    from pysb_core.provider import Capability, Provider
