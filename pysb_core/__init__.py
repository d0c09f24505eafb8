"""pysb: run Python code with only the capabilities a profile grants.

Public API only. Names are resolved lazily (module ``__getattr__``) so that the sandboxed
interpreter, which needs almost none of them, imports no more than it uses.
"""

from __future__ import annotations

from pysb_core._lazy import lazy_exports as _lazy_exports

TYPE_CHECKING = False  # no typing import at run time: this package is loaded in the sandbox

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # partial mode
    "sandbox": "pysb_core.remote:sandbox",
    "sandboxes": "pysb_core.remote:sandboxes",
    "run": "pysb_core.remote:run",
    "is_in_sandbox": "pysb_core.remote:is_in_sandbox",
    "call_encoded": "pysb_core.remote.api:call_encoded",
    "decode_answer": "pysb_core.remote.answer:decode_answer",
    # errors
    "SandboxError": "pysb_core.errors:SandboxError",
    "ProfileError": "pysb_core.errors:ProfileError",
    "ProviderUnavailableError": "pysb_core.errors:ProviderUnavailableError",
    "UnenforceableRuleError": "pysb_core.errors:UnenforceableRuleError",
    "SandboxProtocolError": "pysb_core.errors:SandboxProtocolError",
    "SandboxTimeoutError": "pysb_core.errors:SandboxTimeoutError",
    "SandboxBaseExceptionError": "pysb_core.errors:SandboxBaseExceptionError",
    "RestrictedResultError": "pysb_core.errors:RestrictedResultError",
    "DeniedError": "pysb_core.errors:DeniedError",
    "FileDeniedError": "pysb_core.errors:FileDeniedError",
    "WriteDeniedError": "pysb_core.errors:WriteDeniedError",
    "ImportDeniedError": "pysb_core.errors:ImportDeniedError",
    "NetworkDeniedError": "pysb_core.errors:NetworkDeniedError",
    "NameResolutionDeniedError": "pysb_core.errors:NameResolutionDeniedError",
    "ApiDeniedError": "pysb_core.errors:ApiDeniedError",
    "sandbox_denials": "pysb_core.errors:sandbox_denials",
    "ExitCode": "pysb_core.exitcodes:ExitCode",
    # plugin authoring
    "hookimpl": "pysb_core._startup.markers:hookimpl",
    "Provider": "pysb_core.provider:Provider",
    "ProviderStatus": "pysb_core.provider:ProviderStatus",
    "Capability": "pysb_core.provider:Capability",
    "LaunchPlan": "pysb_core.plan:LaunchPlan",
    "LaunchSpec": "pysb_core.plan:LaunchSpec",
    "ChildSetup": "pysb_core.plan:ChildSetup",
    "Policy": "pysb_core.policy:Policy",
    "Exposure": "pysb_core.policy:Exposure",
    "NetworkRule": "pysb_core.policy:NetworkRule",
    "ApiRule": "pysb_core.policy:ApiRule",
    "Limits": "pysb_core.policy:Limits",
    "Event": "pysb_core.events:Event",
    "Recorder": "pysb_core.events:Recorder",
    "CheckReport": "pysb_core.check:CheckReport",
    # profiles
    "check_profile": "pysb_core.launch.profilecheck:check_profile",
}

__all__ = [
    "ApiDeniedError",
    "ApiRule",
    "Capability",
    "CheckReport",
    "ChildSetup",
    "DeniedError",
    "Event",
    "ExitCode",
    "Exposure",
    "FileDeniedError",
    "ImportDeniedError",
    "LaunchPlan",
    "LaunchSpec",
    "Limits",
    "NameResolutionDeniedError",
    "NetworkDeniedError",
    "NetworkRule",
    "Policy",
    "ProfileError",
    "Provider",
    "ProviderStatus",
    "ProviderUnavailableError",
    "Recorder",
    "RestrictedResultError",
    "SandboxBaseExceptionError",
    "SandboxError",
    "SandboxProtocolError",
    "SandboxTimeoutError",
    "UnenforceableRuleError",
    "WriteDeniedError",
    "__version__",
    "call_encoded",
    "check_profile",
    "decode_answer",
    "hookimpl",
    "is_in_sandbox",
    "run",
    "sandbox",
    "sandbox_denials",
    "sandboxes",
]


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from pysb_core._startup.markers import hookimpl
    from pysb_core.check import CheckReport
    from pysb_core.errors import (
        ApiDeniedError,
        DeniedError,
        FileDeniedError,
        ImportDeniedError,
        NameResolutionDeniedError,
        NetworkDeniedError,
        ProfileError,
        ProviderUnavailableError,
        RestrictedResultError,
        SandboxBaseExceptionError,
        SandboxError,
        SandboxProtocolError,
        SandboxTimeoutError,
        UnenforceableRuleError,
        WriteDeniedError,
        sandbox_denials,
    )
    from pysb_core.events import Event, Recorder
    from pysb_core.exitcodes import ExitCode
    from pysb_core.launch.profilecheck import check_profile
    from pysb_core.plan import ChildSetup, LaunchPlan, LaunchSpec
    from pysb_core.policy import ApiRule, Exposure, Limits, NetworkRule, Policy
    from pysb_core.provider import Capability, Provider, ProviderStatus
    from pysb_core.remote import is_in_sandbox, run, sandbox, sandboxes
    from pysb_core.remote.answer import decode_answer
    from pysb_core.remote.api import call_encoded
