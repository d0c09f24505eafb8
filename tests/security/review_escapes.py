# ruff: noqa: E501  (attack programs read better with long lines)
"""The attack programs of an outside review's Python-layer escapes (issue 22, items 3, 7-11,
15), and the profile each runs under.

Each program prints ``ESCAPED ...`` when the forbidden thing happened and one
``refused ...`` line per attempt the guards stopped; the runner appends ``print('held')``
and prepends ``SECRET``, ``OUTSIDE`` and ``PROJECT`` (paths of the layout below). Used by
tests/security/test_review_escapes.py (``pysb run``, under subprocess and the OS providers)
and plugins/pysb-guards/tests/test_review_seal.py (every interpreter).

Layout::

    outside/secret.txt      a secret no exposure covers
    project/                the working directory
    project/secret.txt      a secret next to the exposures (not exposed)
    project/pub/            ``expose-ro`` (holds the attack program)
    project/rw/             ``expose-rw``
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROC_FD_REPOINTED = """
import os
sub = os.open(PROJECT + '/pub/sub', os.O_RDONLY)
pub = os.open(PROJECT + '/pub', os.O_RDONLY)
os.dup2(sub, 77)
for path in ('/proc/self/fd/77/../secret.txt', '/dev/fd/77/../secret.txt', '/proc/thread-self/fd/77/../secret.txt'):
    os.dup2(sub, 77)
    try:
        open(path).read()
    except OSError as e:
        print('first', type(e).__name__)
    os.dup2(pub, 77)
    try:
        print('ESCAPED', path, open(path).read())
    except OSError as e:
        print('refused', type(e).__name__)
# a link the program made (allowed: it resolves inside while fd 77 points inside)
os.dup2(sub, 77)
os.symlink('/proc/self/fd/77', 'rw/L')
try:
    open('rw/L/../secret.txt').read()
except OSError as e:
    print('first', type(e).__name__)
os.dup2(pub, 77)
try:
    print('ESCAPED through a link', open('rw/L/../secret.txt').read())
except OSError as e:
    print('refused', type(e).__name__)
"""


EXTENSION_HELPERS = """
import os, sys, _imp
from importlib.machinery import ModuleSpec
DYNLOAD = os.path.join(os.path.dirname(os.__file__), 'lib-dynload')
def ext(stem):
    for name in os.listdir(DYNLOAD):
        if name.split('.')[0] == stem:
            return os.path.join(DYNLOAD, name)
    return None
# a small extension module that is a file here (Debian's python has _bisect built in)
STEM = next(s for s in ('_bisect', '_queue', '_json') if ext(s))
def create(name, origin):
    try:
        module = _imp.create_dynamic(ModuleSpec(name, None, origin=origin))
        return module
    except ImportError as e:
        print('refused', name, type(e).__name__, e)
        return None
"""


NATIVE_FROM_MEMORY = (
    EXTENSION_HELPERS
    + """
data = open(ext(STEM), 'rb').read()
fd = os.memfd_create('x')
os.write(fd, data)
if create(STEM, f'/proc/self/fd/{fd}') is not None:
    print('ESCAPED: an extension module loaded from memory')
# a library's file copied into a writable exposure
with open(f'rw/{STEM}.so', 'wb') as f:
    f.write(data)
if create(STEM, os.path.abspath(f'rw/{STEM}.so')) is not None:
    print('ESCAPED: an extension module loaded from a writable exposure')
# a known module's name over another file: dlopen itself runs the file's constructors
try:
    _imp.create_dynamic(ModuleSpec('json', None, origin=f'/proc/self/fd/{fd}'))
    print('ESCAPED: json created from memory')
except ImportError as e:
    if 'refused by the sandbox' not in str(e):
        print('ESCAPED: the file was loaded (dlopen ran) before the name failed:', e)
# control: the library's own file, under its own name, still loads
print('control', create(STEM, ext(STEM)) is not None)
"""
)

RENAMED_C_MODULES = (
    EXTENSION_HELPERS
    + """
