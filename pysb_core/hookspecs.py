"""Every pluggy hook pysb calls on the host, in the order of a run.

Implement them with ``@pysb_core.hookimpl``. pysb calls every hook with keyword arguments,
and an implementation names only the arguments it needs (pluggy passes just those). Guard
families are plugins registered from the ``pysb.guards`` entry-point group; other plugins
(DNS resolvers, event sinks) from ``pysb.plugins``; the loaded provider instance is
registered too (as ``provider:NAME``), so a provider class can implement any of these
as methods.

Order of one complete-mode run:

1. ``pysb_add_profile_keys`` -- families declare and validate their profile sections;
2. ``pysb_dns_resolve`` -- host names of network rules are resolved and pinned;
3. ``pysb_host_services`` -- plugins name the host-side services the sandbox may reach
   (an egress proxy), which become network rules of the policy;
4. ``pysb_configure`` -- every plugin, the provider included, receives the final policy;
5. ``pysb_check`` -- who enforces each rule (the run does not start when nobody does);
6. ``pysb_contribute`` -- families and the provider add to the launch plan;
7. ``pysb_launch`` -- the sandbox starts; inside it the bootstrap calls each guard's
   ``pysb_child_install`` and ``pysb_child_arm`` (not pluggy hooks: see
   :mod:`pysb_core.childhooks`);
8. ``pysb_event`` for each denial or learned access as it arrives, and ``pysb_learned``
   at the end of a learning run.

An exception raised by an implementation before the program starts stops the run (exit
125) with one paragraph naming the distribution it came from; ``--debug`` shows the
traceback.
"""

from __future__ import annotations

from pysb_core._startup.markers import PROJECT, hookspec

TYPE_CHECKING = False  # read by every `pysb run`: no typing import at run time
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Mapping, Sequence

    from pysb_core.check import CheckReport
    from pysb_core.events import Event
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Policy
    from pysb_core.policy.hostservice import HostService
    from pysb_core.profile.learning import LearnedProfile
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
    value with its source location and returns its problems, each a message (pysb
    prefixes ``FILE:LINE:`` unless the message starts with one). The run does not start
    while a validator reports a problem, or raises.

    :param schema: the collector: ``schema.add_validator(section, fn)`` runs
        ``fn(value, location) -> list[str]`` on every occurrence of ``section`` (a
        top-level name, or ``"providers.NAME"`` for one provider's options; an unknown
        top-level name is declared as a new section); ``schema.add_section(name)``
        declares a section without a validator.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def pysb_dns_resolve(hostnames: Sequence[str]) -> Mapping[str, Sequence[str]] | None:
    """Resolve the host names of network rules on the host, before launch.

    The addresses become the policy's pins: the sandbox can reach exactly these for the
    name (the guards and the OS filters judge by address; providers with their own
    ``/etc`` write them into ``plan.hosts_file``).

    :param hostnames: every host name the profile's network rules use, each once.
    :return: each name mapped to its addresses (an empty sequence when a name does not
        resolve), or None to let the next implementation answer. The first non-None
        result wins; the built-in resolver (``/etc/hosts``, then dnspython) runs last.

    .. versionadded:: 0.1
    """


@hookspec
def pysb_host_services(
    policy: Policy, emit: Callable[[Event], None]
) -> Sequence[HostService] | None:
    """Name the services on the host's loopback that this plugin runs for the sandbox.

    Why a hook: a host-side service (``pysb-proxy``'s egress proxy) listens on a port that
    is known only at run time, and the sandbox must reach exactly that port through every
    layer -- the Python guard, the kernel's packet filter, a namespace provider's
    forwarding to the host's loopback. Each service returned becomes the rule ``allow tcp
    127.0.0.1 PORT out`` of the policy, with the service's name as its source, so that
    ``pysb check`` lists it and every provider enforces it like a rule the user wrote.
    Bind the listening socket here; start serving in ``pysb_contribute`` or later.

    :param policy: the policy as loaded (host names not pinned yet).
    :param emit: hands an :class:`~pysb_core.events.Event` the service decided (a request
        refused, or one a learning run records) to pysb: ``--events`` and the other
        ``pysb_event`` sinks receive it, and a ``learn`` event reaches ``pysb_learned``.
        Callable from any thread, for as long as the run lasts.
    :return: the services, or None.

    .. versionadded:: 0.2
    """


