"""pysb: run Python code with only the capabilities a profile grants.

Public API only. Names are resolved lazily (module ``__getattr__``) so that the sandboxed
interpreter, which needs almost none of them, imports no more than it uses.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # no typing import at run time: this package is loaded in the sandbox

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # partial mode
    "sandbox": "pysb_core.remote",
    "sandboxes": "pysb_core.remote",
    "run": "pysb_core.remote",
    "is_in_sandbox": "pysb_core.remote",
    # errors
    "SandboxError": "pysb_core.errors",
    "ProfileError": "pysb_core.errors",
    "ProviderUnavailableError": "pysb_core.errors",
    "UnenforceableRuleError": "pysb_core.errors",
    "SandboxProtocolError": "pysb_core.errors",
    "SandboxTimeoutError": "pysb_core.errors",
    "SandboxBaseExceptionError": "pysb_core.errors",
    "RestrictedResultError": "pysb_core.errors",
    "DeniedError": "pysb_core.errors",
    "FileDeniedError": "pysb_core.errors",
    "WriteDeniedError": "pysb_core.errors",
    "ImportDeniedError": "pysb_core.errors",
    "NetworkDeniedError": "pysb_core.errors",
    "ApiDeniedError": "pysb_core.errors",
    "sandbox_denials": "pysb_core.errors",
    "ExitCode": "pysb_core.exitcodes",
    # plugin authoring
    "hookimpl": "pysb_core.markers",
    "Provider": "pysb_core.provider",
    "ProviderStatus": "pysb_core.provider",
    "Capability": "pysb_core.provider",
    "LaunchPlan": "pysb_core.plan",
    "LaunchSpec": "pysb_core.plan",
    "ChildSetup": "pysb_core.plan",
    "Policy": "pysb_core.policy",
    "Exposure": "pysb_core.policy",
    "NetworkRule": "pysb_core.policy",
    "ApiRule": "pysb_core.policy",
    "Limits": "pysb_core.policy",
    "Event": "pysb_core.events",
    "Recorder": "pysb_core.events",
    "CheckReport": "pysb_core.check",
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
    "hookimpl",
    "is_in_sandbox",
    "run",
    "sandbox",
    "sandbox_denials",
    "sandboxes",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pysb_core' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from pysb_core.check import CheckReport
    from pysb_core.errors import (
        ApiDeniedError,
        DeniedError,
        FileDeniedError,
        ImportDeniedError,
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
    from pysb_core.markers import hookimpl
    from pysb_core.plan import ChildSetup, LaunchPlan, LaunchSpec
    from pysb_core.policy import ApiRule, Exposure, Limits, NetworkRule, Policy
    from pysb_core.provider import Capability, Provider, ProviderStatus
    from pysb_core.remote import is_in_sandbox, run, sandbox, sandboxes