# A library file loaded under another name (importlib's own tests do) is the module its
# init function makes, with that module's patches: every guarded call is still judged.
m = create('json.readline', ext('readline'))
if m is not None:
    try:
        m.read_history_file(SECRET)
        print('ESCAPED readline under another name read', m.get_history_item(1))
    except OSError as e:
        print('refused readline call', type(e).__name__)
if ext('spwd') is not None:
    m = create('json.spwd', ext('spwd'))
    if m is not None:
        try:
            print('ESCAPED spwd under another name:', len(m.getspall()), 'entries')
        except OSError as e:
            print('refused spwd call', type(e).__name__)
else:
    print('refused json.spwd (no spwd here)')
m = create('json._posixsubprocess', ext('_posixsubprocess'))
if m is not None:
    try:
        m.fork_exec()
    except PermissionError as e:
        print('refused fork_exec call', type(e).__name__)
    except TypeError:
        print('ESCAPED _posixsubprocess under another name: its raw fork_exec')
"""
)

CTYPES_FROM_ADDRESS = """
import ctypes
items = [4242]
for label, attempt in [
    ('py_object.from_address', lambda: ctypes.py_object.from_address(ctypes.c_void_p.from_address(id(items) + 24).value).value),
    ('c_ssize_t.from_address', lambda: ctypes.c_ssize_t.from_address(id(items)).value),
    ('from_buffer_copy pointer', lambda: ctypes.POINTER(ctypes.c_ssize_t).from_buffer_copy(id(items).to_bytes(8, 'little'))[0]),
]:
    try:
        print('ESCAPED', label, attempt())
    except Exception as e:
        print('refused', label, type(e).__name__)
"""


SPWD = """
try:
    import spwd
except ImportError as e:
    print('refused (no spwd)', type(e).__name__)
else:
    try:
        print('ESCAPED spwd', len(spwd.getspall()), spwd.getspnam('root')[0])
    except Exception as e:
        print('refused', type(e).__name__, e)
"""


SQLITE = """
import sqlite3
con = sqlite3.connect(':memory:')
for sql, args in [
    ("ATTACH DATABASE ? AS o", (OUTSIDE + '/db.sqlite',)),
    ("ATTACH DATABASE ? AS o", ('file:' + OUTSIDE + '/db.sqlite?mode=ro',)),
    ("ATTACH DATABASE ? AS o", (OUTSIDE + '/created.sqlite',)),
    ("VACUUM INTO ?", (OUTSIDE + '/vacuumed.sqlite',)),
]:
    try:
        con.execute(sql, args)
        rows = con.execute("SELECT * FROM o.t").fetchall() if 'ATTACH' in sql and 'created' not in args[0] else ''
        print('ESCAPED', sql, args[0], rows)
    except sqlite3.Error as e:
        print('refused', sql, type(e).__name__, e)
    try:
        con.execute('DETACH DATABASE o')
    except sqlite3.Error:
        pass
# control: attaching a database inside a writable exposure works
con.execute("ATTACH DATABASE 'rw/inside.sqlite' AS i")
con.execute("CREATE TABLE i.t (x)")
print('control attached')
"""


SQLITE_URIS = """
import sqlite3
DB = OUTSIDE + '/db.sqlite'
PCT = DB.replace('/', '%2F')
# SQLite decodes %HH in a URI's path, and the last mode= wins: each name reaches the
# database outside the exposures (or writes one under the read-only ./pub).
for label, name in [
    ('percent-encoded path', 'file:' + PCT),
    ('percent-encoded path, ro', 'file:' + PCT + '?mode=ro'),
    ('memory, then rw', 'file:' + DB + '?mode=memory&mode=rw'),
    ('encoded mode name', 'file:' + DB + '?mode=memory&m%6Fde=rw'),
    ('ro, then rw, in pub', 'file:pub/created.sqlite?mode=ro&mode=rwc'),
]:
    try:
        con = sqlite3.connect(name, uri=True)
        con.execute('CREATE TABLE IF NOT EXISTS z (x)')
        print('ESCAPED connect', label, con.execute('SELECT * FROM t').fetchall())
    except (sqlite3.Error, OSError) as e:  # pysb's refusals are OSErrors
        print('refused connect', label, type(e).__name__)
    con = sqlite3.connect(':memory:', uri=True)
    try:
        con.execute('ATTACH DATABASE ? AS o', (name,))
        con.execute('CREATE TABLE IF NOT EXISTS o.z (x)')
        print('ESCAPED attach', label, con.execute('SELECT * FROM o.t').fetchall())
    except sqlite3.Error as e:
        print('refused attach', label, type(e).__name__)
