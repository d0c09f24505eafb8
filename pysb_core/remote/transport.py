"""Length-prefixed frames over partial mode's inherited channel: two pipes, or a socketpair.

Why inherited fds: the sandbox needs no TCP port and no network for its own transport, and
the file descriptor itself is the capability -- there is no token that could leak.

Why two pipes where the worker is a local process (:func:`call_pipes`, issue 30): a pipe's
small write copies into a page the pipe already has, a Unix socket's allocates and charges
an ``skb``: a ping-pong of one ``writev`` and one ``readv`` per side costs ~11 µs over two
pipes against ~17 µs over a socketpair on the reference machine. A provider that forwards
each inherited fd as one port of its own (a VM: qemu) keeps the single bidirectional
socket (``Provider.partial_pipes``). Either way the host's read end reports the worker's
hang-up to ``poll`` (POLLHUP), and the start-up frame is read under a deadline by
:func:`read_first` rather than a socket option.

Why ``os.readv``/``os.writev`` rather than socket methods: inside the sandbox the network
guard may patch ``socket.socket`` methods and audit ``socket.sendmsg``; plain fd I/O,
captured when this module is imported (before any guard is installed), is neither judged
nor slowed down. Every frame is::

    <length: u64> <call id: u64> <kind: u8> <payload: length bytes>

A frame is written with one ``writev`` (no copy of large payloads) under a lock, so that
frames of concurrent calls never interleave. Frames to the worker are zero-padded to at
least :data:`BLOCK` bytes, so that the worker reads a call with one read.

Why one module: the frame layout, its writer, its readers (a buffered one for the caller, an
exact one for the worker's epoll threads) and the started-call log all share the header format
and the captured fd functions; one module keeps a single definition of both, which the two sides
of partial mode import before any guard is installed.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from time import monotonic as _monotonic
from time import perf_counter as _perf_counter

from pysb_core.remote import buffers as _buffers

TYPE_CHECKING = False  # typing is not imported inside the sandbox
if TYPE_CHECKING:
    from collections.abc import Callable

TYPE_CHECKING = False  # typing is not imported inside the sandbox (start-up budget)
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

HEADER = struct.Struct("<QQB")
HEADER_SIZE = HEADER.size

# parent -> child
CALL = 1  # payload: pickle((ref, args, kwargs))
SHUTDOWN = 2  # no payload: finish and exit
CALL_OOB = 3  # like CALL, its large buffers out of band (pysb_core.remote.buffers)
#: CALL and CALL_OOB of a call that is safe to repeat (``retry_on_crash``): the worker
#: writes no started mark for it, since the host sends it again after a crash anyway.
CALL_RETRY = 4
CALL_OOB_RETRY = 5
# child -> parent
READY = 10  # payload: pickle(info dict); init_fn has run
STARTED = 11  # (unused on the socket: see StartedLog)
OUT = 12  # utf-8 text written to sys.stdout by the call
ERR = 13  # utf-8 text written to sys.stderr by the call
RESULT = 14  # payload: pickle(return value)
EXCEPTION = 15  # payload: pickle(wire description of the exception)
INIT_FAILED = 16  # payload: like EXCEPTION, for init_fn
RESULT_OOB = 17  # like RESULT, its large buffers out of band (pysb_core.remote.buffers)
#: Kinds whose payload is a buffer table, a pickle and buffers (read apart).
OOB_KINDS = frozenset({CALL_OOB, CALL_OOB_RETRY, RESULT_OOB})

#: The largest payload of each kind of frame from the child (issue 26 #3): a bigger one is a
#: protocol violation, refused before the host allocates anything. The honest worker keeps
#: within them: it splits output, and answers a result or an exception above the bound
#: with a short SandboxError instead.
MAX_RESULT = 256 << 20
MAX_EXCEPTION = 16 << 20
MAX_OUTPUT = 1 << 20
MAX_OTHER = 64 << 10
#: Characters of output per OUT/ERR frame: at most four bytes each in UTF-8.
OUTPUT_CHARS = MAX_OUTPUT // 4


def child_limits() -> tuple[int, ...]:
    """The payload bound of each frame kind (0-255) the host accepts from the child."""
    limits = [MAX_OTHER] * 256
    limits[RESULT] = limits[RESULT_OOB] = MAX_RESULT
    limits[EXCEPTION] = limits[INIT_FAILED] = MAX_EXCEPTION
    limits[OUT] = limits[ERR] = MAX_OUTPUT
    return tuple(limits)


_BUFFER_SIZE = 256 * 1024
#: Every frame to the worker takes at least this many bytes (its payload zero-padded): the
#: worker reads a call with one read of a block (ExactFrameReader). 512 holds the pickle
#: of a call with a few small arguments; a larger frame takes a second read for its rest.
BLOCK = 512
_PADDING = bytes(BLOCK)
_writev = os.writev
_yield = os.sched_yield
_readv = os.readv
_pack = HEADER.pack_into
_unpack = HEADER.unpack_from


class ChannelClosed(Exception):
    """The other end closed the socket (or died)."""


class FrameTooLarge(ChannelClosed):
    """The other end announced a frame above the limit: a protocol violation."""


class BadBufferTable(FrameTooLarge):
    """An out-of-band frame's buffer table breaks its bounds: a protocol violation."""