@hookspec
def pysb_configure(policy: Policy) -> None:
    """Receive the final policy, once, before anything is checked or launched.

    Called after every plugin, the provider instance included, is registered, and after
    host names are pinned: ``policy`` is what the sandbox will enforce. It is frozen;
    keep what you need from it.

    :param policy: the compiled policy (exposures, network rules with ``policy.pins``,
        limits, provider options, the ``extra`` sections families declared).

    Not historic: no plugin is registered after it is called.

    .. versionadded:: 0.1
    """


@hookspec
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """Add to the report of who enforces what (``pysb check``, and the fail-closed decision).

    The core already lists every rule of the policy, with ``python`` when the rule's guard
    family is installed and active and ``os`` when the provider's enforced capabilities
    cover it. A family or provider adds notes (``report.note(text)``) or rules of its own
    (``report.add(rule_text, source, layers, family)``); an empty ``layers`` means nobody
    enforces the rule, and ``pysb run`` then refuses to start (exit 125).

    :param policy: the final policy.
    :param provider: the provider the run would use; None when ``pysb check`` could not
        load it (then only the Python layer can be credited). Under the provider ``auto``
        the hook is first called once per candidate, before ``pysb_configure`` and into a
        report of its own, to choose one (:mod:`pysb_core.launch.autoprovider`); then once more,
        as usual, for the one chosen.
    :param report: the report being built.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------------------


@hookspec
def pysb_contribute(policy: Policy, plan: LaunchPlan) -> None:
    """Add what this family or provider needs to the launch plan.

    Exposures (``plan.exposures``), environment (``plan.env``), file descriptors the
    sandboxed interpreter must inherit (``plan.pass_fds``), cleanups
    (``plan.add_cleanup(fn)``) and calls the bootstrap makes inside the sandbox before
    the program (``plan.add_child_setup(ChildSetup(module, function, args))``). Runs
    before the provider compiles the plan (``Provider.prepare``).

    :param policy: the final policy.
    :param plan: the launch plan, still open for changes.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def pysb_launch(plan: LaunchPlan, provider: Provider) -> subprocess.Popen[bytes] | None:
    """Start the sandbox for ``plan`` and return the host process pysb waits for.

    The built-in implementation (``trylast``) returns ``provider.launch(plan,
    **plan.popen_kwargs)``. Implement with ``wrapper=True`` to set up and tear down around
    the launch, or return a process yourself to replace it (the first non-None result
    wins).

    :param plan: the complete launch plan (its payload is sealed by ``provider.launch``).
    :param provider: the loaded provider.
    :return: the host process (its exit status is the run's, ``128+N`` for a signal),
        or None to let the next implementation launch.

    .. versionadded:: 0.1
    """


# ---------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------


@hookspec
def pysb_event(event: Event) -> None:
    """Receive one denial or learned access, as the sandbox reports it.

    Called from pysb's report-reader thread while the program runs (the ``--events``
    JSONL writer is one implementation); keep it quick. An exception is reported as a
    warning and does not stop the run.

    :param event: what happened: ``layer`` (``python`` or ``os``), ``guard``, ``action``
        (``deny`` or ``learn``), ``target``, ``detail``, ``suggested_rule``, ``time``,
        ``pid`` and family-specific ``data``.

    .. versionadded:: 0.1
    """


@hookspec
def pysb_learned(records: Sequence[Event], profile: LearnedProfile) -> None:
    """Render this family's learned rules into ``profile`` at the end of a learning run.

    :param records: every ``learn`` event of the run, in order (each family picks its
        own by ``event.guard``).
    :param profile: the rules to write: ``profile.add(section, key, value, comment,
        group=...)`` adds one (a duplicate is ignored); ``profile.path_form(path)`` gives
        a path's portable spelling (``./``, ``~/``, ``${VIRTUAL_ENV}``).

    Each implementation renders into a profile of its own, merged when it returns: one
    that raises (a value that is not a string...) loses its own rules only; pysb writes
    the others', names the plugin, and the learning run exits 125. A place declared
    ``SCALAR`` in the schema is written as one value.

    .. versionadded:: 0.1
    """
