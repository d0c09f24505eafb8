# ruff: noqa: E501  (attack snippets are kept on one line each where they read better so)
"""Program code run under a judge, and forged guard frames (the files, imports, api and env
guards; the network guard has its own corpus, net_escapes.py).

The guards' judges and engines run *sealed* (functions with private globals holding the
guard's whole state). Nothing audits ``frame.f_back``: a generator frame taken earlier and
resumed from code that runs *under* a judge walks up to the judge's frame and its globals.
So no sealed frame may ever call code the program can change: pysb's exception classes
(their ``__init__``, ``__new__``, ``__str__``, ``__setattr__``, their module's globals), the
carrier classes ``Refusal`` / ``Value`` / ``ScandirResult``, writable C heap types
(``os.stat_result``, ``os.DirEntry``, the scandir iterator), registry entries, methods and
hashes of ``str`` subclasses and metaclasses, keys the program put into a dictionary a judge
looks into (``sys.modules``, ``vars(sys)``, the globals of a frame, ``**kwargs``). And the
frame walks that tell the guards' own frames from the program's (who imports, who calls
``exec``, who asks for a frame) must not take a frame the program built for one of theirs.

Each attack prints ``ESCAPED ...`` when it worked: program code found a sealed frame above
it (:data:`PRELUDE`'s ``spy``), or a refused operation happened (a file a denied
``os.system`` creates, ``exec`` run while ``dynamic-code`` is denied, a denied unpickling or
``dlopen``). Used by tests/security/test_judge_escapes.py (``pysb run``) and
plugins/pysb-guards/tests/test_judge_seal.py (every interpreter).
"""

from __future__ import annotations

import pytest

#: The profile every attack runs under (``out/`` is the only writable directory).
IMPORTS = (
    "sys",
    "os",
    "posix",
    "types",
    "io",
    "gc",
    "atexit",
    "_thread",
    "time",
    "contextlib",
    "sqlite3",
    "pickle",
    "subprocess",
    "ctypes",
    "pkgutil",
    "signal",
    "json",
    "importlib",
    "functools",
    "builtins",
    "_imp",
)
#: Threads are allowed so that ``_thread.start_new_thread`` reaches the guard's walk.
API_ALLOW = ("threads",)
IGNORE = ("*.hidden",)

PROFILE = (
    f"version: 1\nimports: [{', '.join(IMPORTS)}]\n"
    "files:\n  expose-ro: [.]\n  expose-rw: [out]\n"
    f"  ignore: [{', '.join(repr(i) for i in IGNORE)}]\n"
    f"api:\n  allow: [{', '.join(API_ALLOW)}]\n"
)

#: Helpers every attack may use.
PRELUDE = r"""
import sys, os, types
def _classes(c=object, out=None):
    out = set() if out is None else out
    for s in type.__subclasses__(c):
        if s not in out:
            out.add(s)
            _classes(s, out)
    return out
def pysb_classes(*names):
    found = []
    for c in _classes():
        try:
            mod = type.__dict__['__module__'].__get__(c)
            name = type.__dict__['__name__'].__get__(c)
        except Exception:
            continue
        if name in names and type(mod) is str and mod.startswith(('pysb_core', 'pysb_guards')):
            found.append(c)
    return found
def seal_module():
    return pysb_classes('Refusal')[0].__init__.__globals__
def door_ns():
    return seal_module()['DOOR_NS']
def _hunt():
    while True:
        f = _frame.f_back
        while f is not None:
            g = f.f_globals
            if type(g) is dict and dict.__contains__(g, '__pysb_sealed__'):
                print('ESCAPED program code under a guard frame:', sorted(f.f_locals)[:8])
                break
            f = f.f_back
        yield
_g = _hunt()
_frame = _g.gi_frame
def spy(*args, **kwargs):
    try:
        next(_g)
    except ValueError:  # already hunting (spy called again from inside the hunt)
        pass
def trigger(*which):
    for name in which or ('files', 'write', 'stat', 'access', 'imports', 'api'):
        try:
            if name == 'files':
                open('/etc/shadow')
            elif name == 'write':
                open('written.txt', 'w')
            elif name == 'stat':
                os.stat('/etc/shadow')
            elif name == 'access':
                print('access', os.access('/etc/shadow', os.R_OK))
            elif name == 'imports':
                import socket
            elif name == 'api':
                os.system('touch out/pwned_api')
            elif name == 'exec':
                exec("print('ESCAPED exec ran for the program')")
        except BaseException as e:
            print('refused', name, type(e).__name__)
    if os.path.exists('out/pwned_api'):
        print('ESCAPED os.system ran')
def check_at_exit(path, what):
    import atexit
    def check():
        if os.path.exists(path):
            print('ESCAPED', what)
    atexit.register(check)
"""

