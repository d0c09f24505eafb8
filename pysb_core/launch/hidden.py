"""Find the existing paths that ``ignore`` globs hide, for providers that mask them.

A relative glob (``.env``, ``*.pem``) matches any path component below an exposure; an
absolute one matches whole paths. The walk is bounded: a provider cannot mask what it has
not found, so an exposure too large to walk is an error rather than a silent gap.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable

from pysb_core.errors import SandboxError
from pysb_core.policy import Exposure, IgnoreRule

MAX_ENTRIES = 200_000


def _matches(path: str, name: str, patterns: list[str]) -> bool:
    for pat in patterns:
        if pat.startswith("/"):
            if fnmatch.fnmatchcase(path, pat):
                return True
        elif "/" in pat:
            if fnmatch.fnmatchcase(path, "*/" + pat.lstrip("./")):
                return True
        elif fnmatch.fnmatchcase(name, pat):
            return True
    return False


def hidden_paths(exposures: Iterable[Exposure], ignore: Iterable[IgnoreRule]) -> list[str]:
    """Existing canonical paths below the profile's exposures that ``ignore`` hides."""
    patterns = [r.pattern.rstrip("/") for r in ignore]
    found: list[str] = []
    seen = 0
    for exp in exposures:
        if exp.implicit or not os.path.isdir(exp.path):
            continue
        for root, dirs, files in os.walk(exp.path):
            seen += len(dirs) + len(files)
            if seen > MAX_ENTRIES:
                raise SandboxError(
                    f"{exp.source}: exposure '{exp.path}' has more than {MAX_ENTRIES} entries; "
                    "too many to find the paths 'ignore' must hide. Expose a narrower directory."
                )
            for name in list(dirs):
                full = os.path.join(root, name)
                if _matches(full, name, patterns):
                    found.append(full)
                    dirs.remove(name)  # hidden as a whole
            for name in files:
                full = os.path.join(root, name)
                if _matches(full, name, patterns):
                    found.append(full)
    return sorted(set(found))
