"""The caller's side of partial mode: one sandboxed worker, its channel, its life cycle.

The channel (issue 30 item 2): two pipes, calls host->worker on one and answers back on
the other, for a worker that is a local process (``Provider.partial_pipes``: ~6 µs
cheaper per call); one Unix socketpair for a provider that forwards each fd (qemu).

Who reads the answers (issue 30: one wake-up per call on each side): a thread waiting for
its answer reads the channel itself -- the *leader*, one at a time -- so a lone caller is
woken once, by its own answer, with no reader thread in between. A frame for another
call goes to that call's queue (a ``SimpleQueue`` for a thread, an ``asyncio.Queue``
through ``call_soon_threadsafe`` for a task). A leader that has its answer passes the
role to one waiting thread (by a token in its queue: one wake-up, never a herd), else to
the *watcher* thread when only async calls wait, else to nobody. The watcher otherwise
sleeps in ``poll`` on the hang-up alone of the answer pipe's read end (or the socket):
arriving data does not wake it, so it notices a worker that died idle, and it runs every
death and restart.

Crash rules (SPEC §5): the worker writes a call's id to its "started" pipe before it runs
the call. When the worker dies, a call whose id is there raises
:class:`SandboxProtocolError` (or is sent again with ``retry_on_crash``); every other
pending call is sent to the restarted worker, in order. The fifth death within 180 s
fails the sandbox closed; the host is never touched.

Why one module: most of it is :class:`Client`, one state machine: the leader hand-off, the
watcher, the crash rules and the restarts all touch the same pending calls under the same
condition, and the issue-30 and SPEC §5 guarantees are only checkable when those transitions sit
together. The transport, the unpickler and the exceptions are modules of their own.
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
import queue
import select
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pysb_core.errors import SandboxError, SandboxProtocolError, SandboxTimeoutError
from pysb_core.remote import answer, buffers, transport, unpickler
from pysb_core.remote.exceptions import rebuild_chain

_dumps = pickle.dumps

READY, RESTARTING, FAILED = "ready", "restarting", "failed"
STOPPING, STOPPED = "stopping", "stopped"
_FAILED_CALL = -1  # item kind: the call failed on our side (payload is the exception)
_RESULT_OOB = transport.RESULT_OOB
_RESULT = transport.RESULT
_CALL = transport.CALL
_CALL_RETRY = transport.CALL_RETRY
_loads = unpickler.loads
_call_dumps = buffers.call_dumps
_LEAD = -2  # item kind: this waiting thread now holds the reading role
#: ``Client._leader`` when the watcher thread holds the reading role.
_WATCHER = "watcher"

MAX_DEATHS = 5
#: The largest frame of each kind a worker may send (transport.child_limits: 256 MiB for a
#: result, 16 MiB for an exception, 1 MiB for an output chunk); above it the worker is
#: killed, so a hostile worker cannot make the host allocate unbounded memory.
MAX_FRAME = transport.child_limits()
DEATH_WINDOW = 180.0
#: How long a lone caller's thread polls for its answer before it sleeps in the read
#: (transport.FrameReader's ``linger``): a trivial call's answer comes within ~10-25 µs
#: when the caller is still on its CPU, and waking it there costs ~20 µs more on a VM whose
#: idle CPUs halt. Never on a single CPU, where the poll would only delay the worker.
LINGER = 50e-6
#: Socket buffer asked for on each end (the kernel caps it at net.core.[rw]mem_max).
SOCKET_BUFFER = 4 << 20


class _Conn:
    """One running worker: its process and our ends of its channel (two pipes, or a
    socket: ``sock``; see :mod:`pysb_core.remote.transport`)."""

    __slots__ = (
        "fds",
        "pid",
        "proc",
        "read_fd",
        "reader",
        "sock",
        "started",
        "started_fd",
        "writer",
    )

    def __init__(
        self,
        proc: Any,
        channel: socket.socket | tuple[int, int],
        started_fd: int,
        max_size: tuple[int, ...] | None,
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        if isinstance(channel, socket.socket):
            self.sock: socket.socket | None = channel
            read_fd = write_fd = channel.fileno()
            self.fds: tuple[int, ...] = ()
        else:
            self.sock = None
            read_fd, write_fd = channel
            self.fds = channel
        #: The fd whose hang-up (POLLHUP) tells the watcher the worker is gone.
        self.read_fd = read_fd
        self.reader = transport.FrameReader(read_fd, max_size)
        self.writer = transport.FrameWriter(write_fd, padded=True)  # the worker's reads
        self.started_fd = started_fd
        self.started = transport.StartedLog(started_fd)

    def close(self) -> None:
        self.writer.close()
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = ()
        if self.started_fd >= 0:
            try:
                os.close(self.started_fd)
            except OSError:
                pass
            self.started_fd = -1


class _Call:
    __slots__ = ("conn", "id", "kind", "loop", "name", "payload", "retry", "sink", "started")

    def __init__(self, name: str, request: Any, retry: bool, sink: Any, loop: Any) -> None:
        self.name = name
        data, out = _call_dumps(request)  # _encode, inline: on every call
        # A call safe to repeat needs no started mark (it is sent again after a crash
        # whether it started or not): its kind tells the worker to skip the pipe's write.
        if out:
            self.kind = transport.CALL_OOB_RETRY if retry else transport.CALL_OOB
            self.payload = buffers.frame_parts(data, out)
        else:
            self.kind, self.payload = _CALL_RETRY if retry else _CALL, data
        self.retry = retry
        self.sink = sink
        self.loop = loop
        self.started = False
        self.conn: _Conn | None = None
        self.id = 0


#: ``Client._on_frame``'s "no result yet" (a result may be any value, None included).
_MORE = object()


class _Expired(Exception):
    """A leader's deadline passed between two frames."""