#: A ``bytes`` buffer up to this size is read into a reader's reused scratch buffer and
#: copied out once (a fresh ``bytearray`` would be zeroed and faulted in first, then
#: copied into the ``bytes`` anyway); larger ones are read into their own buffer.
SCRATCH_MAX = 32 << 20


def _oob_layout(size: int, take: Any, take_bytes: Any) -> _buffers.OOBPayload:
    """Read an ``*_OOB`` payload of ``size`` bytes with ``take(n)``, checking the buffer
    table before any buffer is allocated (pysb_core.remote.buffers)."""
    if size < _buffers.COUNT.size:
        raise BadBufferTable(f"an out-of-band frame of {size} bytes has no buffer table")
    try:
        (count,) = _buffers.COUNT.unpack(take(_buffers.COUNT.size))
        need = _buffers.check_count(size, count)
        entries = _buffers.parse_table(size, take(need) if need else b"")
    except _buffers.BufferLayoutError as exc:
        raise BadBufferTable(str(exc)) from None
    rest = size - _buffers.COUNT.size - need - sum(length for length, _ in entries)
    data = take(rest)
    parts = [
        (code, take_bytes(length) if code == _buffers.BYTES else take(length))
        for length, code in entries
    ]
    return _buffers.OOBPayload(data, parts)


class FrameWriter:
    """Writes whole frames to one fd; safe to share between threads.

    ``padded``: every frame takes at least :data:`BLOCK` bytes (the host's writer to the
    worker, whose reader reads a block at a time)."""

    __slots__ = ("_fd", "_lock", "_pad")

    def __init__(self, fd: int, padded: bool = False) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._pad = BLOCK if padded else 0

    def close(self) -> None:
        """Forget the fd before its owner closes it: a reused fd number is never written."""
        with self._lock:
            self._fd = -1

    def send(self, kind: int, call_id: int, payload: Any = b"") -> None:
        """Send one frame; ``payload`` is bytes-like, or a list of them (written together)."""
        if type(payload) is list:
            self._send_parts(kind, call_id, payload)
            return
        size = len(payload)
        header = HEADER.pack(size, call_id, kind)
        with self._lock:
            if self._fd < 0:
                raise OSError(errno.EBADF, "the sandbox channel is closed")
            if size < 65536:
                # small frames: one buffer, one syscall (the common case)
                data = header + payload if size else header
                if len(data) < self._pad:
                    data += _PADDING[: self._pad - len(data)]
                written = _writev(self._fd, (data,))
                if written == len(data):
                    return
                self._write_rest(memoryview(data)[written:])
                return
            view = memoryview(payload).cast("B")
            written = _writev(self._fd, (header, view))
            if written < HEADER_SIZE:
                self._write_rest(memoryview(header)[written:])
                written = HEADER_SIZE
            self._write_rest(view[written - HEADER_SIZE :])

    def _send_parts(self, kind: int, call_id: int, parts: list[Any]) -> None:
        views = [memoryview(p).cast("B") for p in parts]
        views = [v for v in views if len(v)]
        size = sum(len(v) for v in views)
        views.insert(0, memoryview(HEADER.pack(size, call_id, kind)))
        if HEADER_SIZE + size < self._pad:
            views.append(memoryview(_PADDING)[: self._pad - HEADER_SIZE - size])
        with self._lock:
            fd = self._fd
            if fd < 0:
                raise OSError(errno.EBADF, "the sandbox channel is closed")
            i = 0
            while i < len(views):
                n = _writev(fd, views[i : i + 512])  # below IOV_MAX
                while n:
                    head = views[i]
                    if n >= len(head):
                        n -= len(head)
                        i += 1
                    else:
                        views[i] = head[n:]
                        n = 0

    def _write_rest(self, view: memoryview) -> None:
        fd = self._fd
        while view:
            n = _writev(fd, (view,))
            view = view[n:]


