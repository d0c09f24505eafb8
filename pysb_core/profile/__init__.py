"""The profile subsystem: ``.pysb.yaml`` files in, a frozen :class:`~pysb_core.policy.Policy` out.

One job per module:

- :mod:`.variables` -- ``${NAME}`` / ``${NAME:-default}`` / ``${PROFILE_DIR}`` expansion;
- :mod:`.loader` -- YAML (with line numbers) and includes; :mod:`.cache` keeps parsed
  files so that a warm start does not import yaml;
- :mod:`.schema` -- the sections and the validators plugins attach to them;
- :mod:`.merge` -- shape checks and the merge of all files (lists concatenate, scalars
  must agree);
- :mod:`.compile` -- meaning (paths, rules, limits, environment) and the lock;
- :mod:`.writer` -- merges what a learning run learned into a profile, text-preserving.

The pipeline calls :func:`discover_profile` then :func:`load_policy`; plugins see only
:class:`~pysb_core.profile.schema.ProfileSchema` (``pysb_add_profile_keys``) and
:class:`~pysb_core.learning.LearnedProfile` (``pysb_learned``).
"""

from __future__ import annotations

import os

from pysb_core.profile.compile import load_policy
from pysb_core.profile.schema import Located, ProfileSchema
from pysb_core.records import Record, field, mutable_record

__all__ = ["CliRules", "Located", "ProfileSchema", "discover_profile", "load_policy"]

PROFILE_NAME = ".pysb.yaml"


@mutable_record
class CliRules(Record):
    """Rules given on the command line (or to the API) for one run; they add to the profile.

    ``env`` holds ``NAME=VALUE`` strings (a bare ``NAME`` forwards the host's value).
    All are refused when the profile holds ``learn: false``.
    """

    expose_ro: list[str] = field(default_factory=list)
    expose_rw: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    net: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)
    allow_api: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(
            (
                self.expose_ro,
                self.expose_rw,
                self.ignore,
                self.net,
                self.imports,
                self.allow_api,
                self.env,
            )
        )


def _module_dir(module: str, cwd: str) -> str | None:
    """The directory holding MODULE's file, found *without importing anything*.

    ``importlib.util.find_spec("pkg.mod")`` would import ``pkg`` -- running the program's
    own code on the host, outside the sandbox. The path finder is asked for each
    component instead, as ``-m`` would search (the working directory first).
    """
    import sys
    from importlib.machinery import PathFinder

    path: list[str] | None = [cwd, *[p for p in sys.path if p]]
    spec = None
    for part in module.split("."):
        if not part.isidentifier():
            return None
        try:
            spec = PathFinder.find_spec(part, path)
        except (ImportError, ValueError, OSError):
            return None
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package: its own directory
        locations = list(spec.submodule_search_locations)
        return locations[0] if locations else None
    if spec.origin and os.path.isabs(spec.origin):
        return os.path.dirname(spec.origin)
    return None


def discover_profile(script: str | None, module: str | None, cwd: str) -> str | None:
    """Find the profile of a run (SPEC §3): next to SCRIPT, in MODULE's package, else cwd.

    Returns an absolute path, or None when no ``.pysb.yaml`` exists in those places.
    """
    candidates: list[str] = []
    if script and script != "-":
        path = os.path.join(cwd, os.path.expanduser(script))
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(path)), PROFILE_NAME))
    elif module:
        directory = _module_dir(module, cwd)
        if directory:
            candidates.append(os.path.join(directory, PROFILE_NAME))
    candidates.append(os.path.join(os.path.abspath(cwd), PROFILE_NAME))
    for candidate in candidates:
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None