_EXC_CLASSES = (
    "FileDeniedError",
    "WriteDeniedError",
    "ImportDeniedError",
    "ApiDeniedError",
    "DeniedError",
    "SandboxError",
)

_METHODS = {
    "__init__": "cls.__init__ = lambda self, *a, **k: (spy(), Exception.__init__(self, *a))[1]",
    "__new__": "orig = cls.__new__\ncls.__new__ = staticmethod(lambda c, *a, **k: (spy(), orig(c, *a))[1])",
    "__str__": "cls.__str__ = lambda self: (spy(), 'x')[1]",
    "__setattr__": "cls.__setattr__ = lambda self, k, v: (spy(), object.__setattr__(self, k, v))[1]",
}


def _exception_attacks() -> list[tuple[str, str]]:
    out = []
    for name in _EXC_CLASSES:
        for method, patch in _METHODS.items():
            code = f"for cls in pysb_classes({name!r}):\n" + "".join(
                "    " + line + "\n" for line in patch.splitlines()
            )
            out.append((f"error-{name}-{method.strip('_')}", code + "trigger()"))
    return out


#: ``(label, code)``; each is followed by ``print('held')``.
ATTACKS: list[tuple[str, str]] = [
    *_exception_attacks(),
    (
        "error-module-globals-super",
        # DeniedError.__init__ calls super(): a name looked up in pysb_core.errors' globals.
        "g = pysb_classes('DeniedError')[0].__init__.__globals__\n"
        "g['super'] = lambda *a: (spy(), __builtins__.super(*a) if a else __builtins__.super(pysb_classes('DeniedError')[0], sys._getframe(1).f_locals['self']))[1]\n"
        "trigger()",
    ),
    # --- the seal's carrier classes ------------------------------------------------------
    (
        "refusal-init",
        "R = pysb_classes('Refusal')[0]\norig = R.__init__\n"
        "R.__init__ = lambda self, *a: (spy(), orig(self, *a))[1]\ntrigger()",
    ),
    (
        "refusal-exc-slot-replaced-by-a-property",
        "R = pysb_classes('Refusal')[0]\nslot = R.__dict__['exc']\n"
        "R.exc = property(lambda self: (spy(), slot.__get__(self))[1], lambda self, v: (spy(), slot.__set__(self, v))[1])\n"
        "trigger()",
    ),
    (
        "value-init-and-slot",
        "V = pysb_classes('Value')[0]\nslot = V.__dict__['value']\n"
        "V.__init__ = lambda self, v: (spy(), slot.__set__(self, v))[1]\n"
        "print('access', os.access('/etc/shadow', os.R_OK))",
    ),
    (
        "scandir-result-init",
        "S = pysb_classes('ScandirResult')[0]\norig = S.__init__\n"
        "S.__init__ = lambda self, e: (spy(), orig(self, e))[1]\n"
        "print(sorted(e.name for e in os.scandir('.'))[:3])",
    ),
    (
        "scandir-result-slot-replaced-by-a-property",
        "S = pysb_classes('ScandirResult')[0]\nslot = S.__dict__['_entries']\n"
        "S._entries = property(lambda self: (spy(), slot.__get__(self))[1], lambda self, v: (spy(), slot.__set__(self, v))[1])\n"
        "print(sorted(e.name for e in os.scandir('.'))[:3])",
    ),
    # --- writable C heap types a judge or a post function reads --------------------------
    (
        "stat-result-st-mode-property",
        "os.stat_result.st_mode = property(lambda self: (spy(), tuple.__getitem__(self, 0))[1])\n"
        "trigger('files', 'stat')",
    ),
    (
        "stat-result-finalizer",
        "os.stat_result.__del__ = lambda self: spy()\ntrigger('files', 'stat')",
    ),
    (
        "direntry-name-property",
        "os.DirEntry.name = property(lambda self: (spy(), 'x')[1])\n"
        "print(len(list(os.scandir('.'))))",
    ),
    (
        "direntry-finalizer",
        "os.DirEntry.__del__ = lambda self: spy()\nopen('out/a.hidden', 'w').close()\n"
        "print(len(list(os.scandir('out'))))",
    ),
    (
        "scandir-iterator-methods",
        "it = type(os.scandir('.'))\norig_next, orig_close = it.__next__, it.close\n"
        "it.__next__ = lambda self: (spy(), orig_next(self))[1]\n"
        "it.close = lambda self: (spy(), orig_close(self))[1]\n"
        "print(len(list(os.scandir('.'))))",
    ),
    # --- program objects handed to a judge ----------------------------------------------
    (
        "path-with-a-class-property",
        "class P:\n    @property\n    def __class__(self):\n        spy(); return P\n"
        "    def __fspath__(self):\n        raise TypeError('no')\n"
        "for fn in (os.stat, os.lstat, os.listdir, os.access):\n"
        "    try:\n        fn(P())\n    except Exception as e:\n        print('refused', type(e).__name__)",
    ),
    (
        "path-of-a-metaclass-with-a-name-property",
        "class M(type):\n    @property\n    def __name__(cls):\n        spy(); return 'P'\n"
        "class P(metaclass=M):\n    def __fspath__(self):\n        raise TypeError('no')\n"
        "try:\n    os.stat(P())\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "keyword-name-colliding-with-dir-fd",
        "class S(str):\n    def __hash__(self):\n        return hash('dir_fd')\n"
        "    def __eq__(self, other):\n        spy(); return False\n"
        "for fn in (os.stat, os.open, os.readlink, os.mkdir):\n"
        "    try:\n        fn('/etc/shadow', **{S('zz'): 1})\n    except Exception as e:\n        print('refused', type(e).__name__)",
    ),
    (
        "keyword-name-colliding-in-import",
        "import importlib\nclass S(str):\n    def __hash__(self):\n        return hash('package')\n"
        "    def __eq__(self, other):\n        spy(); return False\n"
        "for call in (lambda: importlib.import_module('socket', **{S('zz'): 1}), lambda: __import__('socket', **{S('zz'): 1})):\n"
        "    try:\n        call()\n    except Exception as e:\n        print('refused', type(e).__name__)",
    ),
    (
        "sqlite-database-of-a-metaclass-with-eq",
        "import sqlite3\nclass M(type):\n    def __eq__(cls, other):\n        spy(); return False\n    __hash__ = type.__hash__\n"
        "class D(metaclass=M):\n    pass\n"
        "try:\n    sqlite3.connect(D())\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "module-patcher-run-on-a-program-object",
        # A module loaded through the guard finder keeps the finder's loader, whose _patch is
        # the face running the guards' module patchers: hand it an object of the program.
        "import pickle, signal, sqlite3, gc\n"
        "class Evil:\n    def __getattr__(self, name):\n        spy(); raise AttributeError(name)\n"
        "patches = {type(m.__spec__.loader).__dict__.get('exec_module') and m.__spec__.loader._patch for m in list(sys.modules.values()) if getattr(getattr(getattr(m, '__spec__', None), 'loader', None), '_patch', None)}\n"
        "print('patch faces', len(patches))\n"
        "for patch in patches:\n"
        "    for name in ('ssl', 'pickle', 'subprocess', 'importlib', 'sqlite3', 'readline'):\n"
        "        try:\n            patch(name, Evil())\n        except Exception as e:\n            print('refused', type(e).__name__)",
    ),
    (
        "module-patcher-original-of-the-program",
        # ... or a module object whose function has a __name__ the program computes.
        "import pickle\n"
        "class N:\n    @property\n    def __name__(self):\n        spy(); return 'loads'\n    def __call__(self, *a):\n        return None\n"
        "m = types.ModuleType('pickle'); m.loads = N(); m.Unpickler = pickle.Unpickler\n"
        "patches = {m.__spec__.loader._patch for m in list(sys.modules.values()) if getattr(getattr(getattr(m, '__spec__', None), 'loader', None), '_patch', None)}\n"
        "for patch in patches:\n"
        "    try:\n        patch('pickle', m)\n    except Exception as e:\n        print('refused', type(e).__name__)",
    ),
    (
        "door-namespace-stuffed-before-a-lazy-patch",
        # The doors' and faces' globals are reachable (door.__globals__): a key of the
        # program's there runs its __eq__ when a lazy patch makes the next door; without
        # __builtins__ the new door would take the sealed frame's own builtins.
        "class K:\n    def __init__(self, n):\n        self.n = n\n    def __hash__(self):\n        return hash(self.n)\n"
        "    def __eq__(self, other):\n        spy(); return False\n"
        "ns = door_ns()\nface_ns = os.system.__globals__\n"
        "for d in (ns, face_ns):\n    saved = dict(d)\n    d.clear()\n    d[K('__builtins__')] = 1\n    d[K('__name__')] = 1\n"
        "import subprocess\n"
        "for d in (ns, face_ns):\n    d.clear()\n"
        "import pickle\n"
        "import builtins\n"
        "def doors(fn):\n"
        "    consts = getattr(getattr(fn, '__code__', None), 'co_consts', ())\n"
        "    cells = [c.cell_contents for c in getattr(fn, '__closure__', None) or ()]\n"
        "    return [c for c in (*consts, *cells) if type(c) is type(doors) and c.__globals__ is ns]\n"
        "for fn in (subprocess.Popen.__init__, subprocess.run, pickle.loads):\n"
        "    for d in doors(fn):\n"
        "        if d.__builtins__ is not vars(builtins):\n"
        "            print('ESCAPED a door made with the builtins of sealed code')",
    ),
    (
        "registry-entry-property",
        "for cls in pysb_classes('Entry'):\n"
        "    for attr in ('category', 'qualname', 'alias_of', 'group'):\n"
        "        setattr(cls, attr, property(lambda self, a=attr: (spy(), 'x')[1]))\n"
        "trigger('api')",
    ),
    # --- keys the program put into dictionaries a judge looks into ----------------------
    (
        "frame-globals-key-colliding-with-the-mark",
        "class K:\n    def __hash__(self):\n        return hash('__pysb_sealed__')\n"
        "    def __eq__(self, other):\n        spy(); return False\n"
        "globals()[K()] = 1\ntry:\n    sys._getframe()\nexcept Exception as e:\n    print('refused', type(e).__name__)\n"
        "trigger('imports', 'exec', 'api')",
    ),
    (
        "frame-globals-of-a-dict-subclass",
        "class G(dict):\n    def __eq__(self, other):\n        spy(); return False\n    __hash__ = None\n"
        "def body():\n    import socket\n"
        "try:\n    types.FunctionType(body.__code__, G(__builtins__=__builtins__))()\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "import-globals-key-colliding-with-package",
        "class K:\n    def __hash__(self):\n        return hash('__package__')\n"
        "    def __eq__(self, other):\n        spy(); return False\n"
        "for level in (1, 2):\n"
        "    try:\n        __import__('x', {K(): 1, '__package__': 'json', '__name__': 'json.x'}, None, (), level)\n    except Exception as e:\n        print('refused', type(e).__name__)",
    ),
    (
        "import-level-of-the-program",
        "class L:\n    def __bool__(self):\n        spy(); return False\n    def __index__(self):\n        spy(); return 0\n"
        "    def __eq__(self, other):\n        spy(); return False\n    __hash__ = object.__hash__\n"
        "try:\n    __import__('socket', None, None, (), L())\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "sys-modules-key-colliding-with-a-name",
        "import pkgutil\nclass K:\n    def __init__(self, n):\n        self.n = n\n    def __hash__(self):\n        return hash(self.n)\n"
        "    def __eq__(self, other):\n        spy(); return False\n"
        "for n in ('socket', '_socket', 'select'):\n    sys.modules[K(n)] = None\n"
        "for call in (lambda: pkgutil.resolve_name('socket'), lambda: sys.modules['_imp'].create_builtin(types.SimpleNamespace(name='_socket', origin='built-in'))):\n"
        "    try:\n        call()\n    except Exception as e:\n        print('refused', type(e).__name__)",
    ),
    (
        "sys-namespace-key-colliding-with-meta-path",
        "class K:\n    def __init__(self, n):\n        self.n = n\n    def __hash__(self):\n        return hash(self.n)\n"
        "    def __eq__(self, other):\n        spy(); return False\n"
        "for n in ('meta_path', 'path', 'modules'):\n    v = vars(sys).pop(n)\n    vars(sys)[K(n)] = None\n    vars(sys)[n] = v\n"
        "import json.decoder, pickle\ntrigger('imports')",
    ),
    (
        "meta-path-replaced-by-an-object-with-a-finalizer",
        "class MP(list):\n    def __del__(self):\n        spy()\n"
        "sys.meta_path = MP(sys.meta_path)\nimport json.decoder, pickle, sqlite3\ntrigger('imports')",
    ),
    (
        "code-with-str-subclass-names",
        # A frame whose code claims a library file, with a file and function name whose hash
        # and methods are the program's: the import and api judges read the calling
        # frame's code (only co_names must hold exact str).
        "class S(str):\n    def __hash__(self):\n        spy(); return str.__hash__(self)\n"
        "    def __eq__(self, other):\n        spy(); return str.__eq__(self, other)\n"
        "    def startswith(self, *a):\n        spy(); return str.startswith(self, *a)\n"
        "    def endswith(self, *a):\n        spy(); return str.endswith(self, *a)\n"
        "def imp():\n    __import__('socket')\n"
        "def ex():\n    exec('1')\n"
        "def dl():\n    import ctypes\n    ctypes.CDLL('libc.so.6')\n"
        "for fn in (imp, ex, dl):\n"
        "    for names in (dict(co_filename=os.__file__, co_name=S('_init_posix')), dict(co_filename=S(os.__file__), co_name=S('<module>'))):\n"
        "        try:\n            types.FunctionType(fn.__code__.replace(**names), {'__builtins__': __builtins__})()\n"
        "        except Exception as e:\n            print('refused', type(e).__name__)",
    ),
    # --- the api guard's "who calls" ------------------------------------------------------
    (
        "face-run-by-atexit",
        "import atexit\ncheck_at_exit('out/pwned_atexit', 'os.system run by atexit')\n"
        "atexit.register(os.system, 'touch out/pwned_atexit')",
    ),
    (
        "face-run-as-a-thread",
        "import _thread, time\n_thread.start_new_thread(os.system, ('touch out/pwned_thread',))\n"
        "time.sleep(0.5)\n"
        "if os.path.exists('out/pwned_thread'):\n    print('ESCAPED os.system run as a thread')",
    ),
    (
        "forged-door-frame-called-by-a-library",
        "import contextlib\n"
        "def body():\n    exec(\"print('ESCAPED exec from a frame with the doors globals')\")\n"
        "forged = types.FunctionType(body.__code__, door_ns())\n"
        "try:\n    with contextlib.ExitStack() as st:\n        st.callback(forged)\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "forged-door-frame-unpickles",
        "import pickle, io\ndata = pickle.dumps(os.getcwd)\n"
        "def body(U=pickle.Unpickler, B=io.BytesIO, d=data):\n    return U(B(d)).load()\n"
        "forged = types.FunctionType(body.__code__, door_ns(), 'body', body.__defaults__)\n"
        "try:\n    print('ESCAPED unpickled', forged())\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "door-made-by-the-program-unpickles",
        "import pickle, io\ndata = pickle.dumps(os.getcwd)\nseal = seal_module()\n"
        "try:\n    door = seal['make_door'](pickle.Unpickler(io.BytesIO(data)).load, seal['_allow_all'])\n"
        "    print('ESCAPED unpickled', door())\nexcept Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "sealed-namespaces-after-arming",
        "import contextlib\nseal = seal_module()\n"
        "def body():\n    exec(\"print('ESCAPED exec from a frame with sealed globals')\", {})\n"
        "makers = {\n"
        "    'private_namespace': lambda: types.FunctionType(body.__code__, seal['_private_namespace']()),\n"
        "    'sealed_mark': lambda: types.FunctionType(body.__code__, {'__builtins__': __builtins__, '__pysb_sealed__': seal['sealed_mark']()}),\n"
        "    'sealed': lambda: seal['sealed'](body),\n"
        "    'seal_group': lambda: seal['seal_group']([body])['body'],\n"
        "    'builders': lambda: types.FunctionType(body.__code__, seal['builders']()['MAKE_DOOR'].__globals__),\n"
        "}\n"
        "for how, make in makers.items():\n"
        "    try:\n        forged = make()\n    except Exception as e:\n        print('refused', how, type(e).__name__); continue\n"
        "    try:\n        with contextlib.ExitStack() as st:\n            st.callback(forged)\n    except Exception as e:\n        print('refused', how, type(e).__name__)",
    ),
    (
        "module-init-exemption-through-a-program-frame",
        "import builtins\norig = builtins.__build_class__\n"
        "def bc(func, name, *a, **k):\n"
        "    if name == 'CDLL':\n"
        "        g = sys._getframe(1).f_globals\n"
        "        try:\n            g['_dlopen']('libc.so.6', 0)\n            print('ESCAPED dlopen from the program while ctypes loads')\n"
        "        except Exception as e:\n            print('refused', type(e).__name__)\n"
        "    return orig(func, name, *a, **k)\n"
        "builtins.__build_class__ = bc\n"
        "try:\n    import ctypes\nfinally:\n    builtins.__build_class__ = orig",
    ),
    (
        "forged-face-run-by-the-framework",
        # sys.excepthook is called by pysb's bootstrap (a framework frame) for an uncaught
        # exception: a face's code with a closure of the program's (door: os.system's door,
        # prepare: the program's) would be skipped by the walk, the framework taken for the
        # caller. The run ends with an uncaught exception (see TAILS).
        "check_at_exit('out/pwned_face', 'os.system through a forged face run by the framework')\n"
        "system_cells = dict(zip(os.system.__code__.co_freevars, (c.cell_contents for c in os.system.__closure__ or ())))\n"
        "template = exec  # a face calling its prepare\n"
        "def prepare(args, kwargs):\n    return ('touch out/pwned_face',), {}\n"
        "cells = dict(system_cells, prepare=prepare)\n"
        "try:\n"
        "    sys.excepthook = types.FunctionType(template.__code__, template.__globals__, 'hook', None, tuple(types.CellType(cells[n]) for n in template.__code__.co_freevars) or None)\n"
        "except Exception as e:\n    print('refused', type(e).__name__)",
    ),
    (
        "framework-reads-a-property-of-the-programs-exception",
        # pysb's bootstrap (a framework frame, exempt from the api rules for the calls it
        # makes itself) reads __cause__ / __context__ of an uncaught exception: a property
        # whose getter is a face would be called "by the framework" (see TAILS).
        "import atexit\n"
        "class E(Exception):\n    def __call__(self, frame, event, arg):\n        spy()\n        return None\n"
        "E.__cause__ = property(sys.settrace)\nE.__context__ = property(sys.setprofile)\n"
        "def check():\n    if sys.gettrace() is not None or sys.getprofile() is not None:\n"
        "        print('ESCAPED a trace function installed by the framework for the program')\n"
        "atexit.register(check)",
    ),
    (
        "framework-flushes-the-programs-stderr",
        "import atexit\nme = os.getpid()\n"
        "def check():\n    if os.getpid() != me:\n        print('ESCAPED os.fork called by the framework for the program')\n"
        "atexit.register(check)\n"
        "sys.stderr = types.SimpleNamespace(write=lambda text: None, flush=os.fork)",
    ),
    # --- frames handed out, and code run between any two bytecodes ------------------------
    (
        "collector-finalizer-under-a-judge",
        "import gc\nseen = []\n"
        "class D:\n    def __del__(self):\n        spy()\n        d = D(); d.me = d\n"
        "d = D(); d.me = d; del d\ngc.set_threshold(1, 1, 1)\n"
        "for _ in range(30):\n    trigger('files', 'stat', 'imports')\n"
        "gc.set_threshold(700, 10, 10)",
    ),
    (
        "signal-handler-under-a-judge",
        # The handler receives no frame, but its own frame's f_back is the interrupted one:
        # a thread interrupts the main thread (SIGINT) while it makes refused calls.
        "import signal, _thread, time\n"
        "signal.signal(signal.SIGINT, lambda signum, frame: spy())\n"
        "done = []\n"
        "def pester():\n    while not done:\n        _thread.interrupt_main()\n        time.sleep(0.0002)\n"
        "_thread.start_new_thread(pester, ())\n"
        "end = time.time() + 1.5\n"
        "while time.time() < end:\n    for p in ('/etc/shadow', '/etc/gshadow', '/root/x'):\n        try:\n            os.stat(p)\n        except OSError:\n            pass\n"
        "done.append(1)\ntime.sleep(0.05)\nsignal.signal(signal.SIGINT, signal.default_int_handler)",
    ),
    (
        "signal-handler-under-a-frame-walk",
        # The same, while the imports judge walks the stack (who imports, is it an
        # extension's own import): each step's sys._getframe raises an audit event whose
        # dispatcher asks for a frame again, a nested event; the queue of handlers must not
        # run from that nested hook with the judge below it.
        "import signal, _thread, time\n"
        "signal.signal(signal.SIGINT, lambda signum, frame: spy())\n"
        "done = []\n"
        "def pester():\n    while not done:\n        _thread.interrupt_main()\n        time.sleep(0.0002)\n"
        "_thread.start_new_thread(pester, ())\n"
        "end = time.time() + 1.5\n"
        "while time.time() < end:\n    for name in ('socket', 'csv', 'ssl'):\n        try:\n            __import__(name)\n        except ImportError:\n            pass\n"
        "done.append(1)\ntime.sleep(0.05)\nsignal.signal(signal.SIGINT, signal.default_int_handler)",
    ),
]