#: How a lingering read (FrameReader's ``linger``) adapts, from what it saw:
#:
#: - the frame came while it polled: the sides are on two CPUs, polling saved the caller
#:   a wake-up; the next read lingers too.
#: - the frame was there before the first poll, or right after the reader gave its CPU
#:   away once (the worker ran on this CPU meanwhile: the sides share it): polling buys
#:   nothing; the next :data:`LINGER_TOGETHER` reads block at once.
#: - nothing came within the window (a call that computes, or a worker waiting for this
#:   very CPU): the next :data:`LINGER_SKIP` reads block at once, so that a run of long
#:   calls costs one window in LINGER_SKIP + 1 calls, not one each.
#:
#: A read that blocks instead is timed: one that waited longer than :data:`LINGER_APART`
#: and less than :data:`LINGER_LATE` (not a call that computes) was a wake-up across CPUs,
#: and the next read lingers again.
LINGER_TOGETHER = 64
LINGER_SKIP = 16
LINGER_APART = 25e-6
LINGER_LATE = 500e-6


class FrameReader:
    """Reads frames from one fd through a buffer, so a burst of frames costs one syscall.

    ``linger`` (seconds, set by the reader's owner before a read; 0 by default): when no
    frame is buffered, give the CPU away once (``sched_yield``), then poll the fd without
    sleeping for up to that long before the blocking read. Why: on a machine whose idle
    CPUs halt (a VM), waking a reader that sleeps on one CPU for a writer on the other
    costs ~20 µs per wake-up, more than a trivial call's whole work on both sides
    (docs/performance.md, "Partial mode", 2026-12-07); a reader that is still running
    when the answer comes needs no wake-up. The yield lets a writer woken on the
    reader's own CPU run at once; the reader stops polling for a while when that is what
    answered, or when nothing came in time (:data:`LINGER_TOGETHER` and the rules above
    it). The poll only reads the fd's state: what the frame holds is read and bounded as
    before.

    Not thread-safe: one reader at a time (the child's workers take turns under a lock).
    """

    __slots__ = (
        "_buf",
        "_end",
        "_fd",
        "_max",
        "_poll",
        "_scratch",
        "_skip",
        "_start",
        "_view",
        "linger",
    )

    def __init__(self, fd: int, max_size: tuple[int, ...] | None = None) -> None:
        self._fd = fd
        self._poll: Any = None
        self.linger = 0.0
        self._skip = 0
        self._scratch = bytearray()
        self._max = max_size  # per frame kind (see child_limits), or no bound
        self._buf = bytearray(_BUFFER_SIZE)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0

    def _fill(self) -> None:
        """Read more bytes after the buffered ones (compacting first when needed)."""
        if self._start and self._end == self._start:
            self._start = self._end = 0
        elif self._end == len(self._buf):
            rest = self._end - self._start
            self._buf[:rest] = self._view[self._start : self._end]
            self._start, self._end = 0, rest
        waited = 0.0
        if self.linger:  # _linger, inline (the caller's hot path)
            if self._skip:
                self._skip -= 1
                waited = _perf_counter()
            else:
                poll = (self._poll or self._poller()).poll
                if not poll(0):
                    _yield()  # a worker woken on this CPU runs now (else: returns at once)
                if poll(0):  # the worker ran on this CPU meanwhile: the sides share it
                    self._skip = LINGER_TOGETHER
                else:
                    end = _perf_counter() + self.linger
                    while not poll(0):
                        if _perf_counter() > end:
                            self._skip = LINGER_SKIP
                            break
        try:
            n = _readv(self._fd, (self._view[self._end :],))
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None
        if n == 0:
            raise ChannelClosed("end of stream")
        self._end += n
        if waited and LINGER_APART < _perf_counter() - waited < LINGER_LATE:
            self._skip = 0  # a wake-up across CPUs: the next read lingers

    def _take(self, n: int) -> bytearray:
        return _take_from(self, n)

    def _take_bytes(self, n: int) -> bytes:
        if n > SCRATCH_MAX:
            return bytes(_take_from(self, n))
        if len(self._scratch) < n:
            self._scratch = bytearray(n)
        view = memoryview(self._scratch)[:n]
        have = min(n, self._end - self._start)
        if have:
            view[:have] = self._view[self._start : self._start + have]
            self._start += have
        _read_into(self._fd, view[have:])
        return bytes(view)

    def ready(self, timeout: float) -> bool:
        """Whether a frame's header is buffered or arrives within ``timeout`` seconds (a
        reader with a deadline waits here, between frames, never inside one)."""
        if self._end - self._start >= HEADER_SIZE:
            return True
        if self.linger and timeout > self.linger and self._linger():
            return True
        poll = self._poll or self._poller()
        return bool(poll.poll(max(0, int(timeout * 1000 + 0.999))))

    def _linger(self) -> bool:
        """:meth:`_fill`'s lingering, for a read with a deadline: whether bytes came. The
        read that follows does not linger again (one more skip, counted for it): the
        bytes it finds at once are this poll's, not a sign that the sides share a CPU."""
        if self._skip:
            self._skip -= 1
            return False
        poll = (self._poll or self._poller()).poll
        if not poll(0):
            _yield()
        if poll(0):
            self._skip = LINGER_TOGETHER + 1
            return True
        end = _perf_counter() + self.linger
        while not poll(0):
            if _perf_counter() > end:
                self._skip = LINGER_SKIP
                return False
        self._skip = 1
        return True

    def _poller(self) -> Any:
        """The fd's poll object (made on first use: the worker never needs one)."""
        import select

        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        return self._poll

    def read(self) -> tuple[int, int, bytes | bytearray]:
        """Return ``(kind, call_id, payload)`` of the next frame; raise ChannelClosed at EOF."""
        while self._end - self._start < HEADER_SIZE:
            self._fill()
        size, call_id, kind = _unpack(self._buf, self._start)
        if self._max is not None and size > self._max[kind]:
            raise FrameTooLarge(
                f"a frame of kind {kind} and {size} bytes is above the limit of {self._max[kind]}"
            )
        if kind in OOB_KINDS:
            self._start += HEADER_SIZE
            return kind, call_id, _oob_layout(size, self._take, self._take_bytes)
        start = self._start + HEADER_SIZE
        if size == 0:
            self._start = start
            return kind, call_id, b""
        have = self._end - start
        if have >= size:
            self._start = start + size
            return kind, call_id, bytes(self._view[start : start + size])
        if size + HEADER_SIZE <= len(self._buf):
            if self._start:  # move the partial frame to the front, then fill behind it
                rest = self._end - self._start
                self._buf[:rest] = self._view[self._start : self._end]
                self._start, self._end = 0, rest
            while self._end < HEADER_SIZE + size:
                self._fill()
            self._start = HEADER_SIZE + size
            return kind, call_id, bytes(self._view[HEADER_SIZE : HEADER_SIZE + size])
        # a large frame: read it straight into its own buffer (one copy only)
        out = bytearray(size)
        out[:have] = self._view[start : self._end]
        self._start = self._end = 0
        view = memoryview(out)
        got = have
        fd = self._fd
        while got < size:
            try:
                n = _readv(fd, (view[got:],))
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if n == 0:
                raise ChannelClosed("end of stream")
            got += n
        return kind, call_id, out