# controls: an in-memory URI, and a read-only URI of a database inside an exposure
sqlite3.connect('file:' + DB + '?mode=rw&mode=memory', uri=True).execute('SELECT 1')
sqlite3.connect('file:rw/inside.sqlite?mode=rwc', uri=True).execute('CREATE TABLE t (x)')
con = sqlite3.connect('file:rw/%69nside.sqlite?mode=ro', uri=True)
print('control uris', con.execute('SELECT count(*) FROM t').fetchall())
"""


SQLITE_READ_ONLY = """
import os, sqlite3
# A database under the read-only ./pub is opened read-only: SQLite answers a write with its
# own OperationalError, as under a read-only file system, and creates no side file.
class Sub(sqlite3.Connection):
    pass
class Own(sqlite3.Connection):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
for db, factory in (('pub/plain.sqlite', None), ('pub/wal.sqlite', None), (os.path.abspath('pub/plain.sqlite').encode(), None), ('pub/plain.sqlite', Sub), ('pub/wal.sqlite', Own)):
    con = sqlite3.connect(db) if factory is None else sqlite3.connect(db, factory=factory)
    print('read', con.execute('SELECT x FROM t').fetchall())
    for sql in ("INSERT INTO t VALUES ('pwned')", 'CREATE TABLE u (x)', 'PRAGMA journal_mode=DELETE'):
        try:
            con.execute(sql)
            con.commit()
            rows = con.execute('SELECT x FROM t').fetchall()
            print('ESCAPED' if 'pwned' in str(rows) or sql.startswith('CREATE') else 'kept', sql)
        except sqlite3.OperationalError as e:
            print('refused', sql, e)
    con.close()
for db in ('pub/missing/x.sqlite', 'pub/new.sqlite'):
    try:
        sqlite3.connect(db)
        print('ESCAPED created', db)
    except sqlite3.OperationalError as e:
        print('refused', db, e)
print('files', sorted(os.listdir('pub')))
"""


SQLITE_OTHER_CONNECTIONS = """
import sqlite3
class Early(sqlite3.Connection):
    # uses the connection in its own __init__, before sqlite3.connect's face gets it back
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        try:
            self.execute("ATTACH DATABASE ? AS o", (OUTSIDE + '/db.sqlite',))
            print('ESCAPED in __init__', self.execute('SELECT * FROM o.t').fetchall())
        except sqlite3.Error as e:
            print('refused in __init__ at ATTACH', e)
for label, make in [
    ('Connection()', lambda: sqlite3.Connection(':memory:')),
    ('factory with __init__', lambda: sqlite3.connect(':memory:', factory=type('C', (sqlite3.Connection,), {'__init__': lambda self, *a, **k: sqlite3.Connection.__init__(self, *a, **k)}))),
    ('re-initialised', lambda: sqlite3.Connection.__init__(c := sqlite3.connect(':memory:'), ':memory:') or c),
    ('factory with __new__', lambda: sqlite3.connect(':memory:', factory=type('N', (sqlite3.Connection,), {'__new__': lambda cls, *a, **k: object.__new__(cls)}))),
    ('factory using it early', lambda: sqlite3.connect(':memory:', factory=Early)),
]:
    try:
        con = make()
    except PermissionError as e:
        print('refused', label, e)
        continue
    print('made', label, con.execute('SELECT 1').fetchall())
    for how in ('execute', 'executescript'):
        try:
            getattr(con, how)("ATTACH DATABASE '" + OUTSIDE + "/db.sqlite' AS o")
            print('ESCAPED', label, how, con.execute('SELECT * FROM o.t').fetchall())
        except sqlite3.Error as e:
            print('refused', label, how, 'at ATTACH', e)
