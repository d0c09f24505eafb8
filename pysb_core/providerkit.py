"""The supported API for writing a pysb provider (an OS sandbox back end).

Everything a provider needs from pysb-core is importable from here, and only what is here
(with the names of :mod:`pysb_core` itself) is promised to stay: the other modules of
pysb-core are internal and change without notice. The built-in providers (bubblewrap,
Landlock, unshare, firejail, qemu) are written against this kit alone, and a test keeps
them to it.

Versioning: :data:`KIT_VERSION` is ``(major, minor)``. A minor version adds names; a major
version removes or changes one. Say which kit your provider was written for with a
constant in the module your entry point names::

    PYSB_PROVIDERKIT = "1.0"

pysb refuses to load a provider built for another major version, or for a newer minor
version than it has (exit 125, naming your distribution); one that states nothing is
taken to be built for 1.0.

Names are resolved lazily: importing this module costs nothing, and the sandboxed
interpreter (where a provider's child-side module runs) loads only what it uses.

Groups (see docs/writing-providers.md for the guide):

- the contract: :class:`Provider`, :class:`ProviderStatus`, :class:`Capability`,
  :func:`unknown_option`, :data:`hookimpl` (a provider instance is also a pluggy plugin);
- the plan: :class:`LaunchPlan`, :class:`LaunchSpec`, :class:`ChildSetup`, :class:`Policy`,
  :class:`Exposure`, :class:`NetworkRule`, :class:`Limits`, :class:`CheckReport`;
- errors: :class:`SandboxError`, :class:`ProviderUnavailableError`;
- paths: :func:`is_within` (is this path under that root);
- probing the machine: :func:`which`, :func:`cached_probe`;
- exposures by descriptor: :func:`open_dir_nofollow` (a canonical exposure opened without
  following any link, for a mechanism that binds from an fd);
- the system files a provider with its own ``/etc`` must show: :data:`ETC_BASE`,
  :data:`ETC_NETWORK`, :data:`ETC_HOSTS`, :data:`ETC_RESOLV`, :data:`ALWAYS_HIDDEN`,
  :func:`hosts_file_text`;
- processes: :func:`adopt_wrapper` and :class:`WrapperProcess` (a wrapper command whose
  signals must reach the program), :func:`watch_wrapper_setup` (the wrapper's own set-up
  failure told from the program's exit), :class:`PreExecStep` and :func:`set_pre_exec`
  (what the host process does between ``fork`` and ``exec``: ``LaunchPlan.add_pre_exec``),
  :class:`PidsCgroup`, :func:`find_pids_controller` and :func:`pids_limit_problem`
  (``limits: processes`` for a root pysb: ``Provider.pids_cgroup`` makes it),
  :class:`ProgramStart` (``wall-time`` counted from the program's start when the sandbox
  boots first);
- the common seccomp refusals: :class:`SeccompRules`, :func:`seccomp_covers`,
  :func:`seccomp_filter_bytes`, :func:`install_seccomp`, :func:`seccomp_child_setup`,
  :func:`seccomp_describe` (its line in ``pysb check``);
- the shared network layer: :class:`NetnsNetwork` (a network namespace whose egress is
  filtered by the profile's rules), :func:`ephemeral_ports` (where a bind to port 0
  lands);
- ``adopt_wrapper(proc, depth=N)`` (since 1.6): a wrapper whose program is not the
  grandchild of the wrapper's process (firejail's reaper between its PID 1 and the
  program: 3);
- :func:`start_process` (since 1.5): ``subprocess.Popen(argv, **kwargs)`` without
  importing ``subprocess`` on the start path (a light process object for what it covers:
  an absolute program, streams as descriptors or ``DEVNULL``; a real ``Popen`` otherwise),
  for a provider that starts its host process itself;
- :func:`abstract_unix_decision` (since 1.4): the profile's decision on abstract Unix
  sockets in one direction (only rules over every address, port and protocol judge them),
  for a provider whose OS layer scopes them (landlock's ``SCOPE_ABSTRACT_UNIX_SOCKET``);
- ``Provider.preflight`` (since 1.3): what a launch will do, tried for ``pysb check`` short
  of starting the program (``NetnsNetwork.preflight`` loads the packet filter into a
  throwaway namespace);
- ``LaunchPlan.terminal`` (since 1.2): the sandbox's process group takes the foreground
  of pysb's terminal (job control), so a provider keeps the terminal's session for it;
- the network-rule compiler (since 1.1), for a provider that loads the profile's rules
  into a kernel packet filter itself: :class:`FilterTarget` (the network it runs on:
  user-mode helper addresses, uplink, loopback), :func:`compile_nft` (an nftables ruleset,
  a :class:`CompiledNetwork`), :func:`compile_iptables` (``iptables-restore`` inputs),
  :func:`rule_networks` (the addresses a rule covers, pins applied);
- C calls without ``ctypes``: :func:`c_function`, :class:`CInt`, :class:`CLong`,
  :class:`CPointer`, :func:`c_errno`;
- ``pysb_core.call_encoded`` and ``pysb_core.decode_answer`` (since 1.3; the names of
  :mod:`pysb_core` itself are this kit's too, so adding them is a minor version): a
  sandboxed call's answer relayed undecoded and decoded by its receiver;
- :func:`memoize` (since 1.6): ``functools.cache`` without ``functools`` (which imports
  ``collections``: ~1-2 ms of a start), with ``cache_clear()``;
- ``LaunchSpec.light`` (since 1.6): the ``on_started`` hooks take pysb's light process, so
  the launch imports no ``subprocess`` (``adopt_wrapper`` and ``watch_wrapper_setup`` do);
- ``LaunchSpec.ahead`` (since 1.7): what each passed descriptor holds, so that ``pysb run``
  may start the provider's command ahead of the plan on the next run of the same command
  (compared in full at the launch; bwrap does);
- light records (no ``dataclasses`` import in the sandbox): :func:`record`,
  :func:`mutable_record`, :func:`field`, :class:`Record`, :func:`asdict`.
"""

