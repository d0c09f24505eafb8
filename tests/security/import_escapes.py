# ruff: noqa: E501  (attack snippets are kept on one line each, as written)
"""Escapes of the import guard through library code: the program makes a library function
import an unlisted module for it (PY-07b in docs/security.md).

Each attack runs under a profile that lists every module it needs but ``csv``, which no
one has loaded at start; the run prints ``ESCAPED`` when ``csv`` got imported anyway (its
code ran: an import executes the module). Used by tests/security/test_import_escapes.py
(``pysb run``) and plugins/pysb-guards/tests/test_imports.py (every interpreter).
"""

from __future__ import annotations

#: Modules the attacks may import (the profile's `imports`).
IMPORTS = (
    "threading",
    "importlib",
    "functools",
    "concurrent",
    "sched",
    "time",
    "pkgutil",
    "pickle",
    "weakref",
    "atexit",
    "contextlib",
    "logging",
    "unittest",
    "traceback",
    "runpy",
    "sysconfig",
    "sys",
)

#: Printed by every attack after it ran: ``ESCAPED`` when csv was imported.
VERDICT = (
    "import sys\nprint('ESCAPED' if 'csv' in sys.modules or '_csv' in sys.modules else 'held')\n"
)

#: ``(label, code)``: the attack, exceptions allowed (a refusal is the expected outcome).
ATTACKS = [
    (
        "thread-target-__import__",
        "import threading\nt = threading.Thread(target=__import__, args=('csv',))\nt.start(); t.join()",
    ),
    (
        "thread-target-import_module",
        "import threading, importlib\nt = threading.Thread(target=importlib.import_module, args=('csv',))\nt.start(); t.join()",
    ),
    (
        "thread-target-resolve_name",
        "import threading, pkgutil\nt = threading.Thread(target=pkgutil.resolve_name, args=('csv:reader',))\nt.start(); t.join()",
    ),
    ("map-__import__", "list(map(__import__, ['csv']))"),
    ("partial-__import__", "import functools\nfunctools.partial(__import__, 'csv')()"),
    (
        "executor-submit",
        "import concurrent.futures as cf\nwith cf.ThreadPoolExecutor(1) as ex:\n    ex.submit(__import__, 'csv').result()",
    ),
    (
        "executor-map",
        "import concurrent.futures as cf, importlib\nwith cf.ThreadPoolExecutor(1) as ex:\n    list(ex.map(importlib.import_module, ['csv']))",
    ),
    (
        "sched",
        "import sched, time\ns = sched.scheduler(time.monotonic, time.sleep)\ns.enter(0, 1, __import__, ('csv',))\ns.run()",
    ),
    ("pkgutil-resolve_name", "import pkgutil\npkgutil.resolve_name('csv:reader')"),
    ("pickle-global-c", "import pickle\npickle.loads(b'ccsv\\nreader\\n.')"),
    ("pickle-global-python", "import pickle\npickle._loads(b'ccsv\\nreader\\n.')"),
    (
        "pickle-dumps-python",
        "import pickle\nclass X: pass\nX.__module__ = 'csv'; X.__qualname__ = 'reader'\npickle._dumps(X)",
    ),
    (
        "weakref-finalize",
        "import weakref\nclass O: pass\no = O()\nweakref.finalize(o, __import__, 'csv')\ndel o",
    ),
    (
        "exitstack-callback",
        "import contextlib\nwith contextlib.ExitStack() as s:\n    s.callback(__import__, 'csv')",
    ),
    (
        "logging-config",
        "import logging.config\nlogging.config.dictConfig({'version': 1, 'filters': {'f': {'()': 'csv.Sniffer'}}})",
    ),
    (
        "unittest-mock-patch",
        "import unittest.mock\nwith unittest.mock.patch('csv.reader'):\n    pass",
    ),
    ("unittest-loader", "import unittest\nunittest.TestLoader().loadTestsFromName('csv')"),
    (
        "traceback-suggestion",
        "import traceback\ne = ImportError('x', name='csv', name_from='nothing')\ntraceback.TracebackException.from_exception(e).format()\nlist(traceback.format_exception(e))",
    ),
    ("runpy-run_module", "import runpy\nrunpy.run_module('csv')"),
    (
        "relative-import-retargeted",
        "import concurrent.futures as cf\ncf.__package__ = 'csv'\ncf.ProcessPoolExecutor",
    ),
    # Last: run at interpreter exit, with no Python frame at all (the verdict, registered
    # first, runs after the attack).
    (
        "atexit",
        "import atexit, sys\natexit.register(lambda: print('ESCAPED' if 'csv' in sys.modules else 'held'))\natexit.register(__import__, 'csv')",
    ),
]


def program(code: str) -> str:
    """The attack wrapped so that the run always ends with one verdict line."""
    if "atexit.register(lambda" in code:
        return code + "\n"
    return (
        f"try:\n    exec({code!r})\nexcept BaseException as e:\n    print('refused', type(e).__name__)\n"
        + VERDICT
    )


#: What library code importing for itself still does under the same profile (each prints
#: ``ok``): the rule must not take these for the program's.
ALLOWED = [
    (
        "library-static-imports",
        "import logging.handlers, unittest.mock, concurrent.futures\nprint('ok')",
    ),
    (
        "own-package-by-call",
        "import logging.config\nlogging.config.dictConfig({'version': 1, 'handlers': {'h': {'class': 'logging.handlers.BufferingHandler', 'capacity': 1}}})\nprint('ok')",
    ),
    (
        "lazy-relative-import",
        "import concurrent.futures as cf\ncf.ProcessPoolExecutor\nprint('ok')",
    ),
    (
        "sysconfig-data",
        "import sysconfig\nprint('ok' if sysconfig.get_config_vars()['prefix'] else 'no')",
    ),
    ("codecs-search", "print('ok' if 'x'.encode('idna') == b'x' else 'no')"),
    (
        "pickle-of-allowed",
        "import pickle, functools\nprint('ok' if pickle.loads(pickle.dumps(functools.partial)) is functools.partial else 'no')",
    ),
    (
        "thread-import-of-loaded",
        "import threading, importlib\nout = []\nt = threading.Thread(target=lambda: out.append(importlib.import_module('threading')))\nt.start(); t.join()\nprint('ok' if out else 'no')",
    ),
    (
        "unittest-of-the-program",
        "import unittest\nclass T(unittest.TestCase):\n    def test_x(self):\n        pass\nunittest.main(argv=['x'], exit=False)\nprint('ok')",
    ),
]
