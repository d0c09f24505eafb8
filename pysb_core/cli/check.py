"""``pysb check``: validate a profile, then show who enforces each rule.

Uses the same decision as ``pysb run`` (``Session.create``) so the two never disagree.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Any

from pysb_core.errors import ExitCode, ProfileError, SandboxError


def _provider_notes(policy: Any) -> list[str]:
    from pysb_core.launch.drivers import first_party_distribution, provider_names

    installed = set(provider_names())
    notes = []
    for name in sorted(policy.provider_options):
        if name in installed:
            continue
        package = first_party_distribution(name)
        where = f" (pip install {package})" if package else ""
        notes.append(
            f"options for provider '{name}' are kept and ignored: it is not installed{where}"
        )
    return notes


def _source_key(source: str) -> tuple[int, str, int]:
    """Rules in profile order: file, then line; ``<cli>`` and implicit ones last."""
    path, _, line = source.rpartition(":")
    if line.isdigit():
        return (0, path, int(line))
    return (1, source, 0)


def run_check(
    profile: str | None,
    provider: str | None,
    no_python_guards: bool,
    as_json: bool,
    *,
    verbosity: int = 0,
) -> int:
    """Check the profile; ``verbosity`` -1 prints only errors and the verdict, 1 adds
    each rule's guard family."""
    from pysb_core.launch.autoprovider import ORDER
    from pysb_core.launch.pipeline import Program, Session, unenforced_messages
    from pysb_core.profile.discovery import ProfileNotFoundError

    errors: list[str] = []
    rules: list[dict[str, Any]] = []
    notes: list[str] = []
    details: list[str] = []
    provider_name = provider or os.environ.get("PYSB_PROVIDER") or ""
    #: How `auto` chose (None when the provider was named).
    auto: dict[str, Any] | None = None
    profile_path = None
    #: False: a found profile `pysb run` would refuse until trusted; None: nothing to trust.
    trusted: bool | None = None
    try:
        session = Session.create(
            profile=profile,
            provider=provider,
            python_guards=False if no_python_guards else None,
            stderr=None,
            enforce=False,
        )
    except ProfileNotFoundError as exc:
        named = ["--profile", profile] if profile else []
        errors = exc.with_hint(shlex.join(["pysb", "run", "--learn", *named]) + " SCRIPT").errors
    except ProfileError as exc:
        errors = list(exc.errors)
    except SandboxError as exc:
        errors = str(exc).splitlines()
    else:
        policy = session.policy
        provider_name = session.provider.name
        if session.auto_choice is not None:
            auto = {"order": list(ORDER), "skipped": session.auto_choice.skipped}
        profile_path = policy.profile_path
        report = session.report
        for r in sorted(report.rules, key=lambda r: _source_key(r.source)):
            rules.append(
                {"rule": r.rule, "source": r.source, "layers": list(r.layers), "family": r.family}
            )
        # The same words as `pysb run`'s refusal, with what the user can do about it.
        errors.extend(unenforced_messages(report.unenforced(), report))
        notes = [*report.notes, *_provider_notes(policy)]
        if session.discovered:
            from pysb_core.profile.trust import untrusted_reason

            why = untrusted_reason(policy, session.environ)
            trusted = why is None if policy.profile_path else None
            if why is not None:
                notes.append(f"{why}; `pysb run` refuses it until you trust it (pysb trust)")
        if policy.learn:
            notes.append("learn: this profile asks for a learning run (no sandbox)")
        try:
            plan = session.plan(Program("code", argv=["-c"], code="pass"))
        except SandboxError as exc:  # a plugin's failure: one paragraph, 125
            errors.extend(str(exc).splitlines())
        else:
            try:
                # What the launch will do, short of starting the program: its failures
                # here, with the rule's FILE:LINE, not at `pysb run` (issue 27).
                session.provider.preflight(plan)
            except SandboxError as exc:
                errors.extend(str(exc).splitlines())
            except Exception as exc:  # the provider's own bug
                errors.extend(str(session._failure(exc, "to check its launch")).splitlines())
            try:
                details = session.provider.describe(plan)
            except Exception as exc:  # the provider's own bug
                errors.extend(str(session._failure(exc, "to describe its launch")).splitlines())
            finally:
                session._close_plan_fds(plan, parent_ends_only=False)
                session._cleanup(plan)
    valid = not errors
    if as_json:
        print(
            json.dumps(
                {
                    "valid": valid,
                    "errors": errors,
                    "provider": provider_name,
                    "auto": auto,
                    "profile": profile_path,
                    "trusted": trusted,
                    "rules": rules,
                    "notes": notes,
                    "details": details,
                },
                indent=2,
            )
        )
    else:
        shown = f"{provider_name} (chosen by auto)" if auto is not None else provider_name
        _print_report(errors, rules, notes, details, shown, profile_path, verbosity)
    return 0 if valid else ExitCode.SETUP_FAILED


def _print_report(
    errors: list[str],
    rules: list[dict[str, Any]],
    notes: list[str],
    details: list[str],
    provider_name: str,
    profile_path: str | None,
    verbosity: int,
) -> None:
    from pysb_core.cli.output import paint

    err = sys.stderr
    valid = not errors
    for e in errors:
        print(e, file=err)
    if verbosity >= 0:
        if rules or profile_path:
            print(f"profile:  {profile_path or '(none)'}")
            print(f"provider: {provider_name}")
            width = max((len(r["rule"]) for r in rules), default=10)
            for row in rules:
                layers = ", ".join(row["layers"]) or paint("NONE", "red", bold=True)
                family = f"  ({row['family']})" if verbosity > 0 and row.get("family") else ""
                print(f"  {row['rule']:<{width}}  [{layers}]  {row['source']}{family}")
        for n in notes:
            print(f"note: {n}")
        for d in details:
            print(d)
    if valid:
        print(paint("valid", "green"))
    else:
        print(paint("invalid", "red", stream=err), file=err)