#: Attacks on what a *learning* run records (the recorder is sealed: it hashes and encodes
#: what the guards hand it). Run with learning on.
LEARNING: list[tuple[str, str]] = [
    (
        "learned-env-name-of-a-str-subclass",
        "class S(str):\n    def __hash__(self):\n        spy(); return str.__hash__(self)\n"
        "    def __eq__(self, other):\n        spy(); return str.__eq__(self, other)\n"
        "for name in ('HOME', 'PATH', 'PYSB_NOPE'):\n"
        "    os.environ.get(S(name)); S(name) in os.environ\n"
        "    try:\n        os.environ[S(name)]\n    except KeyError:\n        pass",
    ),
    (
        "learned-import-and-path-of-str-subclasses",
        "class S(str):\n    def __hash__(self):\n        spy(); return str.__hash__(self)\n"
        "    def __eq__(self, other):\n        spy(); return str.__eq__(self, other)\n"
        "    def partition(self, sep):\n        spy(); return str.partition(self, sep)\n"
        "os.stat_result.st_mode = property(lambda self: (spy(), tuple.__getitem__(self, 0))[1])\n"
        "for call in (lambda: __import__(S('csv')), lambda: os.stat(S('/etc/hostname')), lambda: open(S('/etc/hostname')).close()):\n"
        "    try:\n        call()\n    except Exception as e:\n        print('refused', type(e).__name__)",
    ),
]

