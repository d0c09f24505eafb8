"""Stack walks and stack dumps of the program pass over pysb's own frames.

A guarded call runs its face and its door below whatever the call itself runs: code
passed to the guarded ``exec``, a callback of a guarded function, and in another thread
anything blocked in one (a watchdog dumping every thread while the program waits in a
guarded call). ``f_back`` is not audited, so a walk up the stack meets the door, whose
code is not readable (``AttributeError``), and C code that prints frames shows the faces'
and doors' (``<pysb guard (importlib._bootstrap)>``, ``<pysb-door (importlib._bootstrap)>``).
In the sandbox these Python-level walkers are replaced by versions that leave pysb's frames
out, as CPython shows an unguarded call:

- ``traceback.walk_stack`` -- behind ``traceback.print_stack``, ``format_stack``,
  ``extract_stack``, ``StackSummary.extract`` and ``logging``'s ``stack_info``;
- ``inspect.getouterframes`` -- behind ``inspect.stack``;
- ``faulthandler.dump_traceback`` -- the explicit dump, in faulthandler's own format;
- ``warnings``' Python implementation's ``_is_internal_frame`` and ``_next_external_frame``
  (``warn``'s ``stacklevel``): they read every frame's code, a door's too. Like the C one
  they take the faces and doors for the import system's frames (their code file names say
  ``importlib._bootstrap``, see ``pysb_guards._seal.templates``' ``FACE_FILE``), and pass
  over them.

What stays C (``faulthandler.dump_traceback_later``, ``register``, ``enable``'s fatal
error dump) must work when the interpreter cannot run Python code (a held GIL, a crash),
so it is left as it is: docs/compat.md says what it shows.

A frame is pysb's when its code is refused (a door), is a face's (``FACE_FILE``), or
lies in pysb's plain code that can stand in a program's stack (the guards' package and
the child's bootstrap), and the start-up stub that calls the bootstrap (the outermost
``<string>``): the program's stack then ends at its ``<module>`` as under ``python``.

The replacements hold nothing of the guards' state: a program reading their globals finds
this module, whose functions no guard code calls. The patchers that put them in place
run under the import guard's sealed code, so they are sealed too (:func:`install`).
"""

from __future__ import annotations

import os
import sys

from pysb_guards._seal.audithook import own_dirs
from pysb_guards._seal.templates import DOOR_FILE, FACE_FILE

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

#: Code file names of the guards' faces and doors.
_OWN_NAMES = (FACE_FILE, DOOR_FILE)
#: faulthandler's limits (Python/traceback.c): frames per thread, threads, string length.
_MAX_FRAMES = 100
_MAX_THREADS = 100
_MAX_STRING = 500


#: The directories of pysb's plain code (the guards', the child's bootstrap): the same the
#: audit hook splices out of tracebacks.
_OWN_DIRS = own_dirs()


def is_own_frame(frame: Any) -> bool:
    """Whether ``frame`` runs pysb's code (a door's code is refused to the program)."""
    try:
        code = frame.f_code
    except AttributeError:
        return True
    name = code.co_filename
    return name in _OWN_NAMES or name.startswith(_OWN_DIRS)


def program_frames(frame: Any) -> Iterator[Any]:
    """The frames from ``frame`` outwards, pysb's left out: its own, and the start-up
    stub (``python -c``'s ``<string>``, the outermost frame) that calls its bootstrap."""
    after_own = False
    while frame is not None:
        if is_own_frame(frame):
            after_own = True
        elif not (after_own and frame.f_back is None and _is_stub(frame)):
            after_own = False
            yield frame
        frame = frame.f_back


def _is_stub(frame: Any) -> bool:
    return frame.f_code.co_filename == "<string>"


def walk_stack(f: Any) -> Iterator[tuple[Any, int]]:
    """``traceback.walk_stack``: the frames from ``f`` outwards, pysb's left out."""
    if f is None:
        f = sys._getframe().f_back.f_back.f_back.f_back  # as CPython's, from the same place
    for frame in program_frames(f):
        yield frame, frame.f_lineno


walk_stack.__module__ = "traceback"  # as CPython's: test_traceback's test_all lists by it


