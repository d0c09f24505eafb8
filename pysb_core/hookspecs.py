"""Every pluggy hook pysb calls, grouped by the moment of a run at which it is called.

Plugins implement these with ``@pysb_core.hookimpl`` (keyword arguments only; name the
arguments you need). Guard families are plugins registered from the ``pysb.guards``
entry-point group; other plugins (DNS resolvers, event sinks) from ``pysb.plugins``; the
loaded provider instance is registered too, so it can implement hooks.

Order of one complete-mode run (see :func:`pysb_launch`):

1. ``pysb_add_profile_keys`` -- families declare and validate their profile sections;
2. ``pysb_configure`` -- the frozen policy is announced (historic);
3. ``pysb_contribute`` -- families add to the launch plan;
4. ``pysb_dns_resolve`` / ``pysb_dns_pinned`` -- host names are resolved and pinned;
5. ``pysb_check`` -- who enforces each rule (fail closed when nobody does);
6. ``pysb_launch`` -- the provider starts the sandbox; inside it ``pysb_child_install`` and
   ``pysb_child_arm`` run before the program;
7. ``pysb_event`` for each denial or learned access, and ``pysb_learned`` at the end of a
   learning run.
"""

from __future__ import annotations

from pysb_core.markers import PROJECT, hookspec

TYPE_CHECKING = False  # read by every `pysb run`: no typing import at run time
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from pysb_core.check import CheckReport
    from pysb_core.events import Event
    from pysb_core.learning import LearnedProfile, Recorder
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Policy
    from pysb_core.profile.schema import ProfileSchema
    from pysb_core.provider import Provider

#: The project name (``pysb_spec`` / ``pysb_impl`` attributes) and the spec marker.
__all__ = ["PROJECT", "hookspec"]

# ---------------------------------------------------------------------------------------
# Profile
# ---------------------------------------------------------------------------------------


@hookspec
def pysb_add_profile_keys(schema: ProfileSchema) -> None:
    """Declare profile sections and their validators.

    Each guard family owns its section: it registers a validator that receives the raw
    value with its source locations and reports problems as ``FILE:LINE: message``.

    :param schema: collector with ``schema.add_validator(section, fn)``.

    .. versionadded:: 0.1
    """


@hookspec(historic=True)
def pysb_configure(policy: Policy) -> None:
    """Receive the compiled policy once, before anything is launched.

    Historic: a plugin registered later (the provider) still receives it.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------
# Launch plan
# ---------------------------------------------------------------------------------------


@hookspec
def pysb_contribute(policy: Policy, plan: LaunchPlan) -> None:
    """Add what this family needs to the launch plan (exposures, env, child set-ups).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def pysb_dns_resolve(hostnames: Sequence[str]) -> Mapping[str, Sequence[str]] | None:
    """Resolve host names of network rules on the host, before launch.

    Return a mapping of each name to its addresses (an empty sequence when a name does not
    resolve). Stops at first non-None result; the built-in resolver (``/etc/hosts`` then
    dnspython) runs last.

    .. versionadded:: 0.1
    """


@hookspec
def pysb_dns_pinned(pins: Mapping[str, Sequence[str]], plan: LaunchPlan) -> None:
    """Be told the pinned addresses (a provider writes a hosts file, compiles filters).

    .. versionadded:: 0.1
    """


@hookspec
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """Add to the report of who enforces what (``pysb check``, and the fail-closed decision).

    The core already lists every rule of the policy, with ``python`` when the rule's guard
    family is installed and active and ``os`` when the provider's enforced capabilities
    cover it. Families add notes (``report.note(text)``) or rules of their own
    (``report.add(rule_text, source, layers, family)``); an empty ``layers`` means nobody
    enforces it, and ``pysb run`` then refuses to start.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def pysb_launch(plan: LaunchPlan, provider: Provider) -> Any:
    """Start the sandbox for ``plan`` and return the host process.

    Implement with ``wrapper=True`` to set up and tear down around the launch; the built-in
    implementation (``trylast``) calls ``provider.launch(plan)``. Stops at first non-None
    result.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------
# Inside the sandbox
# ---------------------------------------------------------------------------------------


@hookspec
def pysb_child_install(policy: Policy, recorder: Recorder) -> str | Sequence[str] | None:
    """Patch what this family guards, inside the sandboxed interpreter.

    Runs before the program and before the API guard is armed. ``recorder`` reports
    denials and, in a learning run, every access (``recorder.learning`` tells which).

    The child does not use pluggy: the bootstrap imports each guard family's module and
    calls this function directly. A family whose entry-point module sets
    ``PYSB_CHILD_MODULE = "pkg.module"`` has that module imported instead, so that the
    host (which only needs the family's other hooks) never imports the guard itself.

    :return: the guard family (or families) this call put in force, None for none. A
        guard is trusted by what it arms, not by the name of its entry point: when a
        family the profile relies on the Python layer for was armed by no guard (or by
        two), the program is not started (exit 125).

    .. versionadded:: 0.1
    """


@hookspec
def pysb_child_arm(policy: Policy, recorder: Recorder) -> str | Sequence[str] | None:
    """Arm the guards that must not see the framework's own start-up (the API guard).

    Called last, right before user code.

    :return: the guard family (or families) put in force, as for ``pysb_child_install``.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------


@hookspec
def pysb_event(event: Event) -> None:
    """Receive one denial or learned access (the ``--events`` JSONL writer is one sink).

    .. versionadded:: 0.1
    """


@hookspec
def pysb_learned(records: Sequence[Event], profile: LearnedProfile) -> None:
    """Render this family's learned rules into ``profile`` at the end of a learning run.

    .. versionadded:: 0.1
    """