# a factory without an __init__ of its own is a plain connection
con = sqlite3.connect(':memory:', factory=type('D', (sqlite3.Connection,), {}))
print('control factory', type(con).__name__)
"""


#: Every way the program has to install or remove an authorizer, on every kind of
#: connection: the guard's check of ATTACH / VACUUM INTO stays (the program's authorizer
#: composes with it); the program's callback still decides what the guard lets through.
SQLITE_AUTHORIZERS = """
import importlib, sqlite3, sys
class Sub(sqlite3.Connection):
    pass
class Own(sqlite3.Connection):
    def set_authorizer(self, *a, **k):
        return super().set_authorizer(*a, **k)
class Call:
    def __call__(self, *a):
        return 0
def allow_all(*a):
    return sqlite3.SQLITE_OK
def reinit(con):
    con.set_authorizer(None)
    sqlite3.Connection.__init__(con, ':memory:')
    return con
def second_copy():
    del sys.modules['_sqlite3']
    copy = importlib.import_module('_sqlite3')
    assert copy.Connection is not sqlite3.Connection
    return copy.connect(':memory:')
connections = [
    ('connect', lambda: sqlite3.connect(':memory:')),
    ('Connection()', lambda: sqlite3.Connection(':memory:')),
    ('factory', lambda: sqlite3.connect(':memory:', factory=Sub)),
    ('own method', lambda: sqlite3.connect(':memory:', factory=Own)),
    ('re-initialised', lambda: reinit(sqlite3.connect(':memory:'))),
    ('second _sqlite3', second_copy),
]
installers = [
    ('None', lambda con: con.set_authorizer(None)),
    ('allow all', lambda con: con.set_authorizer(allow_all)),
    ('lambda', lambda con: con.set_authorizer(lambda *a: 0)),
    ('callable object', lambda con: con.set_authorizer(Call())),
    ('keyword', lambda con: con.set_authorizer(authorizer_callback=None)),
    ('unbound', lambda con: type(con).set_authorizer(con, None)),
    ('type dict', lambda con: [k for k in type(con).__mro__ if 'set_authorizer' in k.__dict__][-1].__dict__['set_authorizer'](con, allow_all)),
    ('super', lambda con: super(type(con), con).set_authorizer(None) if type(con).__name__ != 'Connection' else con.set_authorizer(None)),
    ('twice', lambda con: (con.set_authorizer(allow_all), con.set_authorizer(None))),
    ('re-initialised after', lambda con: (con.set_authorizer(None), type(con).__init__(con, ':memory:'))),
]
for n, (cname, make, iname, install) in enumerate([(c, m, i, f) for c, m in connections for i, f in installers]):
        con = make()
        install(con)
        for sql in ("ATTACH DATABASE '" + OUTSIDE + "/db.sqlite' AS o", "VACUUM INTO '" + OUTSIDE + "/vacuumed.sqlite'"):
            try:
                con.execute(sql)
                print('ESCAPED', cname, iname, sql)
            except Exception as e:  # a second _sqlite3 raises its own classes
                print('refused', cname, iname, sql.split()[0], e)
        # what the guard lets through, the program's authorizer decides
        con.execute("ATTACH DATABASE '" + PROJECT + "/rw/" + str(n) + ".sqlite' AS w")
        con.set_authorizer(lambda action, *a: sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_SELECT else 0)
        try:
            con.execute('SELECT 1')
            print('ESCAPED? the program authorizer was ignored', cname, iname)
        except Exception as e:
            print('control denied', e)
        con.close()
"""


#: The guard's ``_find_spec`` is plain code (docs/security.md): a program may rewrite its
#: ``__code__`` or its decision cell. What it then imports is still refused, by the
#: ``exec`` event or the import gates, and the refusal must be pysb's.
FIND_SPEC_REWRITTEN = """
import importlib, sys
import importlib._bootstrap as bootstrap
guard = bootstrap._find_spec
cells = dict(zip(guard.__code__.co_freevars, guard.__closure__))
def attempt(how):
    for label, fn in (
        ('import', lambda: __import__('csv')),
        ('import_module', lambda: importlib.import_module('csv')),
        ('_gcd_import', lambda: bootstrap._gcd_import('csv')),
    ):
        try:
            fn()
            print('ESCAPED', how, label)
        except ImportError as e:
            print('refused', how, label, type(e).__name__, e)