def getouterframes(frame: Any, context: int = 1) -> list[Any]:
    """``inspect.getouterframes``: CPython's loop, with pysb's frames left out (CPython's
    reads every frame's code, a door's too)."""
    inspect = sys.modules["inspect"]  # loaded: this is its function
    framelist = []
    for f in program_frames(frame or None):
        info = inspect.getframeinfo(f, context)
        framelist.append(inspect.FrameInfo(f, *info, positions=info.positions))
    return framelist


getouterframes.__module__ = "inspect"


def _ascii(text: str) -> str:
    """A string as faulthandler writes it (Python/traceback.c, ``_Py_DumpASCII``)."""
    truncated = len(text) > _MAX_STRING
    out = []
    for ch in text[:_MAX_STRING]:
        c = ord(ch)
        if 32 <= c <= 126:
            out.append(ch)
        elif c <= 0xFF:
            out.append(f"\\x{c:02x}")
        elif c <= 0xFFFF:
            out.append(f"\\u{c:04x}")
        else:
            out.append(f"\\U{c:08x}")
    if truncated:
        out.append("...")
    return "".join(out)


def _frames_text(frame: Any) -> str:
    lines = []
    for depth, f in enumerate(program_frames(frame)):
        if depth >= _MAX_FRAMES:
            lines.append("  ...\n")
            break
        code = f.f_code
        line = f.f_lineno
        lines.append(
            f'  File "{_ascii(code.co_filename)}", line '
            f"{'???' if line is None or line < 0 else line} in {_ascii(code.co_name)}\n"
        )
    return "".join(lines) or "  <no Python frame>\n"


def _fileno(file: Any) -> int:
    """faulthandler's own reading of ``file``: a descriptor, or a file flushed first."""
    if file is None:
        file = sys.stderr
        if file is None:
            raise RuntimeError("sys.stderr is None")
    if isinstance(file, int):
        if file < 0:
            raise ValueError("file is not a valid file descriptor")
        return file
    fd = file.fileno()
    if not isinstance(fd, int):
        raise RuntimeError("file.fileno() is not a valid file descriptor")
    if fd < 0:
        raise ValueError("file is not a valid file descriptor")
    try:
        file.flush()
    except Exception:
        pass
    return fd


def dump_traceback(file: Any = None, all_threads: bool = True) -> None:
    """dump_traceback(file=sys.stderr, all_threads=True): dump the traceback of the current thread, or of all threads if all_threads is True, into file."""  # noqa: E501
    fd = _fileno(file)
    here = sys._getframe(1)  # the caller: faulthandler's C function has no frame of its own
    if not all_threads:
        text = "Stack (most recent call first):\n" + _frames_text(here)
    else:
        import _thread

        me = _thread.get_ident()
        parts = []
        for count, (ident, frame) in enumerate(sys._current_frames().items()):
            if count >= _MAX_THREADS:
                parts.append("...\n")
                break
            head = "Current thread" if ident == me else "Thread"
            shown = here if ident == me else frame
            parts.append(f"{head} 0x{ident:016x} (most recent call first):\n")
            parts.append(_frames_text(shown))
            parts.append("\n")
        text = "".join(parts)[:-1]
    data = text.encode("ascii", "backslashreplace")
    while data:
        data = data[os.write(fd, data) :]


dump_traceback.__module__ = "faulthandler"


def _is_internal_frame(frame: Any) -> bool:
    """Signal whether the frame is an internal CPython implementation detail."""
    try:
        filename = frame.f_code.co_filename
    except AttributeError:  # a door (its code is not readable): DOOR_FILE, as C reads it
        return True
    return "importlib" in filename and "_bootstrap" in filename


_is_internal_frame.__module__ = "warnings"


def _next_external(frame: Any, skip_file_prefixes: tuple[str, ...]) -> Any:
    """``warnings._next_external_frame``: the next frame that is neither the import
    system's nor under one of ``skip_file_prefixes``."""
    frame = frame.f_back
    while frame is not None:
        try:
            filename = frame.f_code.co_filename
        except AttributeError:  # a door, as above
            frame = frame.f_back
            continue
        internal = "importlib" in filename and "_bootstrap" in filename
        if not internal and not any(filename.startswith(p) for p in skip_file_prefixes):
            break
        frame = frame.f_back
    return frame


