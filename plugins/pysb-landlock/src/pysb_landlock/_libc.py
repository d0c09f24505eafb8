"""The libc entry points the sandbox set-up calls, resolved once, at import time.

Why at import: the bootstrap imports ``pysb_landlock.child`` before the Python guards are
installed and calls it after. Once installed, the guards judge ``open``/``os.listdir``
(audit events, patched functions) and, once armed, ``ctypes`` symbol lookups. Calls made
through these function pointers raise no audit event and are not patched, so the
framework's own set-up (opening ``/usr/lib`` with ``O_PATH`` to add a rule) is never judged
as if the program had asked for it.
"""

from __future__ import annotations

import ctypes

LIBC = ctypes.CDLL(None, use_errno=True)

syscall = LIBC.syscall
syscall.restype = ctypes.c_long

prctl = LIBC.prctl
prctl.restype = ctypes.c_int

capget = LIBC.capget
capget.restype = ctypes.c_int
capset = LIBC.capset
capset.restype = ctypes.c_int

open_ = LIBC.open
open_.restype = ctypes.c_int
open_.argtypes = [ctypes.c_char_p, ctypes.c_int]
close = LIBC.close
close.restype = ctypes.c_int
close.argtypes = [ctypes.c_int]

get_errno = ctypes.get_errno

chdir = LIBC.chdir
chdir.restype = ctypes.c_int
chdir.argtypes = [ctypes.c_char_p]
