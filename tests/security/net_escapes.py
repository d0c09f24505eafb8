# ruff: noqa: E501  (attack snippets are kept on one line each, as written)
"""Escapes of the network guard through the objects it hands the program (PY-02/PY-03 for
sockets): the closures installed as socket methods and resolver functions, their frames in
tracebacks, the classes their state is made of.

Each attack runs under :data:`NETWORK` (only ``127.0.0.1`` port :data:`ALLOWED` out; nothing
listens there) and prints ``ESCAPED ...`` when it reached the guard's state or a connection
to :data:`DENIED` got past the guard (the kernel answered ``ConnectionRefusedError`` instead
of the guard's ``NetworkDeniedError``). Used by tests/security/test_net_escapes.py
(``pysb run``) and plugins/pysb-guards/tests/test_network_seal.py (every interpreter).
"""

from __future__ import annotations

import pytest

ALLOWED = 45200
DENIED = 45201
#: The profile's rules and imports.
NETWORK = (f"allow tcp 127.0.0.1 {ALLOWED} out",)
IMPORTS = ("socket", "_socket", "sys", "gc", "os", "builtins")

#: Connect to the denied port: ``ESCAPED`` when the kernel, not the guard, answered.
PROBE_DENIED = (
    "def probe_denied():\n"
    "    import socket\n"
    "    s = socket.socket()\n"
    "    try:\n"
    f"        s.connect(('127.0.0.1', {DENIED}))\n"
    "    except Exception as e:\n"
    "        # The guard's NetworkDeniedError is a ConnectionRefusedError too: only the kernel's\n"
    "        # own (exactly that class) means the connect got past the guard.\n"
    "        if type(e) is ConnectionRefusedError:\n"
    "            print('ESCAPED: the kernel answered a connect the rules refuse')\n"
    "        else:\n"
    "            print('refused', type(e).__name__)\n"
    "    finally:\n"
    "        s.close()\n"
)

#: Every object the network guard installs on ``_socket``, ``socket``, ``socket.socket``
#: (MRO and metaclass included) and ``SocketType``; and a walk from them through the
#: attributes CPython does not audit.
ROOTS = (
    "import socket, _socket\n"
    "def roots():\n"
    "    out = []\n"
    "    for mod in (_socket, socket):\n"
    "        for n in ('getaddrinfo', 'gethostbyname', 'gethostbyname_ex', 'gethostbyaddr', 'getnameinfo', 'socketpair', 'socket', 'SocketType'):\n"
    "            if hasattr(mod, n):\n"
    "                out.append(getattr(mod, n))\n"
    "    for cls in (socket.socket, _socket.socket, socket.SocketType, _socket.SocketType):\n"
    "        for k in (*cls.__mro__, type(cls)):\n"
    "            if k is not object and k is not type:\n"
    "                out.extend(vars(k).values())\n"
    "    return out\n"
    "def guard_state(o):\n"
    "    t = type(o)\n"
    "    if (getattr(t, '__module__', '') or '').startswith(('pysb_core', 'pysb_guards')) and t.__name__ not in ('Refusal', 'Value'):\n"
    "        return 'an object of the guard: ' + t.__module__ + '.' + t.__name__\n"
    "    g = getattr(o, '__globals__', None)\n"
    "    if type(g) is dict and ('__pysb_sealed__' in g or g.get('__name__') in ('pysb_guards.network.guard', 'pysb_guards.network.engine')):\n"
    "        return 'the globals of guard code: ' + str(g.get('__name__'))\n"
    "    if t.__name__ == 'builtin_function_or_method' and type(getattr(o, '__self__', None)) is dict:\n"
    "        return 'a method of a private dict: ' + o.__name__\n"
    "    if t is dict and any(type(k) is tuple and k and k[-1] in ('in', 'out') for k in list(o)[:64]):\n"
    "        return 'the decision cache'\n"
    "    return None\n"
    "ATTRS = ('__closure__', '__globals__', '__defaults__', '__kwdefaults__', '__wrapped__', '__self__', '__func__')\n"
    "def walk(limit=4):\n"
    "    seen, level = set(), [(o, 'root ' + repr(getattr(o, '__qualname__', o))[:60]) for o in roots()]\n"
    "    for depth in range(limit):\n"
    "        nxt = []\n"
    "        for o, path in level:\n"
    "            if id(o) in seen or isinstance(o, type(socket)):\n"
    "                continue\n"
    "            seen.add(id(o))\n"
    "            why = guard_state(o)\n"
    "            if why:\n"
    "                print('ESCAPED', why, 'via', path)\n"
    "                return\n"
    "            kids = []\n"
    "            if type(o) in (tuple, list):\n"
    "                kids = [(x, '[]') for x in o]\n"
    "            elif type(o) is dict and len(o) < 2000:\n"
    "                kids = [(v, '[' + repr(k)[:30] + ']') for k, v in list(o.items())]\n"
    "            elif type(o).__name__ == 'cell':\n"
    "                try:\n"
    "                    kids = [(o.cell_contents, '.cell_contents')]\n"
    "                except ValueError:\n"
    "                    pass\n"
    "            else:\n"
    "                for a in ATTRS:\n"
    "                    try:\n"
    "                        kids.append((getattr(o, a), '.' + a))\n"
    "                    except Exception:\n"
    "                        pass\n"
    "            nxt.extend((k, path + step) for k, step in kids if k is not None)\n"
    "        level = nxt\n"
)

