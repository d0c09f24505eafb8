"""The audit hook's dispatcher: handlers, unreadable door code, unreachable guard frames,
tracebacks without the guards' entries.

The hook cannot be removed from Python. :func:`_hook_factory` is run sealed (copied with
private globals by :mod:`pysb_guards._seal.core`, which installs the hook itself as a door).
"""

from __future__ import annotations

import os


def _hook_factory(
    door_ns, function_type, frame_type, getframe, get_ident, sealed, closed, reading,
    own=None, busy=None, refcount=None,
):  # fmt: skip
    """Build the dispatcher of the single audit hook and the function adding handlers
    (with ``close``, ``safe_frame`` and the set of events the dispatcher needs to see).

    Handlers *return* the exception to raise (or None): the hook itself is a door, so a
    traceback of a refusal shows only the door's frame, whose code is not readable.

    The dispatcher also keeps the guards' frames out of the program's reach: a frame
    obtained by ``sys._getframe``, ``tb_frame``, ``gi_frame``, ``cr_frame`` or ``ag_frame``
    by code that is not sealed is refused when a sealed frame lies on its chain (code the
    program runs while a judge is on the stack -- a signal handler -- must not walk up to
    the judge's globals). Sealed frames are told by their builtins (``sealed``: the one
    dictionary every sealed namespace holds as ``__builtins__``, which no other code can
    reach): no lookup in a dictionary the program may have put a key of its own into, and
    no ``id()`` (an audit event of its own). A door's code
    is readable only by sealed code that says so (``reading``: the ids of the threads in
    ``frame_code`` / ``code_of`` right now).

    Tracebacks lose the guards' own entries as the program reads them (``own``: the
    faces' globals, the door and face code ids, the directories of pysb's plain code). A
    guarded call adds a face's entry (and the hook's own, a door, for a refusal of the
    backstop) below the caller's; Python adds them as the exception leaves each frame,
    after which no guard code runs. So reading ``tb.tb_frame`` (an audited attribute, and
    what every reader -- ``traceback``, ``inspect``, ``logging``, IPython -- reads first)
    splices the guards' entries out of the chain that follows ``tb``: the reader then
    goes on with the program's next frame, as CPython shows an unguarded call. Only
    ``tb_next`` is written (a C setter); nothing the program made is called.

    ``busy`` holds the threads dispatching an event right now: the dispatcher's own
    ``sys._getframe`` (``guard_frame``'s look at the code asking) and frame reads raise
    nested events, which it lets through. The queue of signal handlers shares the set and
    runs nothing while its thread is in it: a nested hook would otherwise run the queue
    below the judge whose frame walk raised the outer event, its test (a refused
    ``sys._getframe``) let through as the dispatcher's own.

    The walk up a frame's chain remembers, after a long one, the part of that chain that
    cannot change (``settled``): from the walk's first frame up to the first frame of a
    generator, coroutine or async generator (whose ``f_back`` is whoever resumes it right
    now), or to the end; a frame's caller is fixed for its life and after. A later walk
    that comes by the remembered frame (or one a few frames up from it) jumps to that
    bound and goes on from there. Reading a traceback of a deep recursion entry by entry,
    or ``sys._getframe`` at every level of one, is then linear in its depth, not quadratic
    (3.13's ``test_json`` took 65 s instead of 3 s reading the frames of its
    200,000-level ``RecursionError``); short walks read nothing more than before, and a
    recursion of generators is walked whole, as before. A remembered frame is held until
    the next frame read, which lets it go when no one else holds it (``refcount``): a
    frame of a dropped traceback lives that long. Nothing depends on ``id()``: a frame's
    address is reused.
    """
    if own is None:
        own = (None, (), (), ())
    face_ns, door_codes, face_codes, own_dirs = own
    handlers = {}
    # The events the dispatcher looks at: the hook (a door holding this set) leaves every
    # other event -- most of them, ``socket.__new__``, ``import``, ``compile``... -- at once.
    watched = {"object.__getattr__", "sys._getframe"}
    if busy is None:
        busy = set()
    frame_attrs = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}
    try:
        raise TypeError
    except TypeError as e:
        tb_type = type(e.__traceback__)

    # CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR: frames whose
    # f_back is whoever resumes them right now
    resumable_flags = 0x20 | 0x80 | 0x100 | 0x200
    # Two (M, R) pairs, or None: M's chain up to R -- the first frame of a generator or
    # coroutine on it, None: to its end -- holds no sealed frame and cannot change. The
    # first pair's M is where the last long walk began (a deeper frame's walk comes by
    # it: a recursion, a traceback read entry by entry), the second's a few frames up it
    # (a sibling's comes by that: a logger's calls at one depth of a deep stack).
    settled = [None, None]
    long_walk = 64  # a walk this long without coming by either M remembers its chain
    up_it = 16

    def code_of(frame):
        """``frame.f_code``, a door's too (the nested audit event lets it through)."""
        me = get_ident()
        reading.add(me)
        try:
            return frame.f_code
        finally:
            reading.discard(me)

    def resumable(frame):
        return code_of(frame).co_flags & resumable_flags

    def count_in(pair):
        frame = pair[0]
        return refcount(frame)

    def held_elsewhere(pair):
        """Whether anything but ``pair`` holds its frame (no count to go by: assume so)."""
        return refcount is None or count_in(pair) > alone

    def finished_frame():
        return getframe(0)

    # the count of a frame only a pair holds, taken the way held_elsewhere takes it
    alone = 0 if refcount is None else count_in((finished_frame(), None))

    def remembered():
        """The two pairs, after letting go of those no one else holds."""
        near, far = settled
        if near is not None and not held_elsewhere(near):
            settled[0] = near = None
        if far is not None and not held_elsewhere(far):
            settled[1] = far = None
        return near, far

    def sealed_chain(frame):
        """Whether a sealed frame lies on ``frame``'s chain. Called with the thread in
        ``busy``: its nested audit events (``f_code``) run no signal handler."""
        near, far = remembered()
        near_m, near_r = (None, None) if near is None else near
        far_m, far_r = (None, None) if far is None else far
        start = frame
        steps = 0
        hit = hit_bound = None
        while frame is not None:
            if frame is near_m or frame is far_m:
                # what lies between M and R is clean, and stays so: on from R
                hit, hit_bound = frame, (near_r if frame is near_m else far_r)
                frame, near_m, far_m = hit_bound, None, None
                continue
            if frame.f_builtins is sealed:
                return True
            if hit is None:
                steps += 1
            frame = frame.f_back
        if steps >= long_walk:
            remember(start, hit, hit_bound)
        return False

    def remember(start, hit, hit_bound):
        """After a long clean walk: how far up from ``start`` its chain cannot change (the
        frames up to ``hit``, which the walk came by, are read; the rest is ``hit``'s)."""
        frame = start
        up = None
        steps = 0
        while frame is not hit:
            if frame is None:
                return  # hit is no longer up the chain: a generator's moved (not kept)
            if resumable(frame):
                break
            steps += 1
            if steps == up_it:
                up = frame
            frame = frame.f_back
        bound = hit_bound if frame is hit else frame  # (hit None: frame None, to the end)
        if bound is start:
            return
        settled[0] = (start, bound)
        if up is not None and up is not bound:
            settled[1] = (up, bound)

    def own_frame(frame):
        """True for a frame of pysb's own: sealed, a door, a face, pysb's plain code."""
        if frame.f_builtins is sealed:
            return True
        g = frame.f_globals
        code = code_of(frame)
        if g is door_ns:
            return id(code) in door_codes
        if g is face_ns:
            return id(code) in face_codes
        name = code.co_filename
        return type(name) is str and str.startswith(name, own_dirs)

    def splice(tb):
        """Drop the guards' entries that follow ``tb`` in its chain."""
        nxt = tb.tb_next
        skipped = nxt
        while nxt is not None and own_frame(nxt.tb_frame):
            nxt = nxt.tb_next
        if nxt is not skipped:
            tb.tb_next = nxt

    def guard_frame(frame):
        """None when ``frame`` may be handed out, else the exception refusing it."""
        if not sealed_chain(frame):
            return None  # the common case: no guard frame above it
        # guard_frame, dispatch, the hook (a door), then the code asking: sealed code only
        # (the guards' own frame walks)
        caller = getframe(3)
        if caller is not None and caller.f_builtins is sealed:
            return None
        return PermissionError("pysb: frames of the sandbox's guards are not reachable")

    def dispatch(event, args):
        hs = handlers.get(event)
        if hs is not None:
            for h in hs:
                r = h(args)
                if r is not None:
                    return r
        if event == "object.__getattr__":
            obj = args[0]
            name = args[1]
            door_code = name == "__code__" and type(obj) is function_type
            door_code = door_code and obj.__globals__ is door_ns
            door_frame = name == "f_code" and type(obj) is frame_type
            if door_code or (door_frame and obj.f_globals is door_ns):
                if get_ident() in reading:  # sealed code reading it (frame_code)
                    return None
                return AttributeError("pysb: the code of a guard door is not readable")
            if name in frame_attrs:
                me = get_ident()
                if me in busy:
                    return None
                busy.add(me)
                try:
                    if name == "tb_frame" and own_dirs and type(obj) is tb_type:
                        splice(obj)
                    return guard_frame(getattr(obj, name, None))
                finally:
                    busy.discard(me)
        elif event == "sys._getframe":
            me = get_ident()
            if me in busy:
                return None
            busy.add(me)
            try:
                return guard_frame(args[0])
            finally:
                busy.discard(me)
        return None

    def add(event, handler):
        if closed[0]:
            return PermissionError("pysb: audit handlers can only be added before user code")
        handlers[event] = (*handlers.get(event, ()), handler)
        watched.add(event)
        return None

    def close():
        closed[0] = True

    def safe_frame(frame):
        """The frame a program's signal handler may receive (None inside the guards)."""
        if type(frame) is not frame_type:
            return None
        me = get_ident()
        nested = me in busy
        busy.add(me)
        try:
            return None if sealed_chain(frame) else frame
        finally:
            if not nested:
                busy.discard(me)

    return dispatch, add, close, safe_frame, watched


def _own_dirs() -> tuple[str, ...]:
    import pysb_core  # here, not a global: the program can read this module's namespace

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # pysb_guards/
    core = os.path.dirname(os.path.abspath(pysb_core.__file__))
    return (here + os.sep, os.path.join(core, "child") + os.sep)


#: Found when the guards' modules are imported, before any guard: a later ``import
#: pysb_core`` (an install's) would go through the import guard.
_OWN_DIRS = _own_dirs()


def own_dirs() -> tuple[str, ...]:
    """The directories of pysb's plain code that can stand in a program's traceback: the
    guards' (``prepare`` steps, the import finder) and the child's bootstrap."""
    return _OWN_DIRS