#: Code run after ``held`` (an uncaught exception: pysb's bootstrap reports it).
TAILS = {
    "forged-face-run-by-the-framework": "raise RuntimeError('the end')\n",
    "framework-reads-a-property-of-the-programs-exception": "raise E()\n",
    "framework-flushes-the-programs-stderr": "raise RuntimeError('the end')\n",
}

#: Attacks the guards do not resist (docs/security.md, "Residual weaknesses"): program
#: code the interpreter runs between any two bytecodes -- a finalizer run by the cyclic
#: collector -- has the interrupted judge's frame as its ``f_back``. (Signal handlers did
#: too: they are queued now and run once the judge returned, see _seal._run_pending.)
ASYNC = pytest.mark.xfail(
    strict=True,
    reason="RESIDUAL: a collector finalizer may run while a judge is on the stack, and "
    "f_back is not audited",
)
RESIDUAL = frozenset({"collector-finalizer-under-a-judge"})


def program(label: str, code: str) -> str:
    """The attack wrapped so that the run always prints one verdict line (``held``)."""
    body = "".join("    " + line + "\n" for line in code.splitlines())
    return (
        PRELUDE
        + f"try:\n{body}except BaseException as e:\n    print('refused', type(e).__name__, e)\n"
        + "print('held')\n"
        + TAILS.get(label, "")
    )


def learning_params() -> list[object]:
    return [pytest.param(*a, id=a[0]) for a in LEARNING]


def attack_params() -> list[object]:
    """:data:`ATTACKS` as pytest parameters, the residual ones with their strict xfail mark."""
    return [pytest.param(*a, marks=ASYNC if a[0] in RESIDUAL else (), id=a[0]) for a in ATTACKS]