if sys.version_info < (3, 12):  # the parameters of CPython's own, version by version

    def _next_external_frame(frame: Any) -> Any:
        return _next_external(frame, ())

else:

    def _next_external_frame(frame: Any, skip_file_prefixes: tuple[str, ...]) -> Any:
        return _next_external(frame, skip_file_prefixes)


_next_external_frame.__module__ = "warnings"
#: The stand-ins, with CPython's parameters and no annotations: inspect shows them as it
#: shows CPython's own; each takes its original's ``__doc__`` when placed (:func:`_s_like`).
STAND_INS = (walk_stack, getouterframes, dump_traceback, _is_internal_frame, _next_external_frame)
for _stand_in in STAND_INS:
    _stand_in.__annotations__ = {}


# -- install: sealed patchers (they run under the import guard's sealed code) ------------

# Names of the patchers' own namespace (install); None in this module.
RESOLVE: Any = None
PLACE: Any = None
FUNCTION: Any = None
BUILTIN: Any = None
WALK_STACK: Any = None
OUTER_FRAMES: Any = None
DUMP_TRACEBACK: Any = None
WARNINGS_WALKERS: Any = None
_unbound_signature: Any = None  # the seal's (pysb_guards._seal.makers), sealed with them


def _s_like(stand_in, original):
    """``stand_in`` with ``original``'s docstring (it differs from version to version) and,
    for a C function, its text signature: inspect reads the C function's parameters on the
    stand-in, as on any face (none where the C function has none: inspect's ValueError).
    C code reads ``original`` (an exact function or C function, checked by the caller)."""
    stand_in.__doc__ = original.__doc__
    if type(original) is BUILTIN:
        text = _unbound_signature(original.__text_signature__)
        stand_in.__text_signature__ = "(<no signature>)" if text is None else text


def _s_patch_traceback(module):
    found = RESOLVE(module, "walk_stack")
    if found is not None and type(found[2]) is FUNCTION:
        _s_like(WALK_STACK, found[2])
        PLACE(module, "walk_stack", WALK_STACK)


def _s_patch_inspect(module):
    found = RESOLVE(module, "getouterframes")
    if found is not None and type(found[2]) is FUNCTION:
        _s_like(OUTER_FRAMES, found[2])
        PLACE(module, "getouterframes", OUTER_FRAMES)


def _s_patch_faulthandler(module):
    found = RESOLVE(module, "dump_traceback")
    if found is not None and type(found[2]) is BUILTIN:
        _s_like(DUMP_TRACEBACK, found[2])
        PLACE(module, "dump_traceback", DUMP_TRACEBACK)


def _s_patch_warnings(module):
    for name, replacement in WARNINGS_WALKERS:
        found = RESOLVE(module, name)
        if found is not None and type(found[2]) is FUNCTION:
            _s_like(replacement, found[2])
            PLACE(module, name, replacement)


def install(on_import: Any, seal: Any) -> None:
    """Register the patchers. They run under the import guard's sealed code, so they are
    sealed too and call nothing the program can change: they only place functions made
    now, before the program runs. ``seal`` is :mod:`pysb_guards._seal`, handed over by the
    import guard: imported here it would pass the import guard (installed by then), and as
    a global of this module the program would find it."""
    b = seal.builders()
    ns = seal.seal_group(
        [
            _s_patch_traceback,
            _s_patch_inspect,
            _s_patch_faulthandler,
            _s_patch_warnings,
            _s_like,
            seal.makers._unbound_signature,
        ],
        RESOLVE=b["RESOLVE"],
        PLACE=b["PLACE"],
        FUNCTION=type(install),
        BUILTIN=type(len),
        WALK_STACK=walk_stack,
        OUTER_FRAMES=getouterframes,
        DUMP_TRACEBACK=dump_traceback,
        WARNINGS_WALKERS=(
            ("_is_internal_frame", _is_internal_frame),
            ("_next_external_frame", _next_external_frame),
        ),
    )
    on_import("traceback", ns["_s_patch_traceback"])
    on_import("inspect", ns["_s_patch_inspect"])
    on_import("faulthandler", ns["_s_patch_faulthandler"])
    on_import("warnings", ns["_s_patch_warnings"])
