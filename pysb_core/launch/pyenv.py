"""What the sandboxed interpreter itself needs to read: the implicit exposures.

SPEC §4: nothing is readable but the interpreter and its standard library, the installed
packages it needs, CA certificates and what the profile exposes. The interpreter is found
by walking ``sys.executable``'s symlink chain link by link (uv and pyenv venvs point
through several links), and every spelling on the chain is kept so that rules cover both
the link and its target.
"""

from __future__ import annotations

import os
import sys

from pysb_core._startup.memo import cache
from pysb_core.linux import read_file
from pysb_core.linux.paths import is_within
from pysb_core.policy import Exposure

CA_DIRS = (
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/usr/share/ca-certificates",
    "/usr/share/pki",
)


def interpreter_chain(executable: str) -> list[str]:
    """Every path on the symlink chain from ``executable`` to the real binary, in order."""
    chain: list[str] = []
    path = os.path.abspath(executable)
    for _ in range(40):  # as the kernel does, refuse absurd chains
        chain.append(path)
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return chain


#: ``open`` flags of :func:`canonical`: a path handle, no access to the content.
_O_PATH = getattr(os, "O_PATH", 0) | os.O_CLOEXEC


def canonical(path: str, *, directory: bool = False) -> str | None:
    """``os.path.realpath(path)`` of an existing ``path`` (a directory, with
    ``directory``), None when there is none.

    The kernel resolves the path in one ``open(O_PATH)`` and names what it reached
    (``/proc/self/fd/N``): three system calls, where ``realpath`` walks the path in
    Python with an ``lstat`` per component (~18 against ~6 us, some 40 paths per run).
    Any doubt -- no ``O_PATH``, no ``/proc``, a name the kernel marks (deleted, or not
    below this root) -- and ``os.path.realpath`` answers, as before.
    """
    if not path:
        return None
    if _O_PATH == os.O_CLOEXEC:  # pragma: no cover - not Linux
        ok = os.path.isdir(path) if directory else os.path.exists(path)
        return os.path.realpath(path) if ok else None
    try:
        fd = os.open(path, _O_PATH | (os.O_DIRECTORY if directory else 0))
    except (OSError, ValueError):
        return None
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = ""
    finally:
        os.close(fd)
    if real.startswith("/") and not real.endswith(" (deleted)"):
        return real
    return os.path.realpath(path)  # pragma: no cover - see the docstring