def _read_into(fd: int, view: memoryview, wait: Callable[[], None] | None = None) -> None:
    """Fill ``view`` from ``fd``; ``wait`` (when given) runs before each read and raises
    ChannelClosed when the bytes are not there in time (:func:`read_first`)."""
    got, n = 0, len(view)
    while got < n:
        if wait is not None:
            wait()
        try:
            k = _readv(fd, (view[got:],))
        except InterruptedError:
            continue
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None
        if k == 0:
            raise ChannelClosed("end of stream")
        got += k


def _take_from(reader: FrameReader, n: int) -> bytearray:
    """The next ``n`` bytes of the stream in their own buffer: the buffered ones, then read
    straight into it (a large buffer is copied once, by the kernel)."""
    out = bytearray(n)
    have = min(n, reader._end - reader._start)
    if have:
        out[:have] = reader._view[reader._start : reader._start + have]
        reader._start += have
    if have < n:
        _read_into(reader._fd, memoryview(out)[have:])
    return out


class ExactFrameReader:
    """Reads one frame at a time and never a byte past it (the worker's side).

    Why: the worker's threads wait in one epoll set with the socket registered one-shot,
    so each frame wakes exactly one thread (no thundering herd, no hand-off); a byte of a
    second frame kept in a user-space buffer would be invisible to epoll, and that frame
    would wait for the next one. The host pads every frame it sends to at least
    :data:`BLOCK` bytes, so one read of a block takes a whole small frame (a call) and
    nothing after it; a larger frame's rest is read exactly. The host is the trusted side:
    its padding is skipped, never interpreted.
    Not thread-safe: one-shot epoll lets one thread read at a time.
    """

    __slots__ = ("_block", "_fd", "_pos", "_scratch", "_view")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._scratch = bytearray()
        self._block = bytearray(BLOCK)
        self._view = memoryview(self._block)
        self._pos = BLOCK  # where an out-of-band frame's reads are in the block

    def _fill(self, view: memoryview) -> None:
        got, size, fd = 0, len(view), self._fd
        while got < size:
            try:
                n = _readv(fd, (view[got:],))
            except InterruptedError:
                continue
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if n == 0:
                raise ChannelClosed("end of stream")
            got += n

    def _into(self, view: memoryview) -> None:
        """Fill ``view`` with the frame's next bytes: the block's rest, then the socket."""
        have = min(len(view), BLOCK - self._pos)
        if have:
            view[:have] = self._view[self._pos : self._pos + have]
            self._pos += have
        if have < len(view):
            self._fill(view[have:])

    def _take(self, n: int) -> bytearray:
        out = bytearray(n)
        if n:
            self._into(memoryview(out))
        return out

    def _take_bytes(self, n: int) -> bytes:
        if n > SCRATCH_MAX:
            return bytes(self._take(n))
        if len(self._scratch) < n:
            self._scratch = bytearray(n)
        view = memoryview(self._scratch)[:n]
        self._into(view)
        return bytes(view)

    def read(self) -> tuple[int, int, Any]:
        """Return ``(kind, call_id, payload)`` of the next frame; raise ChannelClosed at EOF."""
        try:
            n = _readv(self._fd, (self._view,))
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None
        if n != BLOCK:
            if n == 0:
                raise ChannelClosed("end of stream")
            self._fill(self._view[n:])
        block = self._block
        size, call_id, kind = _unpack(block, 0)
        if kind in OOB_KINDS:
            self._pos = HEADER_SIZE
            return kind, call_id, _oob_layout(size, self._take, self._take_bytes)
        end = HEADER_SIZE + size
        if end <= BLOCK:
            return kind, call_id, block[HEADER_SIZE:end]
        out = bytearray(size)
        out[: BLOCK - HEADER_SIZE] = self._view[HEADER_SIZE:]
        self._fill(memoryview(out)[BLOCK - HEADER_SIZE :])
        return kind, call_id, out


