"""The event recorder as judges call it (:func:`private_recorder`)."""

from __future__ import annotations

# Imported here, not in private_recorder: every family's install calls it, most once the
# import guard is installed, which an import statement would then go through.
import _json
import os
import time
import types

from pysb_core.guardkit import reporter_functions
from pysb_guards._seal.core import sealed

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any


def private_recorder(recorder: Any) -> Any:
    """The event recorder as judges call it: ``.deny``, ``.learn``, ``.learning``.

    A judge must never run code the program can replace. ``Recorder``'s methods are looked
    up on a class the program reaches through the class graph (and they call ``os.write``
    and ``json`` by module attribute): replaced, they would run the program's code inside a
    judge, whose frames lead to the guard's state. Here the two calls are closures with
    private globals over C functions bound now, held by a ``SimpleNamespace`` (a built-in
    type nobody can add a descriptor to); the report channel and the de-duplication set are
    the recorder's own, so every guard shares them. Callers pass exact ``str`` values.
    """
    deny, learn = sealed(reporter_functions)(
        getattr(recorder, "_fd", None),
        getattr(recorder, "_seen", set()),
        os.write,
        time.time,
        os.getpid,
        _json.encode_basestring_ascii,
    )
    return types.SimpleNamespace(deny=deny, learn=learn, learning=bool(recorder.learning))
