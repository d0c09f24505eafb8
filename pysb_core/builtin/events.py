"""The ``--events PATH`` sink: one JSON object per line for every denial and learned access."""

from __future__ import annotations

import json
import threading

from pysb_core._startup.markers import hookimpl

TYPE_CHECKING = False  # imported by every `pysb run`: no typing at run time
if TYPE_CHECKING:
    from pysb_core.events import Event

FIELDS = ("time", "pid", "layer", "guard", "action", "target", "detail", "suggested_rule")


class JsonlEventSink:
    """Appends events to a file; opened once, flushed per line (a crash loses nothing)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run

    @hookimpl
    def pysb_event(self, event: Event) -> None:
        line = json.dumps({k: getattr(event, k) for k in FIELDS}, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
