"""Which code is the program's, and which is the interpreter's or a library's.

Some decisions depend on who asks: ``import re`` written in the program is judged, while
the same import made by ``json`` (which the program was allowed to import) is not; an
``eval`` written in the program needs the ``dynamic-code`` right, while the ``eval`` that
``dataclasses`` or ``typing`` run internally does not. "Library" means the standard library,
installed packages (site-packages / dist-packages), frozen modules and pysb itself; the
rest -- the script, its own modules, ``<string>`` / ``<stdin>`` code -- is the program.
"""

from __future__ import annotations

import os
import sys


def library_prefixes() -> tuple[str, ...]:
    """Path prefixes (with a trailing ``/``) of code that is not the program's."""
    roots: list[str] = []

    def add(path: str | None) -> None:
        if not path:
            return
        for p in {path, os.path.realpath(path)}:
            p = p.rstrip("/") + "/"
            if p != "/" and p not in roots:
                roots.append(p)

    add(os.path.dirname(os.__file__))  # the standard library (lib-dynload is below it)
    for entry in sys.path:
        if entry and ("site-packages" in entry or "dist-packages" in entry):
            add(entry)
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0].startswith("pysb_") and "." not in name:
            path = getattr(module, "__file__", None)
            if path:
                add(os.path.dirname(path))
    return tuple(roots)


def is_library_file(filename: str, prefixes: tuple[str, ...]) -> bool:
    """True for library code (see the module docstring), False for the program's."""
    if filename.startswith("<"):
        return filename.startswith(("<frozen ", "<pysb-"))
    return filename.startswith(prefixes)