def make(decide, find, module_spec, patch, taken):
    def _find_spec(name, path, target=None):
        (decide, module_spec, patch, taken)
        return find(name, path, target)
    return _find_spec
saved = guard.__code__
guard.__code__ = make(*(c.cell_contents for c in guard.__closure__)).__code__
attempt('code')
guard.__code__ = saved
cells['decide'].cell_contents = lambda name: None
attempt('decision cell')
"""


TCL = """
try:
    import tkinter
    t = tkinter.Tcl()
except Exception as e:
    print('refused', type(e).__name__, e)
else:
    for script in ['set f [open {%s}]; read $f' % SECRET, 'exec /bin/echo ESCAPED-exec']:
        try:
            print('ESCAPED tcl', t.eval(script))
        except Exception as e:
            print('refused', type(e).__name__)
"""


SHM = """
import os, _posixshmem
try:
    fd = _posixshmem.shm_open(NAME, os.O_RDONLY)
    print('ESCAPED shm', os.read(fd, 100))
except OSError as e:
    print('refused', type(e).__name__)
try:
    fd = _posixshmem.shm_open(NAME + '-new', os.O_RDWR | os.O_CREAT, 0o600)
    print('ESCAPED shm created')
except OSError as e:
    print('refused', type(e).__name__)
"""


CWD_RACE = """
import os, threading, time
os.makedirs('rw/a/b', exist_ok=True)
A, B = os.path.abspath('rw/a'), os.path.abspath('rw/a/b')
REL = '../../../outside/secret.txt'   # from rw/a/b: PROJECT/outside (inside); from rw/a: the secret
os.chdir(B)
stop = time.monotonic() + 3
refusals = []
def flip():
    while time.monotonic() < stop:
        for d in (A, B):
            try:
                os.chdir(d)
            except OSError as e:
                refusals.append(type(e).__name__)
                return
t = threading.Thread(target=flip)
t.start()
n = 0
while time.monotonic() < stop and n < 200000:
    n += 1
    try:
        print('ESCAPED', open(REL).read())
        break
    except OSError:
        pass
t.join()
print('chdir refusals', refusals[:1])
os.chdir(A)  # alone again: allowed
print('control chdir', os.getcwd() == A)
"""


RENAMED = """
import os
print('read', open('/data/x.txt').read().strip())
print('listed', sorted(os.listdir('/data')))
with open('/data/new.txt', 'w') as f:
    f.write('written')
print('stat', os.stat('/data/new.txt').st_size)
try:
    open(SECRET).read()
    print('ESCAPED secret')
except OSError as e:
    print('refused', type(e).__name__)
"""

CWD_STALE = """
import os
# chdir judged its own path against the working directory before the call, and kept that
# old directory: the next relative path was judged against it, opened against the new one
os.chdir('pub/sub')
os.chdir('..')
for path in ('../secret.txt', '../../outside/secret.txt'):
    try:
        print('ESCAPED', open(path).read())
    except OSError as e:
        print('refused', type(e).__name__)
os.chdir(PROJECT + '/pub/sub')
os.chdir(os.open('..', os.O_RDONLY))  # by descriptor
try:
    print('ESCAPED', open('../secret.txt').read())
except OSError as e:
    print('refused', type(e).__name__)
print('control listed', 'sub' in os.listdir('.'))
"""

PROC_FD_THREAD_RACE = """
import os, threading, time
sub = os.open(PROJECT + '/pub/sub', os.O_RDONLY)
pub = os.open(PROJECT + '/pub', os.O_RDONLY)
os.dup2(sub, 77)
stop = time.monotonic() + 2
def flip():
    while time.monotonic() < stop:
        os.dup2(pub, 77)
        os.dup2(sub, 77)