def read_first(fd: int, timeout: float, limits: tuple[int, ...]) -> tuple[int, int, bytes]:
    """The worker's first frame (READY or INIT_FAILED), every byte of it within ``timeout``
    seconds of the call: a worker that never answers, or stops inside its frame, cannot
    hold the host (``poll`` before each read, on a pipe or a socket alike). Reads exactly
    the frame, nothing after it; an out-of-band kind or a size above ``limits`` is refused
    before anything is allocated (the worker is hostile)."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = _monotonic() + timeout

    def wait() -> None:
        left = deadline - _monotonic()
        if left <= 0 or not poller.poll(max(1, int(left * 1000 + 0.999))):
            raise ChannelClosed(f"no start-up frame within {timeout:g} s")

    def take(n: int) -> bytes:
        out = bytearray(n)
        _read_into(fd, memoryview(out), wait)
        return bytes(out)

    size, call_id, kind = HEADER.unpack(take(HEADER_SIZE))
    if kind in OOB_KINDS or size > limits[kind]:
        raise FrameTooLarge(f"a start-up frame of kind {kind} and {size} bytes")
    return kind, call_id, take(size) if size else b""


#: A pipe of the call channel holds this much (the kernel caps an unprivileged request at
#: fs.pipe-max-size, 1 MiB by default): a large payload in a few writes, not hundreds.
PIPE_SIZE = 1 << 20


def call_pipes() -> tuple[tuple[int, int], tuple[int, int]]:
    """Two ``(read, write)`` pipes, close-on-exec: host-to-worker calls, worker-to-host
    answers (:mod:`pysb_core.remote.transport`'s "why two pipes")."""
    import fcntl

    pipes = (os.pipe2(os.O_CLOEXEC), os.pipe2(os.O_CLOEXEC))
    for r, _ in pipes:
        try:
            fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # the default 64 KiB works, in more writes
    return pipes


_STARTED = struct.Struct("<Q")
#: A started mark: the call's id (the worker writes it itself, inline in its hot path).
STARTED_ID = _STARTED
MAX_DRAIN = 2 << 20  # twice the pipe's size (started_pipe)
_write = os.write
_read = os.read


class StartedLog:
    """Which calls the worker began, on a pipe the host reads only when it needs to.

    The worker writes a call's id here *before* running it, so after a crash the host
    knows exactly which calls may have run (never send those again) and which never
    started (send them to the next worker). Being a separate pipe, it wakes nobody: the
    host drains it when the worker dies, and now and then to keep the pipe from filling.
    """

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def mark(self, call_id: int) -> None:
        """Child side: one 8-byte write (atomic on a pipe)."""
        _write(self._fd, _STARTED.pack(call_id))

    def drain(self) -> list[int]:
        """Host side: the ids written so far (the read end is non-blocking), at most
        :data:`MAX_DRAIN` bytes of them: what the pipe holds, so that a worker writing
        without end cannot keep the host reading or growing this buffer."""
        data = bytearray()
        while len(data) < MAX_DRAIN:
            try:
                chunk = _read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        usable = len(data) - len(data) % 8
        return [v for (v,) in _STARTED.iter_unpack(bytes(data[:usable]))]


def started_pipe() -> tuple[int, int]:
    """A (read, write) pipe for :class:`StartedLog`, as large as the kernel allows."""
    import fcntl

    r, w = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(r, False)
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass  # the default 64 KiB is enough: the host drains it regularly
    return r, w
