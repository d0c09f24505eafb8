"""What a program the sandbox executes needs to start: for learning (docs/learning.md).

A learning run sees ``subprocess.run(["git", ...])`` as one exec of ``git``: the Python
guards never see what the kernel and the dynamic loader then open. Providers that confine
files (landlock, firejail) refuse the exec, or the loader's reads, unless the profile
exposes them. :func:`needed_files` answers, on the host, after the run:

- the executable, found on ``PATH`` like ``execvp`` does, with every symlink on the way;
- for a script, its ``#!`` interpreter (recursively);
- for an ELF binary, its ``PT_INTERP`` (the dynamic loader) and the shared libraries the
  loader resolves (``LOADER --list BINARY``: the loader's own answer, search paths,
  ``RUNPATH`` and ``ld.so.cache`` included, without running the program).

What the program then reads or writes itself (git's repository, ls's directory) stays
invisible to learning: native code and children that are not Python are not watched.
"""

from __future__ import annotations

import os
import struct
import subprocess

from pysb_core.linux.paths import is_within

#: What the dynamic loader and the C library read as programs start, and every provider
#: that confines files gives every sandbox (``pysb_core.linux.sysfiles``, Landlock's system
#: reads), or whose absence changes nothing (``locale.alias`` only maps alias names; without
#: ``localtime`` the time zone is UTC): the learning watch does not learn them, by the
#: name the program used (a read of ``ld.so.cache`` by every executed program would
#: otherwise expose the whole of ``/etc``).
STARTUP_FILES = frozenset(
    {"/etc/ld.so.cache", "/etc/ld.so.preload", "/etc/locale.alias", "/etc/localtime"}
)

#: ELF program header type of the interpreter path.
PT_INTERP = 3


def find_executable(name: str, path_env: str | None, cwd: str) -> str | None:
    """The file ``name`` executes, as ``execvp`` finds it; None when there is none."""
    if "/" in name:
        full = name if os.path.isabs(name) else os.path.join(cwd, name)
        return full if os.path.isfile(full) else None
    for directory in (path_env or os.defpath).split(os.pathsep):
        full = os.path.join(directory or cwd, name)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return full
    return None


def link_chain(path: str) -> list[str]:
    """``path`` and every link it goes through, each with its directories resolved."""
    chain: list[str] = []
    current = os.path.abspath(path)
    for _ in range(40):
        head, tail = os.path.split(current)
        current = os.path.join(os.path.realpath(head), tail)
        chain.append(current)
        if not os.path.islink(current):
            break
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    return chain


def elf_interpreter(path: str) -> str | None:
    """The ``PT_INTERP`` of an ELF file, or None (not ELF, static, unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF":
                return None
            is64, little = head[4] == 2, head[5] == 1
            end = "<" if little else ">"
            if is64:
                phoff, phentsize, phnum = (
                    struct.unpack(end + "Q", head[32:40])[0],
                    *struct.unpack(end + "HH", head[54:58]),
                )
            else:
                phoff, phentsize, phnum = (
                    struct.unpack(end + "I", head[28:32])[0],
                    *struct.unpack(end + "HH", head[42:46]),
                )
            for i in range(min(phnum, 256)):
                f.seek(phoff + i * phentsize)
                entry = f.read(phentsize)
                if struct.unpack(end + "I", entry[:4])[0] != PT_INTERP:
                    continue
                if is64:
                    offset, size = (
                        struct.unpack(end + "Q", entry[8:16])[0],
                        struct.unpack(end + "Q", entry[32:40])[0],
                    )
                else:
                    offset, size = (
                        struct.unpack(end + "I", entry[4:8])[0],
                        struct.unpack(end + "I", entry[16:20])[0],
                    )
                f.seek(offset)
                return f.read(min(size, 4096)).rstrip(b"\0").decode("utf-8", "replace")
    except (OSError, struct.error):
        return None
    return None


#: Where a system's dynamic loaders live: a ``PT_INTERP`` elsewhere is not run.
LOADER_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32")


def is_system_loader(path: str) -> bool:
    """Whether ``path`` (canonical) is a dynamic loader of the system (``ld-*.so*`` in a
    library directory), the only kind :func:`shared_libraries` runs: a binary names its
    own ``PT_INTERP``, and pysb runs none it does not trust."""
    name = os.path.basename(path)
    return (
        name.startswith("ld")
        and ".so" in name
        and any(is_within(path, d) for d in LOADER_DIRS)
        and os.path.isfile(path)
    )


def shared_libraries(binary: str, loader: str) -> list[str]:
    """The libraries ``loader`` maps for ``binary`` (``LOADER --list``; nothing is run);
    none when ``loader`` is not a system loader."""
    if not is_system_loader(loader):
        return []
    try:
        out = subprocess.run(
            [loader, "--list", binary],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            env={"LC_ALL": "C"},
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        words = line.split()
        if "=>" in words:
            after = words[words.index("=>") + 1 :]
            if after and after[0].startswith("/"):
                found.append(after[0])
        elif words and words[0].startswith("/"):
            found.append(words[0])
    return found


def _shebang(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split()
    return words[0].decode("utf-8", "replace") if words else None


def needed_files(executable: str, depth: int = 0) -> list[str]:
    """Every file the kernel and the loader open to start ``executable`` (absolute paths,
    links and their targets), in a stable order."""
    files: list[str] = []

    def add(paths: list[str]) -> None:
        for p in paths:
            if p not in files:
                files.append(p)

    chain = link_chain(executable)
    add(chain)
    real = chain[-1]
    interpreter = _shebang(real)
    if interpreter is not None and depth < 4:
        add(needed_files(interpreter, depth + 1))
        return files
    loader = elf_interpreter(real)
    if loader:
        add(link_chain(loader))
        for lib in shared_libraries(real, link_chain(loader)[-1]):
            add(link_chain(lib))
    return files