from __future__ import annotations

from pysb_core._lazy import lazy_exports as _lazy_exports

TYPE_CHECKING = False  # may be imported in the sandbox: no typing at run time

#: ``(major, minor)`` of this kit (see the module docstring).
KIT_VERSION: tuple[int, int] = (1, 7)

#: The constant a provider's module sets to the kit version it was written for.
DECLARATION = "PYSB_PROVIDERKIT"

#: public name -> ``module:attribute`` it is.
_EXPORTS: dict[str, str] = {
    # the contract
    "Provider": "pysb_core.provider:Provider",
    "ProviderStatus": "pysb_core.provider:ProviderStatus",
    "Capability": "pysb_core.provider:Capability",
    "unknown_option": "pysb_core.provider:unknown_option",
    "hookimpl": "pysb_core._startup.markers:hookimpl",
    # the plan
    "LaunchPlan": "pysb_core.plan:LaunchPlan",
    "LaunchSpec": "pysb_core.plan:LaunchSpec",
    "ChildSetup": "pysb_core.plan:ChildSetup",
    "Policy": "pysb_core.policy:Policy",
    "Exposure": "pysb_core.policy:Exposure",
    "NetworkRule": "pysb_core.policy:NetworkRule",
    "Limits": "pysb_core.policy:Limits",
    "CheckReport": "pysb_core.check:CheckReport",
    # errors
    "SandboxError": "pysb_core.errors:SandboxError",
    "ProviderUnavailableError": "pysb_core.errors:ProviderUnavailableError",
    # paths
    "is_within": "pysb_core.linux.paths:is_within",
    # probing the machine
    "which": "pysb_core.launch.probecache:which",
    "cached_probe": "pysb_core.launch.probecache:cached_probe",
    # exposures by descriptor
    "open_dir_nofollow": "pysb_core.linux.nofollow:open_dir_nofollow",
    # system files
    "ALWAYS_HIDDEN": "pysb_core.linux.sysfiles:ALWAYS_HIDDEN",
    "ETC_BASE": "pysb_core.linux.sysfiles:ETC_BASE",
    "ETC_HOSTS": "pysb_core.linux.sysfiles:ETC_HOSTS",
    "ETC_NETWORK": "pysb_core.linux.sysfiles:ETC_NETWORK",
    "ETC_RESOLV": "pysb_core.linux.sysfiles:ETC_RESOLV",
    "hosts_file_text": "pysb_core.linux.sysfiles:hosts_file_text",
    # processes
    "adopt_wrapper": "pysb_core.launch.wrapper_process:adopt",
    "WrapperProcess": "pysb_core.launch.wrapper_process:WrapperProcess",
    "watch_wrapper_setup": "pysb_core.launch.wrapper_process:watch_setup",
    "ProgramStart": "pysb_core.launch.execute:ProgramStart",
    "PidsCgroup": "pysb_core.linux.pidlimit:PidsCgroup",
    "find_pids_controller": "pysb_core.linux.pidlimit:find_controller",
    "pids_limit_problem": "pysb_core.linux.pidlimit:problem",
    "PreExecStep": "pysb_core.plan:PreExecStep",
    "set_pre_exec": "pysb_core.provider:set_pre_exec",
    "start_process": "pysb_core.linux.spawn:start",
    # seccomp
    "SeccompRules": "pysb_core.linux.seccomp:Rules",
    "seccomp_covers": "pysb_core.linux.seccomp:covers",
    "seccomp_filter_bytes": "pysb_core.linux.seccomp:filter_bytes",
    "install_seccomp": "pysb_core.linux.seccomp:install",
    "seccomp_child_setup": "pysb_core.linux.seccomp:child_setup",
    "seccomp_describe": "pysb_core.linux.seccomp:describe",
    # network layer
    "NetnsNetwork": "pysb_core.net.netns.session:NetnsNetwork",
    "ephemeral_ports": "pysb_core.policy.netmatch:ephemeral_ports",
    "abstract_unix_decision": "pysb_core.policy.netmatch:abstract_decision",
    # the network-rule compiler
    "FilterTarget": "pysb_core.net.netfilter.target:FilterTarget",
    "CompiledNetwork": "pysb_core.net.netfilter.nft:CompiledNetwork",
    "compile_nft": "pysb_core.net.netfilter.nft:compile_nft",
    "compile_iptables": "pysb_core.net.netfilter.iptables:compile_iptables",
    "rule_networks": "pysb_core.policy.netrules:rule_networks",
    # C calls
    "c_function": "pysb_core.linux.cfuncs:function",
    "CInt": "pysb_core.linux.cfuncs:Int",
    "CLong": "pysb_core.linux.cfuncs:Long",
    "CPointer": "pysb_core.linux.cfuncs:Pointer",
    "c_errno": "pysb_core.linux.cfuncs:get_errno",
    # records
    "Record": "pysb_core._startup.records:Record",
    "record": "pysb_core._startup.records:record",
    "mutable_record": "pysb_core._startup.records:mutable_record",
    "field": "pysb_core._startup.records:field",
    "asdict": "pysb_core._startup.records:asdict",
    # the start path
    "memoize": "pysb_core._startup.memo:cache",
}

