"""Which profile a run uses, and the refusal when there is none (SPEC §1, §3).

:func:`choose_profile` is the one place that decides: a profile named by ``--profile`` /
the API, else ``PYSB_PROFILE``, else ``.pysb.yaml`` next to SCRIPT or in MODULE's
package, else ``./.pysb.yaml``. A run never falls back to running unconfined: when the
named file does not exist, or nothing was found, :meth:`ProfileChoice.require` raises
:class:`ProfileNotFoundError` -- unless the caller asked for a learning run, which creates
the profile. No file is read here (the loader does that) and none is ever written.
"""

from __future__ import annotations

import os

from pysb_core._startup.records import Record, record
from pysb_core.errors import ProfileError

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from collections.abc import Mapping

PROFILE_NAME = ".pysb.yaml"

#: How a profile was chosen, as the user would name the source.
NAMED = "--profile"
FROM_ENV = "PYSB_PROFILE"
DISCOVERED = "discovered"


class ProfileNotFoundError(ProfileError):
    """No profile to enforce: the run must not start (exit 125), nothing is written.

    ``errors`` holds the problem, then how to start a learning run (``learn_hint``; None
    when learning cannot help: the path names a directory, a FIFO, a device);
    :meth:`with_hint` rewrites both in the words of another caller (the CLI): how it starts
    a learning run, and how it names a profile (``{named_by}`` in ``problem``).
    """

    def __init__(self, problem: str, learn_hint: str | None, named_by: str = "profile=") -> None:
        self.problem = problem
        self.learn_hint = learn_hint
        self.named_by = named_by
        lines = [problem.replace("{named_by}", named_by)]
        if learn_hint is not None:
            lines.append(
                "to record a profile, start a learning run "
                f"(the program then runs WITHOUT a sandbox): {learn_hint}"
            )
        super().__init__(lines)

    def with_hint(self, learn_hint: str, named_by: str = "--profile") -> ProfileNotFoundError:
        return ProfileNotFoundError(
            self.problem, learn_hint if self.learn_hint is not None else None, named_by
        )


@record
class ProfileChoice(Record):
    """The profile a run will use.

    ``path`` is absolute (None when discovery found nothing); ``origin`` is ``--profile``
    (or the API's ``profile=``), ``PYSB_PROFILE`` or ``discovered``; ``searched`` lists
    the places discovery looked.
    """

    path: str | None
    origin: str
    searched: tuple[str, ...] = ()

    @property
    def exists(self) -> bool:
        return self.path is not None and os.path.isfile(self.path)

    def require(
        self, *, learning: bool, learn_hint: str, cwd: str, named_by: str = "profile="
    ) -> None:
        """Refuse (:class:`ProfileNotFoundError`) a run that has no profile to enforce.

        ``learning``: the caller asked for a learning run (it creates the profile).
        ``learn_hint``: how this caller starts a learning run (a command, an argument).
        ``named_by``: how this caller names a profile (the API's ``profile=``).
        """
        if learning and not self._not_a_file():
            return
        if self.exists:
            return
        from pysb_core.profile.loader import display_path

        hint: str | None = learn_hint
        if self.path is None:
            places = " or ".join(display_path(p, cwd) for p in self.searched) or PROFILE_NAME
            problem = f"no profile found (looked for {places}); pysb runs nothing unconfined"
        else:
            shown = display_path(self.path, cwd)
            source = "{named_by}" if self.origin == NAMED else self.origin
            kind = self._not_a_file()
            what = f"is {kind}, not a profile file" if kind else "does not exist"
            problem = f"profile {shown} {what} (named by {source}); the program was not started"
            if kind:
                hint = None  # a learning run could not write it either
            similar = _similar_profile(self.path)
            if similar:
                problem += f" (did you mean {display_path(similar, cwd)}?)"
        raise ProfileNotFoundError(problem, hint, named_by)

    def _not_a_file(self) -> str | None:
        """What the path names when it exists but is no regular file ("a directory")."""
        import stat

        if self.path is None:
            return None
        try:
            mode = os.stat(self.path).st_mode
        except OSError:
            return None
        if stat.S_ISREG(mode):
            return None
        kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
        return next((k for test, k in kinds.items() if test(mode)), "a device")


def _similar_profile(path: str) -> str | None:
    """A profile file next to ``path`` whose name is close to it (a typo)."""
    import difflib

    directory, name = os.path.split(path)
    try:
        names = [
            n
            for n in os.listdir(directory or ".")
            if n.endswith((".yaml", ".yml")) and os.path.isfile(os.path.join(directory, n))
        ]
    except OSError:
        return None
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return os.path.join(directory, close[0]) if close else None


def choose_profile(
    named: str | None,
    *,
    script: str | None,
    module: str | None,
    cwd: str,
    environ: Mapping[str, str],
) -> ProfileChoice:
    """Decide which profile a run uses (SPEC §3), without reading it."""
    from pysb_core.profile.loader import expand_user

    if named is not None:
        path = os.path.normpath(os.path.join(cwd, expand_user(named, environ)))
        return ProfileChoice(path, NAMED)
    from_env = environ.get("PYSB_PROFILE")
    if from_env:
        path = os.path.normpath(os.path.join(cwd, expand_user(from_env, environ)))
        return ProfileChoice(path, FROM_ENV)
    candidates = profile_candidates(script, module, cwd)
    for candidate in candidates:
        if os.path.isfile(candidate):
            return ProfileChoice(os.path.normpath(candidate), DISCOVERED, tuple(candidates))
    return ProfileChoice(None, DISCOVERED, tuple(candidates))


def discover_profile(script: str | None, module: str | None, cwd: str) -> str | None:
    """Find the profile of a run (SPEC §3): next to SCRIPT, in MODULE's package, else cwd.

    Returns an absolute path, or None when no ``.pysb.yaml`` exists in those places.
    """
    for candidate in profile_candidates(script, module, cwd):
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None


def profile_candidates(script: str | None, module: str | None, cwd: str) -> list[str]:
    """The places a profile is looked for, in order (absolute, without duplicates)."""
    candidates: list[str] = []
    if script and script != "-":
        path = os.path.join(cwd, os.path.expanduser(script))
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(path)), PROFILE_NAME))
    elif module:
        directory = _module_dir(module, cwd)
        if directory:
            candidates.append(os.path.join(directory, PROFILE_NAME))
    candidates.append(os.path.join(os.path.abspath(cwd), PROFILE_NAME))
    out: list[str] = []
    for c in candidates:
        c = os.path.normpath(c)
        if c not in out:
            out.append(c)
    return out


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