#: Every frame an exception's traceback (and its chain) leads to, as far as the audit hook
#: lets them be read: ``ESCAPED`` for a frame of the network guard.
FRAMES = (
    "def guard_frames(err):\n"
    "    seen = set()\n"
    "    e = err\n"
    "    while e is not None and id(e) not in seen:\n"
    "        seen.add(id(e))\n"
    "        tb = e.__traceback__\n"
    "        while tb is not None:\n"
    "            try:\n"
    "                f = tb.tb_frame\n"
    "            except PermissionError:\n"
    "                f = None\n"
    "            while f is not None:\n"
    "                g = f.f_globals\n"
    "                if '__pysb_sealed__' in g or str(g.get('__name__')).startswith('pysb_guards') and g.get('__name__') != 'pysb_guards.<face>':\n"
    "                    print('ESCAPED frame of', g.get('__name__'), 'locals', sorted(f.f_locals)[:12])\n"
    "                    return\n"
    "                f = f.f_back\n"
    "            tb = tb.tb_next\n"
    "        e = e.__cause__ or e.__context__\n"
)

#: ``(label, code)``. Each ends by printing ``held`` unless it escaped.
ATTACKS = [
    (
        "closure-poisons-the-decision-cache",
        "import socket\nfast = dict(zip(socket.socket.connect.__code__.co_freevars, (c.cell_contents for c in socket.socket.connect.__closure__)))['fast_get'].__self__\n"
        f"bad = ('127.0.0.1', {DENIED}); fast[(2, 1, 0, bad, 'out')] = bad\nprobe_denied()",
    ),
    (
        "closure-cells-of-every-method-and-resolver",
        "import socket\nfor fn in (socket.socket.connect, socket.socket.connect_ex, socket.socket.bind, socket.socket.sendto, socket.getaddrinfo, socket.gethostbyname, socket.socketpair):\n"
        "    for c in getattr(fn, '__closure__', None) or ():\n"
        "        v = c.cell_contents\n"
        "        if type(v) is dict:\n            v.clear()\n"
        "        for attr in ('_cache', 'cache'):\n"
        "            d = getattr(v, attr, None)\n"
        "            if type(d) is dict:\n"
        f"                d.clear(); d.update({{('tcp', '127.0.0.1', {DENIED}, 'out'): (True, None)}})\n"
        "probe_denied()",
    ),
    ("reachable-guard-state", "walk()"),
    (
        "frames-of-a-refused-connect",
        f"import socket\ntry:\n    socket.socket().connect(('127.0.0.1', {DENIED}))\nexcept Exception as e:\n    print('refused', type(e).__name__); guard_frames(e)",
    ),
    (
        "frames-of-a-connection-refused-error",
        f"import socket\ntry:\n    socket.socket().connect(('127.0.0.1', {ALLOWED}))\nexcept ConnectionRefusedError as e:\n    guard_frames(e)",
    ),
    (
        "frames-of-a-refused-name",
        "import socket\ntry:\n    socket.getaddrinfo('nowhere.pysb.test', 80)\nexcept Exception as e:\n    print('refused', type(e).__name__); guard_frames(e)",
    ),
    (
        "frames-of-a-bad-address",
        "import socket\ntry:\n    socket.socket().connect(('127.0.0.1', 'x'))\nexcept Exception as e:\n    print('refused', type(e).__name__); guard_frames(e)",
    ),
    (
        "program-code-run-by-a-judge",
        "import socket\nclass Port:\n    def __index__(self):\n"
        "        f = socket.sys._getframe(1)\n"
        "        while f is not None:\n"
        # Faces and their prepare steps are public by design (pysb_guards.<face>: they hold
        # the door and built-in functions only); a judge's frame must never be below.
        "            if '__pysb_sealed__' in f.f_globals or str(f.f_globals.get('__name__')).startswith('pysb_guards') and f.f_globals.get('__name__') != 'pysb_guards.<face>':\n"
        "                print('ESCAPED judge frame', sorted(f.f_locals)[:12]); break\n"
        "            f = f.f_back\n"
        f"        return {DENIED}\n"
        "try:\n    socket.socket().connect(('127.0.0.1', Port()))\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "matcher-class-from-the-class-graph",
        "def walk(c, out):\n    for s in type.__subclasses__(c):\n        if s not in out:\n            out.add(s); walk(s, out)\n    return out\n"
        "for cls in walk(object, set()):\n"
        "    if (cls.__module__ or '').startswith('pysb_core.net') and cls.__name__ == 'Matcher':\n"
        "        try:\n"
        "            cls.check = lambda self, *a: (True, None)\n"
        "            cls.check_host = lambda self, *a: (True, None)\n"
        "        except (TypeError, AttributeError):\n            pass\n"
        "probe_denied()",
    ),
    (
        "recorder-method-walks-up-from-a-generator-frame",
        # A method of the event recorder, replaced through the class graph, runs inside the
        # guard's judge; a generator frame taken earlier has the judge above it once resumed
        # there (f_back is not audited).
        "def walk(c, out):\n    for s in type.__subclasses__(c):\n        if s not in out:\n            out.add(s); walk(s, out)\n    return out\n"
        "def gen():\n    while True:\n        f = frame.f_back\n        while f is not None:\n"
        "            if '__pysb_sealed__' in f.f_globals or str(f.f_globals.get('__name__')).startswith('pysb_guards'):\n"
        "                print('ESCAPED guard frame', sorted(f.f_locals)[:12]); break\n"
        "            f = f.f_back\n        yield\n"
        "g = gen(); frame = g.gi_frame\n"
        "def spy(self, *a, **k):\n    next(g)\n"
        "for cls in walk(object, set()):\n"
        "    if cls.__name__ == 'Recorder' and (cls.__module__ or '').startswith('pysb_core'):\n"
        "        try:\n            cls.deny = spy\n        except (TypeError, AttributeError):\n            pass\n"
        "probe_denied()",
    ),
]