def _write(stream: Any, data: bytes) -> None:
    if stream is None:
        return
    try:
        stream.write(data.decode("utf-8", "replace"))
        stream.flush()
    except (OSError, ValueError):
        pass


class Client:
    """A running partial-mode sandbox (one worker process, restarted when it dies)."""

    def __init__(
        self,
        launcher: Any,
        *,
        init_fn: str | None = None,
        result_classes: dict[tuple[str, str], Any] | None = None,
        threads: int | None = None,
        use_asyncio: bool = False,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        max_frame: tuple[int, ...] = MAX_FRAME,
        program_modules: list[str] | None = None,
    ) -> None:
        self._launcher = launcher
        self._program_modules = list(program_modules or [])
        self._max_frame = max_frame
        self._init_fn = init_fn
        self._allowed = result_classes or {}
        self._threads = threads
        self._asyncio = use_asyncio
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        #: ``with self._lock`` holds the condition's own lock (the C lock's ``__enter__``,
        #: not Condition's Python-level one: taken several times on every call).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._send_lock = threading.Lock()
        self._pending: dict[int, _Call] = {}
        self._ids = itertools.count(1)
        self._deaths: deque[float] = deque()
        self._state = STOPPED
        self._conn: _Conn | None = None
        self._reader: threading.Thread | None = None  # the watcher thread
        #: Who reads the socket now: a sync call (its thread), _WATCHER, or nobody.
        self._leader: Any = None
        #: Sync calls whose thread waits on its queue (their answer not read yet).
        self._followers: collections.OrderedDict[int, _Call] = collections.OrderedDict()
        self._hung_up = False  # the watcher saw the socket hang up while another read
        self._broken: _Conn | None = None  # a leader read the end (or a violation) here
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._answered = 0
        self._closing = False
        self._fail_message = ""
        self._last_status: int | None = None
        self._violation = ""
        # not over a VM's forwarded socket (qemu): its round trip (~300 µs) is far above
        # the window, so the poll would only miss and cost the caller CPU
        local = getattr(launcher, "partial_pipes", False)
        self._linger = LINGER if local and len(os.sched_getaffinity(0)) > 1 else 0.0

    # -- start / stop -------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._state

    @property
    def pid(self) -> int | None:
        """PID of the current worker process (for tests and diagnostics)."""
        conn = self._conn
        return conn.pid if conn is not None else None

    def start(self) -> None:
        """Start the worker and wait until ``init_fn`` has run in it."""
        self.adopt(self.await_ready(self.spawn()))

    def spawn(self) -> _Conn:
        """Start the worker process (from the thread that will outlive it: a wrapper's
        parent-death signal, bwrap's ``--die-with-parent``, follows the spawning thread)."""
        return self._launch(ready=False)

    def await_ready(self, conn: _Conn) -> _Conn:
        """Wait until ``init_fn`` has run in the worker (any thread may wait)."""
        try:
            self._await_ready(conn)
        except BaseException:
            self._reap(conn, kill=True)
            raise
        return conn

    def adopt(self, conn: _Conn) -> None:
        """Serve calls with this ready worker."""
        with self._lock:
            self._conn = conn
            self._state = READY
        self._reader = threading.Thread(target=self._watch, name="pysb-watcher", daemon=True)
        self._reader.start()

    def _launch(self, ready: bool = True) -> _Conn:
        ours, theirs, extra = self._channel()
        try:
            started_r, started_w = transport.started_pipe()
        except BaseException:
            _close_channel(ours, theirs)
            raise
        try:
            args = {
                **extra,
                "started_fd": started_w,
                "init_fn": self._init_fn,
                "threads": self._threads,
                "asyncio": self._asyncio,
                "sys_path": _caller_sys_path(),
                "program_modules": self._program_modules,
            }
            proc = self._launcher.spawn(args, [*theirs, started_w])
        except BaseException:
            _close_channel(ours, [])
            os.close(started_r)
            raise
        finally:  # the worker's ends are its own now (or nobody's): never kept here
            _close_channel(None, [*theirs, started_w])
        conn = _Conn(proc, ours, started_r, self._max_frame)
        return self.await_ready(conn) if ready else conn

    def _channel(self) -> tuple[Any, list[int], dict[str, int]]:
        """Our end(s) of a new worker's channel, the worker's fds, and their arguments:
        two pipes for a local worker (``Provider.partial_pipes``), else a socketpair."""
        if getattr(self._launcher, "partial_pipes", False):
            (call_r, call_w), (answer_r, answer_w) = transport.call_pipes()
            return (answer_r, call_w), [call_r, answer_w], {"fd": call_r, "out_fd": answer_w}
        ours, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for end in (ours, child):  # a 10 MiB payload in a few writes, not fifty
            for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                try:
                    end.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
                except OSError:
                    pass  # the kernel's default (net.core.wmem_max caps it anyway)
        fd = child.detach()
        return ours, [fd], {"fd": fd}

    def _await_ready(self, conn: _Conn) -> None:
        try:
            kind, _, payload = transport.read_first(
                conn.read_fd, self._start_timeout, self._max_frame
            )
        except transport.ChannelClosed:  # FrameTooLarge included: the worker is killed
            kind, payload = -1, b""
        if kind == -1:
            status = self._reap(conn, kill=True)
            raise SandboxError(
                "the sandboxed worker exited during start-up"
                + (f" ({_describe_status(status)})" if status is not None else "")
                + f" or was not ready within {self._start_timeout:g} s; its messages, if "
                "any, are above on stderr"
            )
        if kind == transport.INIT_FAILED:
            cause = rebuild_chain(payload, self._allowed)
            raise SandboxError(
                f"init_fn {self._init_fn} failed in the sandbox: {type(cause).__name__}: {cause}"
            ) from cause
        if kind != transport.READY:
            raise SandboxProtocolError(f"unexpected frame {kind} from the sandbox at start-up")

    def _reap(
        self, conn: _Conn, *, kill: bool, wait: float = 2.0, close: bool = True
    ) -> int | None:
        """Make sure the worker process is gone (it is our child: signalled by its PID)."""
        proc = conn.proc
        if kill and proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        try:
            status = proc.wait(timeout=wait)
        except Exception:
            try:
                proc.kill()
            except OSError:
                pass
            status = proc.wait()
        if close:
            conn.close()
        release = getattr(self._launcher, "release", None)
        if release is not None:
            release(proc)
        self._last_status = status
        return status

    def stop(self) -> None:
        """Refuse new calls, wait (bounded) for running ones, stop the worker, clean up."""
        with self._lock:
            if self._state == STOPPED:
                return
            self._closing = True
            if self._state != FAILED:
                self._state = STOPPING
            deadline = time.monotonic() + self._stop_timeout
            while self._pending and self._state != FAILED:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            leftover = list(self._pending.values())
            self._pending.clear()
            conn = self._conn
        for call in leftover:
            self._deliver(
                call,
                (
                    _FAILED_CALL,
                    SandboxProtocolError("the sandbox was stopped before this call finished"),
                ),
            )
        if conn is not None:
            try:
                with self._send_lock:
                    conn.writer.send(transport.SHUTDOWN, 0)
            except OSError:
                pass
        # The reader thread owns the socket: it sees the end of stream, reaps the worker
        # and closes the socket (and stops a worker that a concurrent restart started).
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=self._stop_timeout + 1.0)
            if reader.is_alive():
                self.kill_worker()
                reader.join(timeout=5.0)
        with self._lock:
            self._state = STOPPED
            self._conn = None
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1
        self._launcher.finish(self._last_status)

    def kill_worker(self) -> None:
        """Kill the current worker (timeout handling); the reader thread restarts it."""
        conn = self._conn
        if conn is not None and conn.proc.poll() is None:
            try:
                conn.proc.kill()  # our own child, by its PID
            except OSError:
                pass

    # -- who reads the socket ------------------------------------------------------------

    def _wake_watcher(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass  # the pipe is full: the watcher is already due to wake

    def _pass_role(self) -> None:
        """Called with the lock held by the leader giving up the role: to a waiting sync
        call (one token, one wake-up), else to the watcher when a call still waits for
        frames or the worker is dying, else to nobody."""
        pending, followers = self._pending, self._followers
        if self._broken is None and not self._hung_up:
            while followers:
                _, call = followers.popitem(last=False)
                if call.id in pending:
                    self._leader = call
                    call.sink.put((_LEAD, None))
                    return
            if not pending:
                self._leader = None
                return
        if self._leader is not _WATCHER:
            self._leader = _WATCHER
            self._wake_watcher()

    def _dispatch(self, kind: int, cid: int, payload: Any) -> None:
        """One frame read by the leader for another call (or for none)."""
        pending = self._pending
        if kind == transport.RESULT or kind == transport.EXCEPTION or kind == _RESULT_OOB:
            call = pending.pop(cid, None)
        elif kind == transport.OUT or kind == transport.ERR:
            call = pending.get(cid)
        else:
            return  # nothing else may come after READY: a forged frame is dropped
        if call is None:
            if kind == transport.OUT or kind == transport.ERR:
                # a thread that outlived its call: its output is still the program's
                _write(sys.stdout if kind == transport.OUT else sys.stderr, payload)
            return
        self._deliver(call, (kind, payload))
        if kind >= transport.RESULT:
            self._after_answer()

    def _after_answer(self) -> None:
        self._answered += 1
        if self._answered >= 256 or self._closing:
            self._answer_chores()

    def _answer_chores(self) -> None:
        if self._answered >= 256:  # keep the started pipe from filling up
            self._answered = 0
            conn = self._conn
            if conn is not None:
                self._note_started(conn)
        if self._closing and not self._pending:
            with self._lock:
                self._cond.notify_all()

    def _lead(self, call: _Call, deadline: float | None) -> Any:
        """Read frames as the leader until ``call``'s answer; return its item, or ``None``
        when the role went to the watcher (the worker died) and the call waits on."""
        conn = self._conn
        if conn is None or self._broken is conn:
            with self._lock:
                self._pass_role()
            return None
        reader = conn.reader
        read = reader.read
        my_id = call.id
        pending = self._pending
        linger = self._linger
        while True:
            # only a lone call lingers: with others pending, frames come anyway, and the
            # other callers' threads need the GIL that a polling thread keeps taking
            reader.linger = linger if len(pending) == 1 else 0.0
            if deadline is not None and not reader.ready(deadline - time.monotonic()):
                raise _Expired
            try:
                kind, cid, payload = read()
            except transport.FrameTooLarge as exc:
                self._violation = str(exc)
                kind = -1
            except transport.ChannelClosed:
                kind = -1
            if kind == -1:
                with self._lock:
                    self._broken = conn
                    self._pass_role()  # to the watcher: it runs the death and restart
                return None
            if cid != my_id:
                self._dispatch(kind, cid, payload)
                continue
            if kind == transport.OUT or kind == transport.ERR:
                _write(sys.stdout if kind == transport.OUT else sys.stderr, payload)
                continue
            if kind != transport.RESULT and kind != transport.EXCEPTION and kind != _RESULT_OOB:
                continue  # a forged frame is dropped
            pending.pop(my_id, None)
            with self._lock:
                if self._followers or pending or self._broken is not None or self._hung_up:
                    self._pass_role()
                else:  # nobody else waits: _pass_role's outcome, without its checks
                    self._leader = None
            self._answered += 1
            if self._answered >= 256 or self._closing:
                self._answer_chores()
            return (kind, payload)

    def _watch(self) -> None:
        """The watcher thread: sleeps until the worker hangs up or it is given the role."""
        wake_r = self._wake_r
        poller = select.poll()
        poller.register(wake_r, select.POLLIN)
        watched = -1
        while True:
            conn = self._conn
            if conn is None:
                return
            with self._lock:
                mine = self._leader is _WATCHER
                if not mine and self._leader is None and self._broken is conn:
                    self._leader = _WATCHER
                    mine = True
            if not mine:
                fd = -1 if self._hung_up else conn.read_fd
                if fd != watched:
                    if watched >= 0:
                        try:
                            poller.unregister(watched)
                        except KeyError:
                            pass
                    if fd >= 0:
                        poller.register(fd, 0)  # hang-up and errors only: data never wakes us
                    watched = fd
                try:
                    events = poller.poll()
                except InterruptedError:
                    continue
                for fd_, _ in events:
                    if fd_ == wake_r:
                        try:
                            os.read(wake_r, 4096)
                        except OSError:
                            pass
                    elif fd_ == watched:
                        with self._lock:
                            self._hung_up = True  # the role comes back to us until the end
                            if self._leader is None:
                                self._leader = _WATCHER
                continue
            if self._broken is not conn and self._watcher_reads(conn):
                continue
            if watched >= 0:
                try:
                    poller.unregister(watched)
                except KeyError:
                    pass
                watched = -1
            new = self._after_death(conn)
            with self._lock:
                self._broken = None
                self._hung_up = False
                if new is None:
                    self._leader = None
                    return
                if self._leader is _WATCHER:
                    self._pass_role()

    def _watcher_reads(self, conn: _Conn) -> bool:
        """Read as the leader while only async calls wait; True when the role was passed
        on (to a sync call, or to nobody), False when the worker's socket ended."""
        conn.reader.linger = 0.0  # a leader's setting: the watcher never polls in a loop
        read = conn.reader.read
        while True:
            with self._lock:
                if (self._followers or not self._pending) and not self._hung_up:
                    self._pass_role()
                    if self._leader is not _WATCHER:
                        return True
            try:
                kind, cid, payload = read()
            except transport.FrameTooLarge as exc:
                self._violation = str(exc)
                return False
            except transport.ChannelClosed:
                return False
            self._dispatch(kind, cid, payload)

    def _note_started(self, conn: _Conn) -> None:
        pending = self._pending
        for cid in conn.started.drain():
            call = pending.get(cid)
            if call is not None and call.conn is conn:
                call.started = True

    def _after_death(self, old: _Conn) -> _Conn | None:
        """The worker's socket closed: reap it, fail or keep its calls, maybe restart."""
        if self._closing:  # a graceful exit is expected: give it time before a kill
            status = self._reap(old, kill=False, wait=self._stop_timeout, close=False)
        else:
            # The worker closed the channel: it exited or is dying. A wrapper (bwrap,
            # firejail, qemu's supervisor) outlives the program by a moment: wait for its
            # status before any kill, which would report an exit as "killed by SIGKILL".
            # A worker that broke the protocol is killed at once.
            status = self._reap(old, kill=bool(self._violation), wait=3.0, close=False)
        self._note_started(old)  # the worker is gone: everything it wrote is in the pipe
        old.close()
        why = _describe_status(status)
        if self._violation:
            why, self._violation = f"was killed for breaking the protocol ({self._violation})", ""
        with self._lock:
            if self._closing:
                doomed = list(self._pending.values())
                self._pending.clear()
                self._cond.notify_all()
                for call in doomed:
                    self._deliver(
                        call,
                        (
                            _FAILED_CALL,
                            SandboxProtocolError(
                                f"the sandboxed worker {why} while the sandbox was stopping"
                            ),
                        ),
                    )
                return None
            now = time.monotonic()
            self._deaths.append(now)
            while self._deaths and now - self._deaths[0] > DEATH_WINDOW:
                self._deaths.popleft()
            for call in [c for c in self._pending.values() if c.started]:
                if call.retry:
                    call.started = False
                    continue
                del self._pending[call.id]
                self._deliver(
                    call,
                    (
                        _FAILED_CALL,
                        SandboxProtocolError(
                            f"the sandboxed worker {why} while running {call.name}(); the "
                            "call was not run again (use @sandbox(retry_on_crash=True) for "
                            "calls that are safe to repeat)"
                        ),
                    ),
                )
            self._state = RESTARTING
        while True:
            with self._lock:
                if len(self._deaths) >= MAX_DEATHS or self._closing:
                    self._fail_closed(why)
                    return None
            try:
                conn = self._launch()
            except Exception as exc:
                with self._lock:
                    now = time.monotonic()
                    self._deaths.append(now)
                    why = f"could not be restarted ({exc})"
                continue
            with self._lock:
                if self._closing:  # stopped meanwhile: stop this new worker too
                    self._conn = conn
                    self._state = STOPPING
                    self._cond.notify_all()
                    try:
                        conn.writer.send(transport.SHUTDOWN, 0)
                    except OSError:
                        pass
                    return conn
                resend = sorted(
                    (c for c in self._pending.values() if not c.started), key=lambda c: c.id
                )
                for call in resend:
                    call.conn = conn
                self._conn = conn
                self._state = READY
                self._cond.notify_all()
            if resend:
                # another thread sends, so that this one keeps reading answers meanwhile
                threading.Thread(target=self._resend, args=(conn, resend), daemon=True).start()
            return conn

    def _fail_closed(self, why: str) -> None:
        """Called with the lock held: no more restarts; every call fails from now on."""
        if self._closing:
            self._state = STOPPING
            message = "the sandbox was stopped"
        else:
            self._state = FAILED
            message = (
                f"the sandboxed worker died {len(self._deaths)} times within "
                f"{int(DEATH_WINDOW)} s (last: it {why}); the sandbox failed closed and is no "
                "longer restarted. Leave and re-enter sandboxes() to start a new one"
            )
        self._fail_message = message
        self._conn = None
        doomed = list(self._pending.values())
        self._pending.clear()
        self._cond.notify_all()
        for call in doomed:
            self._deliver(call, (_FAILED_CALL, SandboxProtocolError(message)))
        return None

    def _resend(self, conn: _Conn, calls: list[_Call]) -> None:
        with self._send_lock:
            for call in calls:
                if call.id in self._pending and not call.started and self._conn is conn:
                    try:
                        conn.writer.send(call.kind, call.id, call.payload)
                    except OSError:
                        return

    @staticmethod
    def _deliver(call: _Call, item: tuple[int, Any]) -> None:
        if call.loop is None:
            call.sink.put(item)
        else:
            try:
                call.loop.call_soon_threadsafe(call.sink.put_nowait, item)
            except RuntimeError:  # the caller's loop is closed: nobody is waiting
                pass

    # -- calls ---------------------------------------------------------------------------

    def _submit(self, call: _Call, deadline: float | None) -> None:
        with self._lock:
            while self._state == RESTARTING:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise SandboxTimeoutError(
                        f"{call.name}() timed out while the sandboxed worker was restarting"
                    )
                self._cond.wait(left)
            state = self._state
            if state != READY:
                if state == FAILED:
                    raise SandboxProtocolError(self._fail_message)
                raise SandboxProtocolError(
                    "the sandbox is stopping or stopped; calls are accepted only inside "
                    "`with sandboxes():`"
                )
            call.id = cid = next(self._ids)
            self._pending[cid] = call
            call.conn = conn = self._conn
            if self._leader is None:
                if call.loop is None:
                    self._leader = call  # this thread reads its own answer
                else:
                    self._leader = _WATCHER
                    self._wake_watcher()
        with self._send_lock:
            if conn is self._conn and not call.started:
                try:
                    conn.writer.send(call.kind, cid, call.payload)  # type: ignore[union-attr]
                except OSError:
                    pass  # the worker died: the reader thread restarts it and sends again

    def _let_go(self, call: _Call) -> None:
        """The call is over for its thread: it no longer waits, and never reads again."""
        with self._lock:
            self._followers.pop(call.id, None)
            if self._leader is call:
                self._pass_role()

    def _timed_out(self, call: _Call, timeout: float) -> SandboxTimeoutError:
        with self._lock:
            self._followers.pop(call.id, None)
            if self._leader is call:
                self._pass_role()
            still = self._pending.pop(call.id, None) is not None
            doomed = still and call.conn is not None and call.conn is self._conn
            if doomed and self._state == READY:
                # New calls wait for the next worker instead of going to this dying one
                # (which would fail them as "killed while running"); _after_death restarts.
                self._state = RESTARTING
        if doomed:
            self.kill_worker()  # it may be running: only a kill stops it
        return SandboxTimeoutError(
            f"{call.name}() did not finish within {timeout:g} s; the sandboxed worker was "
            "killed and is being restarted"
        )

    def call(
        self,
        name: str,
        ref: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        timeout: float | None = None,
        retry: bool = False,
        encoded: bool = False,
    ) -> Any:
        """Run ``ref(*args, **kwargs)`` in the worker from a thread; stream its output.

        ``encoded``: return the answer (result or raised exception) undecoded, in
        :mod:`~pysb_core.remote.answer`'s envelope, for a process that relays it."""
        sink: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        call = _Call(name, (ref, args, kwargs), retry, sink, None)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._submit(call, deadline)
        get = sink.get
        try:
            while True:
                if self._leader is call:
                    try:
                        item = self._lead(call, deadline)
                    except _Expired:
                        raise self._timed_out(call, timeout) from None  # type: ignore[arg-type]
                    if item is not None:
                        self._followers.pop(call.id, None)
                        return self._on_frame(*item, encoded)
                    with self._lock:  # the worker died: wait for the restart's verdict
                        if call.id in self._pending and self._leader is not call:
                            self._followers[call.id] = call
                elif sink.empty():
                    with self._lock:
                        if self._leader is None and call.id in self._pending:
                            self._leader = call
                            self._followers.pop(call.id, None)
                            continue
                        if self._leader is not call:
                            self._followers[call.id] = call
                if self._leader is call:
                    continue
                if deadline is None:
                    kind, data = get()
                else:
                    try:
                        kind, data = get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        raise self._timed_out(call, timeout) from None  # type: ignore[arg-type]
                if kind == _LEAD:
                    continue
                value = self._on_frame(kind, data, encoded)
                if value is not _MORE:
                    self._followers.pop(call.id, None)
                    return value
        except Exception:
            self._let_go(call)
            raise
        except BaseException:  # Ctrl-C in the caller: stop waiting, forget the answer
            self._abandon(call)
            raise

    async def call_async(
        self,
        name: str,
        ref: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        timeout: float | None = None,
        retry: bool = False,
    ) -> Any:
        """Like :meth:`call`, from a coroutine (never blocks the event loop while waiting)."""
        import asyncio

        loop = asyncio.get_running_loop()
        sink: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        call = _Call(name, (ref, args, kwargs), retry, sink, loop)
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._state == READY:
            self._submit(call, deadline)
        else:  # restarting: wait in a thread, not on the loop
            await asyncio.to_thread(self._submit, call, deadline)
        try:
            while True:
                if deadline is None:
                    kind, data = await sink.get()
                else:
                    try:
                        kind, data = await asyncio.wait_for(
                            sink.get(), max(0.0, deadline - time.monotonic())
                        )
                    except TimeoutError:
                        raise self._timed_out(call, timeout) from None  # type: ignore[arg-type]
                value = self._on_frame(kind, data)
                if value is not _MORE:
                    return value
        except Exception:
            raise
        except BaseException:  # cancelled: stop waiting, forget the answer
            self._abandon(call)
            raise

    def _abandon(self, call: _Call) -> None:
        """The caller stopped waiting; the call may still finish in the worker, unseen."""
        with self._lock:
            self._pending.pop(call.id, None)
            self._followers.pop(call.id, None)
            if self._leader is call:
                self._pass_role()
            if self._closing and not self._pending:
                self._cond.notify_all()

    def _on_frame(self, kind: int, data: Any, encoded: bool = False) -> Any:
        """One frame of a call's answer: output is written through, the result decoded
        (restricted), an exception raised; ``_MORE`` while the call is still running.
        ``encoded``: a result or the child's exception is returned in its envelope."""
        if kind == _RESULT and not encoded:
            return _loads(data, self._allowed)
        if encoded and kind in (_RESULT, transport.EXCEPTION, _RESULT_OOB):
            return answer.encode(kind, data)
        if kind == _RESULT_OOB:
            return unpickler.loads_oob(data, self._allowed)
        if kind == transport.OUT:
            _write(sys.stdout, data)
        elif kind == transport.ERR:
            _write(sys.stderr, data)
        else:
            raise self._exception(kind, data)
        return _MORE

    def _exception(self, kind: int, data: Any) -> BaseException:
        if kind == transport.EXCEPTION:
            return rebuild_chain(data, self._allowed)
        if kind == _FAILED_CALL:
            return data
        return SandboxProtocolError(f"unexpected frame {kind} from the sandbox")


def _close_channel(ours: Any, fds: list[int]) -> None:
    """Close our end(s) of a channel (a socket, or a tuple of fds) and the fds given."""
    if isinstance(ours, socket.socket):
        ours.close()
    elif ours is not None:
        fds = [*ours, *fds]
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _describe_status(status: int | None) -> str:
    if status is None:
        return "stopped answering"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    if 128 < status < 128 + 65:  # a wrapper (firejail, a shell) reports its child's signal so
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = ""
        if name:
            return f"exited with status {status} (as when killed by {name})"
    return f"exited with status {status}"


def _caller_sys_path() -> list[str]:
    """The caller's module search path, with '' made absolute (the worker's cwd may differ)."""
    cwd = os.getcwd()
    return [os.path.abspath(p) if p else cwd for p in sys.path if isinstance(p, str)]


Launcher = Callable[..., Any]
