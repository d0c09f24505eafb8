"""Sizes (``512M``, ``2G``) and durations (``30s``, ``2m``, ``1h30m``) of the ``limits`` section.

Sizes use binary multiples (``M`` = MiB), as ``ulimit`` and container runtimes do; a bare
number is bytes. A bare duration is seconds.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_SIZE_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?", re.IGNORECASE)
_DURATION_MULT = {"ms": 0.001, "s": 1.0, "": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_size(value: object) -> int:
    """Bytes of ``value`` (int or text like ``512M``); ValueError with a hint otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size like 512M or 2G, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.match(str(value))
        if not m:
            raise ValueError(f"expected a size like 512M or 2G, got {value!r}")
        n = int(float(m.group(1)) * _SIZE_MULT[m.group(2).lower()])
    if n <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return n


def parse_duration(value: object) -> float:
    """Seconds of ``value`` (number or text like ``30s``, ``2m``, ``1h30m``)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 30s, 2m or 1h, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip()
        pos, seconds, parts = 0, 0.0, 0
        while pos < len(text):
            m = _DURATION_PART.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"expected a duration like 30s, 2m or 1h, got {value!r}")
            seconds += float(m.group(1)) * _DURATION_MULT[(m.group(2) or "").lower()]
            pos = m.end()
            while pos < len(text) and text[pos] == " ":
                pos += 1
            parts += 1
        if parts == 0:
            raise ValueError(f"expected a duration like 30s, 2m or 1h, got {value!r}")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"must be positive, got {value!r}")
    return seconds


def parse_count(value: object) -> int:
    """A positive integer (``processes``, ``open-files``)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a positive integer, got {value!r}")
    try:
        n = value if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise ValueError(f"expected a positive integer, got {value!r}") from None
    if n <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return n
