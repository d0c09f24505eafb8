"""``pysb trust``: record, list and revoke the user's trust in discovered profiles.

The model and the store are :mod:`pysb_core.profile.trust`'s; this module only talks to the user.
"""

from __future__ import annotations

import os
import sys

from pysb_core.errors import ExitCode, ProfileError, SandboxError
from pysb_core.profile.loader import display_path

DEFAULT = ".pysb.yaml"


def _error(lines: list[str]) -> int:
    for line in lines:
        print(line if _located(line) else f"pysb: error: {line}", file=sys.stderr)
    return ExitCode.SETUP_FAILED


def _located(line: str) -> bool:
    head = line.split(": ", 1)[0]
    return ":" in head and head.rsplit(":", 1)[1].isdigit()


def run_trust(
    profile: str | None, *, list_: bool = False, revoke: bool = False, verbosity: int = 0
) -> int:
    """``--quiet`` (verbosity < 0): nothing on success; ``--verbose``: each file's digest."""
    from pysb_core.profile import trust

    environ = dict(os.environ)
    cwd = os.getcwd()
    if list_:
        if profile is not None or revoke:
            return _error(["--list takes no PROFILE and no --revoke"])
        for key, files in trust.records(environ):
            others = sorted(p for p in files if p != os.path.realpath(key))
            extra = f" (with {', '.join(display_path(p, cwd) for p in others)})" if others else ""
            print(f"{display_path(key, cwd)}{extra}")
        return 0
    path = os.path.abspath(os.path.expanduser(profile or DEFAULT))
    shown = display_path(path, cwd)
    if revoke:
        if trust.revoke(path, environ):
            if verbosity >= 0:
                print(f"pysb: {shown} is no longer trusted")
            return 0
        return _error([f"{shown} was not trusted"])
    if not os.path.isfile(path):
        return _error([f"{shown}: no such profile"])
    try:
        files = trust.trust_profile(path, cwd=cwd, environ=environ)
    except ProfileError as exc:
        return _error([*exc.errors, f"{shown} was not trusted: fix it first"])
    except SandboxError as exc:
        return _error(str(exc).splitlines())
    included = sorted(display_path(p, cwd) for p in files if p != os.path.realpath(path))
    with_ = f", with {', '.join(included)}" if included else ""
    if verbosity >= 0:
        print(f"pysb: trusted {shown}{with_}, as they are now")
    if verbosity > 0:
        for real, digest in sorted(files.items()):
            print(f"  {digest}  {display_path(real, cwd)}")
    return 0