t = threading.Thread(target=flip)
t.start()
seen = set()
n = 0
while time.monotonic() < stop and n < 100000:
    n += 1
    for label, attempt in (
        ('proc', lambda: open('/proc/self/fd/77/../secret.txt').read()),
        ('dir_fd', lambda: os.read(os.open('../secret.txt', os.O_RDONLY, dir_fd=77), 100).decode()),
    ):
        try:
            print('ESCAPED', label, attempt())
            stop = 0
        except OSError as e:
            if label not in seen and type(e).__name__ == 'FileDeniedError' and 'other threads run' in str(e):
                seen.add(label)
                print('refused', label)
t.join()
fd = os.open(PROJECT + '/pub', os.O_RDONLY)
print('control', len(os.listdir(f'/proc/self/fd/{fd}')) >= 1)
"""

C_FILES = """
import syslog, _multiprocessing, _ssl
for label, attempt in (
    ('syslog', lambda: syslog.syslog('pysb review: a line the sandbox must not log')),
    ('openlog', lambda: syslog.openlog('pysb', syslog.LOG_NDELAY)),
    ('sem_unlink', lambda: _multiprocessing.sem_unlink('/pysb-review-none')),
    ('_test_decode_cert', lambda: _ssl._test_decode_cert(SECRET)),
):
    try:
        attempt()
        print('ESCAPED', label)
    except OSError as e:  # (ssl.SSLError too: the secret was read, it is no certificate)
        # FileNotFoundError from sem_unlink: it reached the host's /dev/shm
        print('refused' if type(e).__name__ == 'FileDeniedError' else 'ESCAPED tried', label, e)
"""


@dataclass(frozen=True)
class Case:
    """One attack: its program, what the profile grants, and what a held run prints."""

    code: str
    imports: tuple[str, ...]
    api: tuple[str, ...] = ()
    #: expose the whole project read-only (else only ``pub/``)
    project_ro: bool = False
    #: how many ``refused`` lines a held run prints (None: any)
    refused: int | None = None
    #: lines a held run prints (controls: what stays allowed still works)
    controls: tuple[str, ...] = field(default=())


#: The attacks that need nothing but the layout (the runner's own checks: "held", no
#: ``ESCAPED``, no secret in the output).
CASES: dict[str, Case] = {
    "proc-fd-repointed": Case(PROC_FD_REPOINTED, ("os",), refused=4),
    "native-from-memory": Case(
        NATIVE_FROM_MEMORY,
        ("os", "sys", "_imp", "importlib", "_bisect", "_queue", "_json", "json"),
        refused=2,
        controls=("control True",),
    ),
    "renamed-c-modules": Case(
        RENAMED_C_MODULES, ("os", "sys", "_imp", "importlib", "json"), refused=3
    ),
    "ctypes-raw-memory": Case(CTYPES_FROM_ADDRESS, ("ctypes",), refused=3),
    "spwd": Case(SPWD, ("spwd",)),
    "sqlite-other-connections": Case(
        SQLITE_OTHER_CONNECTIONS, ("sqlite3",), refused=11, controls=("control factory D",)
    ),
    "tcl": Case(TCL, ("tkinter",)),
    "c-files": Case(C_FILES, ("syslog", "_multiprocessing", "_ssl"), refused=4),
    "proc-fd-thread-race": Case(
        PROC_FD_THREAD_RACE,
        ("os", "threading", "time"),
        api=("threads",),
        refused=2,
        controls=("control True",),
    ),
    "chdir-stale": Case(CWD_STALE, ("os",), refused=3, controls=("control listed True",)),
    "chdir-race": Case(
        CWD_RACE,
        ("os", "threading", "time"),
        api=("threads",),
        project_ro=True,
        controls=("chdir refusals []", "control chdir True"),
    ),
}


def program(code: str, secret: str, outside: str, project: str) -> str:
    """The attack as it runs: the layout's paths first, ``held`` last."""
    return (
        f"SECRET = {secret!r}\nOUTSIDE = {outside!r}\nPROJECT = {project!r}\n"
        + code
        + "\nprint('held')\n"
    )


def refusals(out: str) -> int:
    """How many attempts of a run were refused (one ``refused ...`` line each)."""
    return sum(line.startswith("refused") for line in out.splitlines())