def _existing(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        real = canonical(p)
        if real is not None and real not in out:
            out.append(real)
    return out


@cache
def python_paths(executable: str = sys.executable) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(files, directories)`` the interpreter needs, as canonical paths.

    Files: the links and binary of the chain, ``pyvenv.cfg``, a shared ``libpython``.
    Directories: the standard library (with ``lib-dynload``), the site-packages of the
    environment, and sys.path entries added by ``.pth`` files (editable installs).
    """
    files = _existing([*interpreter_chain(executable), os.path.join(sys.prefix, "pyvenv.cfg")])
    # Links themselves (not only their targets) must stay reachable by name.
    files += [p for p in interpreter_chain(executable) if p not in files]
    libpython, standard = _installation()
    files += [p for p in _existing(libpython) if p not in files]
    dirs = _existing(standard)
    for real in import_roots():
        if any(is_within(real, d) for d in dirs):
            continue
        dirs.extend(p for p in _importable_parts(real) if p not in dirs)
    # pysb_core itself (the bootstrap, the partial-mode worker, the public API that sandboxed
    # modules import), even when the working directory is a development checkout of it.
    core = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    if not any(is_within(core, d) for d in dirs):
        dirs.append(core)
    return tuple(files), tuple(dirs)


def _installation() -> tuple[list[str], list[str]]:
    """``(libpython files, directories)`` of the installation: a shared ``libpython``,
    the standard library with ``lib-dynload``, the environment's site-packages.

    When ``site`` ran (the normal case) they come from the interpreter itself, without
    ``sysconfig`` (with ``_sysconfigdata``: about 1 ms of every ``pysb run``): the
    standard library is where ``os`` was found (``sys._stdlib_dir``), the site-packages are
    ``site.getsitepackages()`` (for every prefix, ``sysconfig``'s purelib and platlib
    included), and a shared ``libpython`` is the one the kernel mapped
    (:func:`mapped_libpython`: the file the same interpreter loads in the sandbox, where a
    relocated build finds it). Without ``site`` (``-S``), ``sysconfig`` says.
    """
    site = sys.modules.get("site")
    getsitepackages = getattr(site, "getsitepackages", None)
    stdlib = getattr(sys, "_stdlib_dir", None)  # where os.py was found (3.11+)
    if getsitepackages is not None and not sys.flags.no_site and stdlib:
        return mapped_libpython(), [stdlib, os.path.join(stdlib, "lib-dynload"), *getsitepackages()]
    import sysconfig

    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    libpython = []
    if ldlib.endswith(".so") or ".so." in ldlib:
        libpython = [os.path.join(libdir, ldlib), *mapped_libpython()]
    paths = sysconfig.get_paths()
    return libpython, [
        paths.get("stdlib", ""),
        paths.get("platstdlib", ""),
        os.path.join(paths.get("platstdlib", ""), "lib-dynload"),
        paths.get("purelib", ""),
        paths.get("platlib", ""),
    ]


def mapped_libpython() -> list[str]:
    """The shared ``libpython`` this process runs, as the kernel mapped it.

    ``LIBDIR`` is where the build was *configured* to live: a relocated build (a copy of a
    pyenv build with its RUNPATH set to ``$ORIGIN/../lib``, python-build-standalone's
    builds that uv installs) loads it from elsewhere, and the sandbox must show that file.
    """
    out: list[str] = []
    # the bytes, split here: a text file read line by line costs more than the read
    maps = read_file("/proc/self/maps")
    if maps is None:
        return out
    for line in maps.split(b"\n"):
        if b"libpython" not in line:
            continue
        path = os.fsdecode(line.split(maxsplit=5)[-1])
        if os.path.basename(path).startswith("libpython") and path not in out:
            out.append(path)
    return out


def import_roots() -> list[str]:
    """This interpreter's ``sys.path`` directories, canonical, without the working directory
    and the launching script's: where the sandboxed interpreter (the same one) must find
    pysb and the plugins even when they come from ``PYTHONPATH``, which it does not inherit.

    Exposure directories are not import roots: a package directory such as
    ``.../pysb_core`` on ``sys.path`` would make its modules importable under bare names.
    The answer is kept for the same ``sys.path``, script and working directory (a run asks
    twice: for the exposures and for the sandbox's own ``sys.path``).
    """
    argv0 = sys.argv[0] if sys.argv else ""
    return list(_import_roots(tuple(sys.path), argv0, os.getcwd()))


@cache
def _import_roots(path: tuple[str, ...], argv0: str, cwd: str) -> tuple[str, ...]:
    script_dir = os.path.dirname(os.path.realpath(argv0)) if argv0 else ""
    cwd = os.path.realpath(cwd)
    roots: list[str] = []
    for entry in path:
        real = canonical(entry, directory=True)
        if real is not None and real not in (cwd, script_dir) and real not in roots:
            roots.append(real)
    return tuple(roots)


def _importable_parts(entry: str) -> list[str]:
    """What of a sys.path entry outside site-packages the interpreter needs to read.

    An editable install of a project whose packages sit at its root (pysb-core itself, in a
    development checkout) puts the whole project directory on sys.path; exposing it would
    expose the project's tests, secrets and VCS data too. Such a root (it holds a
    ``pyproject.toml`` or ``setup.py``) contributes only its top-level packages.
    """
    if not any(os.path.exists(os.path.join(entry, f)) for f in ("pyproject.toml", "setup.py")):
        return [entry]
    parts = []
    for name in sorted(os.listdir(entry)):
        full = os.path.join(entry, name)
        if name.isidentifier() and os.path.isfile(os.path.join(full, "__init__.py")):
            parts.append(full)
    return parts


def implicit_exposures(executable: str = sys.executable) -> list[Exposure]:
    """Read-only exposures every sandboxed run gets (labelled ``<python>`` / ``<ca>``)."""
    files, dirs = python_paths(executable)
    out = [Exposure(p, p, False, "<python>", True) for p in (*files, *dirs)]
    out += [Exposure(p, p, False, "<ca-certificates>", True) for p in _existing(list(CA_DIRS))]
    return out