#: A generator frame that, resumed from inside a judge, walks ``f_back`` to the judge's
#: frame (``f_back`` is not audited): what program code running under a judge would do.
SPY = (
    "def _spy_gen():\n    while True:\n        f = _spy_frame.f_back\n        while f is not None:\n"
    "            if '__pysb_sealed__' in f.f_globals or str(f.f_globals.get('__name__')).startswith('pysb_guards') and f.f_globals.get('__name__') != 'pysb_guards.<face>':\n"
    "                print('ESCAPED guard frame', sorted(f.f_locals)[:12]); break\n"
    "            f = f.f_back\n        yield\n"
    "_spy = _spy_gen(); _spy_frame = _spy.gi_frame\n"
    "def spy(*a, **k):\n    next(_spy)\n"
    "def classes():\n    out, todo = set(), [object]\n    while todo:\n        for s in type.__subclasses__(todo.pop()):\n"
    "            if s not in out:\n                out.add(s); todo.append(s)\n    return out\n"
)

ATTACKS += [
    (
        "error-class-init-replaced",
        # The judge refuses with NetworkDeniedError: its __init__ (and its bases') must not
        # run under the judge.
        "import socket\nfor cls in classes():\n    if cls.__module__ == 'pysb_core.errors':\n"
        "        try:\n            cls.__init__ = lambda self, *a, **k: (spy(), Exception.__init__(self, *a))[1]\n"
        "        except TypeError:\n            pass\n"
        "socket.gaierror.__init__ = lambda self, *a, **k: (spy(), OSError.__init__(self, *a))[1]\n"
        "probe_denied()\n"
        "try:\n    socket.getaddrinfo('nowhere.pysb.test', 80)\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "door-called-with-lying-types",
        # The door behind a face, called directly (no prepare): a str subclass whose hash
        # and equality run the program's code, a port with __index__.
        "import socket\nclass S(str):\n    def __hash__(self):\n        spy(); return str.__hash__(self)\n"
        "    def __eq__(self, o):\n        spy(); return str.__eq__(self, o)\n"
        "    def startswith(self, *a):\n        spy(); return str.startswith(self, *a)\n"
        "class P:\n    def __index__(self):\n        spy(); return 45201\n"
        "door = dict(zip(socket.socket.connect.__code__.co_freevars, (c.cell_contents for c in socket.socket.connect.__closure__)))['door']\n"
        "for address in ((S('127.0.0.1'), 45201), ('127.0.0.1', P()), (S('127.0.0.1'), P())):\n"
        "    r = door(socket.socket(), address)\n"
        "    print('door answered', type(r).__name__)\n"
        "probe_denied()",
    ),
    (
        "face-globals-injected",
        # Faces may be called from sealed code (the network judge resolves a Unix socket's
        # directory with os functions): a builtin put into the faces' namespace or into
        # builtins must not run there.
        "import socket, os, builtins\ng = os.stat.__globals__\n"
        "real_len = len\ng['len'] = lambda x: (spy(), real_len(x))[1]\ng['str'] = type('X', (), {})\n"
        "builtins.len = g['len']\n"
        "s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('/nonexistent-dir/sock')\nexcept Exception as e:\n    print('refused', type(e).__name__)\n"
        "builtins.len = real_len\nprobe_denied()",
    ),
    (
        "resolver-with-lying-ints",
        # An int subclass for family/type/flags whose operators run the program's code: the
        # judge copies its value with C code and never calls them.
        "import socket, _socket\nclass I(int):\n"
        "    def __index__(self):\n        spy(); return int(self)\n"
        "    def __and__(self, o):\n        spy(); return int.__and__(self, o)\n"
        "    def __or__(self, o):\n        spy(); return int.__or__(self, o)\n"
        "    def __eq__(self, o):\n        spy(); return int.__eq__(self, o)\n"
        "    __hash__ = int.__hash__\n"
        "for host in ('127.0.0.1', 'nowhere.pysb.test'):\n"
        "    try:\n        _socket.getaddrinfo(host, 45200, I(0), I(1), I(0), I(0))\n        print('answered')\n"
        "    except Exception as e:\n        print('refused', type(e).__name__)\n"
        "probe_denied()",
    ),
    (
        "raw-c-method-with-a-lying-address",
        # The raw C method (through the MRO) with a str subclass host: the backstop judges
        # it without calling the subclass's methods.
        "import socket\nclass S(str):\n    def __hash__(self):\n        spy(); return str.__hash__(self)\n"
        "    def __eq__(self, o):\n        spy(); return str.__eq__(self, o)\n"
        "raw = socket.socket.__mro__[-2]\ns = socket.socket()\ntry:\n"
        "    raw.connect(s, (S('127.0.0.1'), 45201))\n"
        "except ConnectionRefusedError as e:\n    print('ESCAPED: the kernel answered' if type(e) is ConnectionRefusedError else 'refused')\n"
        "except Exception as e:\n    print('refused', type(e).__name__)",
    ),
]


#: Attacks the introspection category already stops (denied by default): kept as controls.
CONTROLS = [
    (
        "gc-referents-of-the-guard-functions",
        "import gc, socket\ntry:\n    for fn in (socket.socket.connect, socket.getaddrinfo, socket.socket):\n"
        "        for o in gc.get_referents(fn):\n"
        "            print('ESCAPED', type(o).__name__)\n"
        "except PermissionError:\n    pass",
    ),
]


def program(code: str) -> str:
    """The attack wrapped so that the run always ends with one verdict line."""
    return (
        PROBE_DENIED
        + SPY
        + ROOTS
        + FRAMES
        + f"try:\n    exec({code!r})\nexcept BaseException as e:\n    print('refused', type(e).__name__, e)\n"
        + "print('held')\n"
    )


def attack_params() -> list[object]:
    """:data:`ATTACKS` as pytest parameters."""
    return [pytest.param(*a, id=a[0]) for a in ATTACKS]
