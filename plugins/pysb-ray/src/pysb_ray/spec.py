"""The profile as it travels with a task: its content, checked once on the driver.

Nodes share no file system, so a task carries the profile's text, not its path. The
driver validates it when ``.remote()`` is called (a ``ProfileError`` listing every problem
as ``FILE:LINE: message``), so a bad profile never reaches a node. On the node the text
is written to a private file; ``${PROFILE_DIR}`` keeps meaning the directory of the
driver's file (the same path on every node, as with one image for the whole cluster), and
relative paths keep meaning the driver's working directory.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass

from pysb_core import ProfileError, check_profile

PROFILE_DIR_VARIABLE = "${PROFILE_DIR}"


@dataclass(frozen=True)
class ProfileSpec:
    """One validated profile, picklable, small: what every task and pool actor carries."""

    text: str
    origin: str  #: absolute path of the file on the driver (messages, ``${PROFILE_DIR}``)
    cwd: str  #: the driver's working directory (relative paths of the profile)
    provider: str | None  #: overrides the profile's ``provider`` (None: the profile's own)

    @property
    def key(self) -> tuple[str, str | None]:
        """What a warm sandbox is shared by: the content (not the path) and the provider."""
        digest = hashlib.sha256(self.text.encode()).hexdigest()
        return digest, self.provider

    @property
    def name(self) -> str:
        return os.path.basename(self.origin)

    def node_text(self) -> str:
        """The text to write on a node: ``${PROFILE_DIR}`` bound to the driver's directory.

        The profile language has no escape for ``$``, so every ``${PROFILE_DIR}`` in the
        text is a use of the variable; the replacement keeps every line where it was, so
        messages on the node point at the same lines as on the driver.
        """
        return self.text.replace(PROFILE_DIR_VARIABLE, os.path.dirname(self.origin))


_cache: dict[tuple[str, int, int, str | None, str], ProfileSpec] = {}
_cache_lock = threading.Lock()


def load_spec(
    profile: str | os.PathLike[str] | None, provider: str | None, *, near: str | None = None
) -> ProfileSpec:
    """Read and validate ``profile`` on the driver (cached while the file is unchanged).

    ``profile=None`` means ``$PYSB_PROFILE``, else the ``.pysb.yaml`` next to ``near`` (the
    module that defines the function), as partial mode finds it. No profile at all is a
    ``ProfileError``: a task never runs with rules nobody wrote.
    """
    path = _choose(profile, near)
    cwd = os.getcwd()
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ProfileError(
            [
                f"{path}: the profile cannot be read ({exc.strerror or exc}); pysb-ray sends the "
                "profile's content with each task, so it must exist on the driver"
            ]
        ) from None
    key = (path, st.st_mtime_ns, st.st_size, provider, cwd)
    with _cache_lock:
        found = _cache.get(key)
    if found is not None:
        return found
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError([f"{path}: the profile cannot be read: {exc}"]) from None
    _validate(path, text, provider, cwd)
    spec = ProfileSpec(text=text, origin=path, cwd=cwd, provider=provider)
    with _cache_lock:
        _cache[key] = spec
    return spec


def _choose(profile: str | os.PathLike[str] | None, near: str | None) -> str:
    if profile is not None:
        return os.path.abspath(os.fspath(profile))
    named = os.environ.get("PYSB_PROFILE")
    if named:
        return os.path.abspath(named)
    if near:
        candidate = os.path.join(os.path.dirname(os.path.abspath(near)), ".pysb.yaml")
        if os.path.isfile(candidate):
            return candidate
    raise ProfileError(
        [
            "no profile for this sandboxed Ray function: pass profile= to "
            "@pysb_ray.sandboxed (or SandboxPool), set $PYSB_PROFILE, or put a .pysb.yaml "
            "next to the module that defines the function (write one with a local learning "
            "run: pysb_core.sandboxes(learn='tools.pysb.yaml'))"
        ]
    )


def _validate(path: str, text: str, provider: str | None, cwd: str) -> None:
    """Every problem of the profile as ``FILE:LINE: message`` (``ProfileError``), here.

    The schema is the one a run uses (the installed plugins add their keys). The provider
    is not probed: the driver need not be able to run it, the nodes must.
    """
    policy = check_profile(path, cwd=cwd, provider=provider)
    _refuse_includes(path, text)
    if policy.learn:
        raise ProfileError(
            [
                f"{path}:{_line_of('learn', text)}: learn: a cluster never runs learning runs "
                "(they run unsandboxed, and the rules would be written on a node); learn "
                "locally with pysb_core.sandboxes(learn=...) and send the reviewed profile"
            ]
        )


def _line_of(key: str, text: str) -> int:
    """The line of the top-level ``key:`` of the profile (1 when it is not found)."""
    lines = text.splitlines()
    return next((n for n, line in enumerate(lines, 1) if line.startswith(f"{key}:")), 1)


def _refuse_includes(path: str, text: str) -> None:
    """Only one file travels: an ``include`` would name a file the nodes do not have."""
    import yaml

    tree = yaml.safe_load(text)
    if not (isinstance(tree, dict) and tree.get("include")):
        return
    raise ProfileError(
        [
            f"{path}:{_line_of('include', text)}: include: pysb-ray sends one profile file "
            "with each task and the nodes do not have the included ones; copy their rules "
            "into this file"
        ]
    )
