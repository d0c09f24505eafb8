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

The pipeline calls :func:`choose_profile` (:mod:`.discovery`) then :func:`load_policy`;
plugins see only
:class:`~pysb_core.profile.schema.ProfileSchema` (``pysb_add_profile_keys``) and
:class:`~pysb_core.profile.learning.LearnedProfile` (``pysb_learned``).
"""

from __future__ import annotations

from pysb_core._startup.records import Record, field, mutable_record
from pysb_core.profile.compile import load_policy
from pysb_core.profile.discovery import (
    PROFILE_NAME,
    ProfileChoice,
    choose_profile,
    discover_profile,
)
from pysb_core.profile.schema import Located, ProfileSchema

__all__ = [
    "PROFILE_NAME",
    "CliRules",
    "Located",
    "ProfileChoice",
    "ProfileSchema",
    "choose_profile",
    "discover_profile",
    "load_policy",
]


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
