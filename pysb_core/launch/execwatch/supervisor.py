"""pysb's side of the learning watch: seccomp notifications in, learned events out.

A :class:`Watch` owns the parent end of the socket the sandbox's :mod:`.child` set-up sends
the listener over. Its thread answers every notification with ``CONTINUE`` (nothing is
ever refused) after turning the call into at most two :class:`~pysb_core.events.Event`:

- from the guarded interpreter, or a fork of it that executed nothing (same ``AT_RANDOM``
  bytes): nothing, at once (the guards record it, and better);
- from any other process: the path (resolved against its working directory or directory
  descriptor, links followed in its view), whether it existed and was a directory
  *before* the call (the caller waits meanwhile, as the guard stats before the call), and
  whether the call writes; or the address of a connection, datagram or bind, with the
  socket's type read from a copy of the descriptor (``pidfd_getfd``).

Accesses inside an implicit exposure (the interpreter, its libraries, the private
temporary directory) are not recorded, as the guard does not record them. The records are
bounded (:data:`MAX_RECORDS`); a watch that stops recording says so.

Why one module: nearly all of it is :class:`Watch`, one thread's loop over one listener:
receiving a notification, reading the caller's path or address from its memory and descriptors,
deciding whether to record it and answering ``CONTINUE`` are steps of one call that must stay in
order (the caller is blocked meanwhile); the set-up of the child's side is already in
:mod:`.child`.
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

from pysb_core.events import Event
from pysb_core.launch.execwatch import calls, remote
from pysb_core.launch.execwatch.calls import Call
from pysb_core.linux.execdeps import STARTUP_FILES
from pysb_core.linux.paths import is_within

if TYPE_CHECKING:
    from pysb_core.plan import LaunchPlan

#: Distinct accesses recorded at most per sandbox; past that, the watch only answers.
MAX_RECORDS = 65536
#: Watched processes remembered at once (their ``/proc/PID/mem`` stays open).
MAX_PROCESSES = 1024

_RECV = 0xC0502100  # SECCOMP_IOCTL_NOTIF_RECV: _IOWR('!', 0, struct seccomp_notif)
_SEND = 0xC0182101  # SECCOMP_IOCTL_NOTIF_SEND: _IOWR('!', 1, struct seccomp_notif_resp)
_ID_VALID = 0x40082102  # SECCOMP_IOCTL_NOTIF_ID_VALID: _IOW('!', 2, __u64)
_NOTIF_SIZE, _RESP_SIZE = 80, 24
_FLAG_CONTINUE = 1

_libc = ctypes.CDLL(None, use_errno=True)  # ctypes releases the GIL around each call
_ioctl = _libc.ioctl
_ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)


class _Process:
    """What the watch keeps of one thread: guarded or not, its memory, its pidfd."""

    __slots__ = ("guarded", "mem", "pidfd", "tgid")

    def __init__(self, tgid: int, guarded: bool, mem: int | None) -> None:
        self.tgid, self.guarded, self.mem = tgid, guarded, mem
        self.pidfd: int | None = None

    def close(self) -> None:
        for fd in (self.mem, self.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.mem = self.pidfd = None


class Watch:
    """Learn what the processes of one learning sandbox do (see the module).

    ``exposures``: ``(canonical path, implicit)`` of every exposure the sandbox has.
    """

    def __init__(self, sock: socket.socket, exposures: list[tuple[str, bool]]) -> None:
        self._sock = sock
        self._exposures = sorted(exposures, key=lambda e: -len(e[0]))
        self._events: list[Event] = []
        self._seen: set[tuple[Any, ...]] = set()
        self._procs: dict[int, _Process] = {}
        self._guarded: bytes | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._numbers = calls.by_number(os.uname().machine)
        self._order = sys.byteorder
        self.notes: list[str] = []
        self.answered = 0
        #: The sandbox's end of the socket, until :meth:`launched` closes it here.
        self.child_fd: int | None = None

    # -- life -----------------------------------------------------------------------

    def launched(self) -> None:
        """The sandbox started (or failed to): close its end of the socket here, so that
        the watch sees the end of the socket if the child set-up never answers."""
        if self.child_fd is not None:
            os.close(self.child_fd)
            self.child_fd = None

    def close(self) -> None:
        """The launch failed: nothing to watch."""
        self.launched()
        self._sock.close()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pysb-execwatch", daemon=True)
        self._thread.start()

    def events(self, timeout: float = 5.0) -> list[Event]:
        """What was learned; waits up to ``timeout`` for the watched processes to end (a
        process the sandbox left behind is still answered afterwards, never stopped)."""
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            return list(self._events)

    def _run(self) -> None:
        from pysb_core.launch.execute import quiet_thread

        quiet_thread()
        try:
            listener = self._receive()
        finally:
            self._sock.close()
        if listener is None:
            return
        try:
            self._serve(listener)
        finally:
            os.close(listener)
            for proc in self._procs.values():
                proc.close()

    def _receive(self) -> int | None:
        """The listener and the guarded interpreter's pid, from the child set-up."""
        try:
            data, ancillary, _, _ = self._sock.recvmsg(256, socket.CMSG_SPACE(4))
        except OSError:
            return None
        fds = [
            int.from_bytes(d[:4], self._order)
            for level, kind, d in ancillary
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS and len(d) >= 4
        ]
        for extra in fds[1:]:
            os.close(extra)
        words = data.split()
        if not fds or len(words) != 2 or words[0] != b"pid" or not words[1].isdigit():
            if fds:
                os.close(fds[0])
            if data.startswith(b"no "):
                self.notes.append(
                    "learning run: the programs the program executes are not watched here "
                    f"({data[3:].decode('ascii', 'replace')}): what they read, write or "
                    "connect to is not learned (docs/learning.md)"
                )
            return None
        main = remote.identity(int(words[1]))
        if main is None:
            self.notes.append(
                "learning run: pysb cannot read the sandbox's processes (/proc/PID/mem): "
                "what the programs it executes do is not learned (docs/learning.md)"
            )
        else:
            self._guarded = main[1]
        return fds[0]

    def _serve(self, listener: int) -> None:
        poll = select.poll()
        poll.register(listener, select.POLLIN)
        notif = ctypes.create_string_buffer(_NOTIF_SIZE)
        resp = ctypes.create_string_buffer(_RESP_SIZE)
        while True:
            events = poll.poll(1000)
            if not events:
                continue
            if not events[0][1] & select.POLLIN:
                return  # POLLHUP: no process uses the filter any more
            ctypes.memset(notif, 0, _NOTIF_SIZE)  # the kernel wants it zeroed
            if _ioctl(listener, _RECV, notif) != 0:
                continue  # ENOENT: the caller died before it was read
            raw = notif.raw
            ident = raw[:8]
            try:
                commit = self._handle(listener, raw)
            except Exception:
                commit = None
            ctypes.memmove(resp, ident + bytes(12) + _FLAG_CONTINUE.to_bytes(4, self._order), 24)
            _ioctl(listener, _SEND, resp)
            self.answered += 1
            if commit:
                self._commit(commit)

    # -- one notification -------------------------------------------------------------

    def _process(self, tid: int) -> _Process | None:
        proc = self._procs.get(tid)
        if proc is not None:
            return proc
        found = remote.identity(tid)
        if found is None:
            return None
        tgid, random = found
        if self._guarded is None or random == self._guarded:
            # Never remembered: its calls through its own C library are not notified at
            # all (child.own_code), so a thread that comes back may have executed another
            # program since (os.execv), which only the random bytes tell.
            return _Process(tgid, True, None)
        try:
            mem = os.open(f"/proc/{tid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        if len(self._procs) >= MAX_PROCESSES:
            self._forget()
        proc = self._procs[tid] = _Process(tgid, False, mem)
        return proc

    def _forget(self) -> None:
        for proc in self._procs.values():
            proc.close()
        self._procs.clear()

    def _handle(self, listener: int, raw: bytes) -> list[Event] | None:
        """The events one notification makes (None: nothing), read while the caller waits."""
        order = self._order
        tid = int.from_bytes(raw[8:12], order)
        nr = int.from_bytes(raw[16:20], order, signed=True)
        found = self._numbers.get(nr)
        if found is None:
            return None
        name, call = found
        proc = self._process(tid)
        if name in calls.EXEC_CALLS:
            # Whoever executes, the thread's next call may come from another program.
            events = (
                None if proc is None or proc.guarded else self._file_events(tid, proc, call, raw)
            )
            self._forget()
            return self._valid(listener, raw, events)
        if proc is None or proc.guarded or len(self._events) >= MAX_RECORDS:
            return None
        if call.net is not None:
            return self._valid(listener, raw, self._net_event(tid, proc, name, call, raw))
        return self._valid(listener, raw, self._file_events(tid, proc, call, raw))

    @staticmethod
    def _valid(listener: int, raw: bytes, events: list[Event] | None) -> list[Event] | None:
        """``events``, if the caller is still in that call (its memory was its own)."""
        if not events:
            return None
        ident = ctypes.create_string_buffer(raw[:8], 8)
        return events if _ioctl(listener, _ID_VALID, ident) == 0 else None

    def _args(self, raw: bytes) -> tuple[int, ...]:
        return tuple(int.from_bytes(raw[32 + 8 * i : 40 + 8 * i], self._order) for i in range(6))

    def _absolute(self, tid: int, proc: _Process, dirfd: int | None, address: int) -> str | None:
        """The absolute path one path argument names, or None."""
        assert proc.mem is not None
        raw = remote.read_string(proc.mem, address)
        path = None if not raw else remote.text(raw)
        if path is None:
            return None  # NULL, empty (AT_EMPTY_PATH: the descriptor itself), or unreadable
        if path.startswith("/"):
            return path
        fd = calls.AT_FDCWD if dirfd is None else ctypes.c_int32(dirfd).value
        base = remote.link(tid, "cwd" if fd == calls.AT_FDCWD else f"fd/{fd}")
        return None if base is None else base.rstrip("/") + "/" + path

    def _flags(self, proc: _Process, call: Call, args: tuple[int, ...]) -> int:
        if call.write == "how" and proc.mem is not None:
            how = remote.read_bytes(proc.mem, args[call.flags], 8)
            return int.from_bytes(how, self._order) if how else 0
        return args[call.flags] & 0xFFFFFFFF if call.write == "open" else 0

    def _file_events(self, tid: int, proc: _Process, call: Call, raw: bytes) -> list[Event] | None:
        args = self._args(raw)
        flags = self._flags(proc, call, args)
        write = calls.is_write(call, flags)
        follow = calls.follows(call, args, flags)
        out = []
        for dirfd_arg, path_arg in call.paths:
            path = self._absolute(
                tid, proc, None if dirfd_arg is None else args[dirfd_arg], args[path_arg]
            )
            if path is None:
                continue
            proc_bound = path.startswith(("/proc/", "/dev/")) or "/proc/" in path
            key = (call.kind, write, follow, path, proc.tgid if proc_bound else 0)
            if key in self._seen:
                continue
            self._seen.add(key)
            event = self._file_event(tid, proc, call.kind, path, write, follow)
            if event is not None:
                out.append(event)
        return out

    def _file_event(
        self, tid: int, proc: _Process, kind: str, path: str, write: bool, follow: bool
    ) -> Event | None:
        if kind == "exec":
            cwd = remote.link(tid, "cwd") or "/"
            return Event(
                layer="os", guard="files", action="learn", target=path, detail="exec",
                pid=proc.tgid, data={"cwd": cwd, "write": False},
            )  # fmt: skip
        if path in STARTUP_FILES:
            return None
        canon = remote.canonical(path, follow, proc.tgid, tid)
        if canon is None or canon in STARTUP_FILES or self._implicit(canon):
            return None
        try:
            isdir = os.stat(canon).st_mode & 0o170000 == 0o040000
            exists = True
        except (OSError, ValueError):
            isdir = exists = False
        return Event(
            layer="os", guard="files", action="learn", target=canon,
            detail="write" if write and kind != "mkdir" else kind, pid=proc.tgid,
            data={"write": write, "isdir": isdir, "exists": exists},
        )  # fmt: skip

    def _implicit(self, canon: str) -> bool:
        """Whether the nearest exposure holding ``canon`` is implicit (not learned)."""
        for path, implicit in self._exposures:
            if canon == path or is_within(canon, path):
                return implicit
        return False

    def _net_event(
        self, tid: int, proc: _Process, name: str, call: Call, raw: bytes
    ) -> list[Event] | None:
        assert proc.mem is not None
        args = self._args(raw)
        if call.net == "msg":  # struct msghdr: void *msg_name; socklen_t msg_namelen
            head = remote.read_bytes(proc.mem, args[1], 12)
            if head is None:
                return None
            address, size = (
                int.from_bytes(head[:8], self._order),
                int.from_bytes(head[8:], self._order),
            )
        else:
            address, size = args[call.addr], args[call.addr + 1] & 0xFFFFFFFF
        if size > 128:  # more than a sockaddr_storage: the kernel refuses it (EINVAL)
            return None
        data = remote.read_bytes(proc.mem, address, size)
        parsed = None if data is None else remote.sockaddr(data)
        if parsed is None:
            return None
        family, host, port = parsed
        if family == "inet" and port == 0 and name != "bind":
            return None  # nowhere: port 0 is no destination
        key = (name, family, host, port)
        if key in self._seen:
            return None
        self._seen.add(key)
        if family == "unix":
            return self._unix_event(tid, proc, name, host)
        if proc.pidfd is None:
            try:
                proc.pidfd = os.pidfd_open(proc.tgid)
            except OSError:
                return None
        kind = remote.socket_type(proc.pidfd, args[0] & 0xFFFFFFFF)
        if kind is None or kind[0] not in (socket.AF_INET, socket.AF_INET6):
            return None
        proto = {socket.SOCK_STREAM: "tcp", socket.SOCK_DGRAM: "udp"}.get(kind[1])  # type: ignore[call-overload]
        if proto is None:
            return None
        direction = "in" if name == "bind" else "out"
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return [
            Event(
                layer="os", guard="network", action="learn",
                target=f"{proto} {shown} {direction}", detail=name,
                suggested_rule=f"allow {proto} {host} {port} {direction}", pid=proc.tgid,
                data={"kind": "inet", "proto": proto, "host": host, "port": port,
                      "direction": direction},
            )
        ]  # fmt: skip

    def _unix_event(self, tid: int, proc: _Process, name: str, path: str) -> list[Event] | None:
        if not path.startswith("/"):
            base = remote.link(tid, "cwd")
            if base is None:
                return None
            path = base.rstrip("/") + "/" + path
        canon = remote.canonical(path, True, proc.tgid, tid)
        if canon is None or self._implicit(canon):
            return None
        if name != "bind" and not os.path.exists(canon):
            return None  # a probe of a socket that is not there (nscd): nothing to expose
        directory = os.path.dirname(canon) or "/"
        return [
            Event(
                layer="os", guard="network", action="learn", target=f"unix {canon}",
                detail=name, suggested_rule=f"expose-rw: {directory}", pid=proc.tgid,
                data={"kind": "unix", "path": canon},
            )
        ]  # fmt: skip

    def _commit(self, events: list[Event]) -> None:
        with self._lock:
            room = MAX_RECORDS - len(self._events)
            self._events.extend(events[: max(room, 0)])
            if room < len(events) and not any("stopped" in n for n in self.notes):
                self.notes.append(
                    f"learning run: more than {MAX_RECORDS} distinct accesses of executed "
                    "programs: the watch stopped recording them (the profile may lack some)"
                )


def prepare(plan: LaunchPlan) -> Watch | None:
    """Add the watch to a learning run's launch plan: the child set-up and the socket its
    listener comes back over. None on a machine without a system-call table (the run goes
    on watching what the guards see; the caller says so). Start the watch after launch
    (:meth:`Watch.start`), once the child's end is closed here (:meth:`Watch.launched`)."""
    if os.uname().machine not in calls.NUMBERS:
        return None
    from pysb_core.plan import ChildSetup

    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = child.detach()
    plan.pass_fds.append(fd)
    plan.add_child_setup(ChildSetup("pysb_core.launch.execwatch.child", "watch", {"fd": fd}))
    watch = Watch(parent, [(e.path, e.implicit) for e in plan.exposures])
    watch.child_fd = fd
    return watch
