"""Validate a profile as a run would, without running anything: :func:`check_profile`.

For code that hands a profile to a sandbox started elsewhere or later (a cluster's
driver sending it with each task, a service checking an uploaded profile, a test): the
problems surface here, all at once, with ``FILE:LINE`` -- not in a worker, one at a time.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # no typing at run time (imported on the host only, on demand)
if TYPE_CHECKING:
    from collections.abc import Mapping

    from pysb_core.policy import Policy

__all__ = ["check_profile"]


def check_profile(
    profile: str | os.PathLike[str],
    *,
    provider: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Policy:
    """Load and validate ``profile`` (with its includes) and return the policy it compiles to.

    Every problem of every file is raised together as one
    :class:`~pysb_core.errors.ProfileError` whose ``errors`` are ``FILE:LINE: message``
    lines, under the schema ``pysb run`` uses: pysb's own sections plus the ones the
    installed guard families add (``pysb_add_profile_keys``). A profile that does not exist
    is a ``ProfileError`` too.

    ``provider`` overrides the profile's ``provider`` (as ``--provider`` does), ``cwd``
    (default: the working directory) anchors relative paths, ``environ`` (default:
    ``os.environ``) expands ``${VARIABLES}``. The provider is neither loaded nor probed
    (the caller may validate on a machine that will not run it), the profile's trust is not
    consulted (the caller names the file), and nothing is written or started.
    """
    from pysb_core.launch.plugins import Hooks, get_plugin_manager
    from pysb_core.profile import load_policy
    from pysb_core.profile.discovery import NAMED, ProfileChoice
    from pysb_core.profile.loader import expand_user
    from pysb_core.profile.schema import ProfileSchema

    environ = dict(os.environ if environ is None else environ)
    where = os.path.realpath(os.fspath(cwd) if cwd is not None else os.getcwd())
    path = os.path.normpath(os.path.join(where, expand_user(os.fspath(profile), environ)))
    ProfileChoice(path, NAMED).require(
        learning=False, learn_hint="pysb_core.sandboxes(learn=PATH) or pysb run --learn", cwd=where
    )
    pm, _ = get_plugin_manager(light=True)
    schema = ProfileSchema()
    Hooks(pm).add_profile_keys(schema)
    return load_policy(path, cwd=where, environ=environ, provider=provider, schema=schema)