__all__ = [
    "ALWAYS_HIDDEN",
    "DECLARATION",
    "ETC_BASE",
    "ETC_HOSTS",
    "ETC_NETWORK",
    "ETC_RESOLV",
    "KIT_VERSION",
    "CInt",
    "CLong",
    "CPointer",
    "Capability",
    "CheckReport",
    "ChildSetup",
    "CompiledNetwork",
    "Exposure",
    "FilterTarget",
    "LaunchPlan",
    "LaunchSpec",
    "Limits",
    "NetnsNetwork",
    "NetworkRule",
    "PidsCgroup",
    "Policy",
    "PreExecStep",
    "ProgramStart",
    "Provider",
    "ProviderStatus",
    "ProviderUnavailableError",
    "Record",
    "SandboxError",
    "SeccompRules",
    "WrapperProcess",
    "abstract_unix_decision",
    "adopt_wrapper",
    "asdict",
    "c_errno",
    "c_function",
    "cached_probe",
    "compile_iptables",
    "compile_nft",
    "ephemeral_ports",
    "field",
    "find_pids_controller",
    "hookimpl",
    "hosts_file_text",
    "install_seccomp",
    "is_within",
    "memoize",
    "mutable_record",
    "open_dir_nofollow",
    "pids_limit_problem",
    "record",
    "rule_networks",
    "seccomp_child_setup",
    "seccomp_covers",
    "seccomp_describe",
    "seccomp_filter_bytes",
    "set_pre_exec",
    "start_process",
    "unknown_option",
    "watch_wrapper_setup",
    "which",
]


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover - what type checkers and IDEs see
    from pysb_core._startup.markers import hookimpl
    from pysb_core._startup.memo import cache as memoize
    from pysb_core._startup.records import Record, asdict, field, mutable_record, record
    from pysb_core.check import CheckReport
    from pysb_core.errors import ProviderUnavailableError, SandboxError
    from pysb_core.launch.execute import ProgramStart
    from pysb_core.launch.probecache import cached_probe, which
    from pysb_core.launch.wrapper_process import WrapperProcess
    from pysb_core.launch.wrapper_process import adopt as adopt_wrapper
    from pysb_core.launch.wrapper_process import watch_setup as watch_wrapper_setup
    from pysb_core.linux.cfuncs import Int as CInt
    from pysb_core.linux.cfuncs import Long as CLong
    from pysb_core.linux.cfuncs import Pointer as CPointer
    from pysb_core.linux.cfuncs import function as c_function
    from pysb_core.linux.cfuncs import get_errno as c_errno
    from pysb_core.linux.nofollow import open_dir_nofollow
    from pysb_core.linux.paths import is_within
    from pysb_core.linux.pidlimit import PidsCgroup
    from pysb_core.linux.pidlimit import find_controller as find_pids_controller
    from pysb_core.linux.pidlimit import problem as pids_limit_problem
    from pysb_core.linux.seccomp import Rules as SeccompRules
    from pysb_core.linux.seccomp import child_setup as seccomp_child_setup
    from pysb_core.linux.seccomp import covers as seccomp_covers
    from pysb_core.linux.seccomp import describe as seccomp_describe
    from pysb_core.linux.seccomp import filter_bytes as seccomp_filter_bytes
    from pysb_core.linux.seccomp import install as install_seccomp
    from pysb_core.linux.spawn import start as start_process
    from pysb_core.linux.sysfiles import (
        ALWAYS_HIDDEN,
        ETC_BASE,
        ETC_HOSTS,
        ETC_NETWORK,
        ETC_RESOLV,
        hosts_file_text,
    )
    from pysb_core.net.netfilter.iptables import compile_iptables
    from pysb_core.net.netfilter.nft import CompiledNetwork, compile_nft
    from pysb_core.net.netfilter.target import FilterTarget
    from pysb_core.net.netns.session import NetnsNetwork
    from pysb_core.plan import ChildSetup, LaunchPlan, LaunchSpec, PreExecStep
    from pysb_core.policy import Exposure, Limits, NetworkRule, Policy
    from pysb_core.policy.netmatch import abstract_decision as abstract_unix_decision
    from pysb_core.policy.netmatch import ephemeral_ports
    from pysb_core.policy.netrules import rule_networks
    from pysb_core.provider import (
        Capability,
        Provider,
        ProviderStatus,
        set_pre_exec,
        unknown_option,
    )
