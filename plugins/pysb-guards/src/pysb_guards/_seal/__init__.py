"""Doors, faces and the audit hook: how the guards keep originals and state out of reach.

A guarded function is split in two:

- the **face** is what modules expose (``os.stat`` becomes a face). Its code holds its door,
  its ``prepare`` and the C functions it needs as *constants*: no closure, no global name.
  A copy of a face's code (readable) with other globals behaves as the face itself. It
  turns a refusal into a raised exception, so that tracebacks show the face, never the door.
- the **door** holds the original and the judge as *code constants*, has no closure, no
  defaults and an empty globals dictionary. Reading a code object (``f.__code__`` or
  ``frame.f_code``) raises a PEP 578 audit event, and our audit hook refuses it for doors
  (except to the guards' own sealed code): ``__closure__``, ``__globals__``, ``__wrapped__``
  and ``__defaults__`` lead nowhere.

Judges and everything they use are built by *sealed* factories: functions re-created with
a private globals dictionary (a snapshot of the builtins taken at install), so that
the program cannot swap a helper or a builtin under them through a module's globals. No
guard keeps its state in module globals; there is no ``_armed`` flag to flip.

**Sealed code never calls code the program can change.** ``frame.f_back`` is not audited:
program code that runs while a sealed frame is on the stack (a generator frame taken
earlier and resumed there) walks up to that frame and reads its globals -- the guard's
whole state. So sealed code builds no exception of a class with Python code (it raises
:func:`defer`'s placeholder), makes and reads ``Refusal`` / ``Value`` with C calls only,
accepts only exact built-in types from the program, reads C heap types the program can
write to (``os.stat_result``) through descriptors taken at install, and looks into no
dictionary the program can put a key of its own into (a ``str`` subclass whose ``__eq__``
runs when a lookup collides with its hash) without checking its keys first.

**The guards' own frames are told by identity.** A sealed frame runs with one of the
private namespaces made here (recorded by ``id``, kept alive, none made once the guards are
armed); a door frame runs a door's code, a face frame a face's code (both recorded when made,
kept alive). Globals alone prove nothing: ``DOOR_NS`` is reachable from any door.

The audit hook cannot be removed from Python. Besides protecting doors it carries the
guards' *backstop* handlers: ``open``, ``os.*``, ``subprocess.Popen``, ``ctypes.dlopen``...
are judged there too, so an original recovered some other way (a C type's ``__init__``,
``type(f.raw)``) still meets the policy. Native code can undo all of this: the OS layer is

The package, one module a concern:

- :mod:`~pysb_guards._seal.templates`: the code of doors, gates and faces (and the two
  namespaces they run with);
- :mod:`~pysb_guards._seal.refusals`: :class:`Refusal`, :class:`Value` and :func:`defer`;
- :mod:`~pysb_guards._seal.makers`: the builders and the C-only readers (run sealed only);
- :mod:`~pysb_guards._seal.audithook`: the audit hook's dispatcher;
- :mod:`~pysb_guards._seal.signals`: the program's signal handlers kept out of the guards;
- :mod:`~pysb_guards._seal.core`: the sealed namespaces, the hook installed once, the faces
  handed out here;
- :mod:`~pysb_guards._seal.recorder`: the event recorder as judges call it.
"""

from __future__ import annotations

from pysb_guards._seal.audithook import _hook_factory
from pysb_guards._seal.core import (
    _install_audit_hook,
    _private_namespace,
    audit_registry,
    builders,
    guard,
    make_door,
    make_face,
    make_gate,
    seal_group,
    sealed,
)
from pysb_guards._seal.recorder import private_recorder
from pysb_guards._seal.refusals import Refusal, Value, built, defer, refusal_of, value_of
from pysb_guards._seal.signals import _PENDING_SIGNALS, _run_pending
from pysb_guards._seal.templates import (
    _FACE_NS,
    _TEMPLATES,
    DOOR_FILE,
    DOOR_NS,
    FACE_FILE,
    GATE_LIMIT,
    GATES,
)

__all__ = [
    "DOOR_FILE",
    "DOOR_NS",
    "FACE_FILE",
    "GATES",
    "GATE_LIMIT",
    "_FACE_NS",
    "_PENDING_SIGNALS",
    "_TEMPLATES",
    "Refusal",
    "Value",
    "_hook_factory",
    "_install_audit_hook",
    "_private_namespace",
    "_run_pending",
    "audit_registry",
    "builders",
    "built",
    "defer",
    "guard",
    "make_door",
    "make_face",
    "make_gate",
    "private_recorder",
    "refusal_of",
    "seal_group",
    "sealed",
    "value_of",
]
