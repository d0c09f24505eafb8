"""``sandboxes(workers=N)``: N sandboxed worker processes behind one sandbox.

Why: one worker runs Python code on one core at a time (its GIL); calls that compute
scale only with processes. Each worker is a :class:`~pysb_core.remote.client.Client` of
its own -- its own socket, ``init_fn``, crash and restart rules (SPEC §5: a started call
is never run twice, five deaths within 180 s) -- all started by the one launcher of the
sandbox (one profile, one provider, one learning run). A call goes to the worker with the
fewest calls in flight (the first of them on a tie), so concurrent calls spread and a
sequential caller stays on one warm worker. When one worker fails closed, the whole sandbox does:
every further call raises ``SandboxProtocolError``, as with one worker.
"""

from __future__ import annotations

import threading
from typing import Any

from pysb_core.errors import SandboxProtocolError
from pysb_core.remote.client import FAILED, Client


class _SharedLauncher:
    """The sandbox's launcher as its workers share it: one spawn or release at a time,
    and ``finish`` only from the pool, once, after every worker has stopped."""

    def __init__(self, launcher: Any) -> None:
        self._launcher = launcher
        self._lock = threading.Lock()
        self.provider = getattr(launcher, "provider", None)
        #: Each worker's channel: two pipes or a socketpair (read by its Client).
        self.partial_pipes = bool(getattr(launcher, "partial_pipes", False))

    def spawn(self, args: dict[str, Any], fds: list[int]) -> Any:
        with self._lock:
            return self._launcher.spawn(args, fds)

    def release(self, proc: Any) -> None:
        release = getattr(self._launcher, "release", None)
        if release is not None:
            with self._lock:
                release(proc)

    def finish(self, returncode: int | None) -> None:
        """A worker's own stop: the pool finishes the real launcher itself."""


class Pool:
    """Several workers with the interface of one :class:`Client`."""

    def __init__(self, launcher: Any, workers: int, **client_kwargs: Any) -> None:
        self._launcher = launcher
        shared = _SharedLauncher(launcher)
        self._clients = [Client(shared, **client_kwargs) for _ in range(workers)]

    @property
    def state(self) -> str:
        return self._clients[0].state

    @property
    def pid(self) -> int | None:
        """PID of the first worker (see :attr:`pids` for all of them)."""
        return self._clients[0].pid

    @property
    def pids(self) -> list[int | None]:
        return [c.pid for c in self._clients]

    def start(self) -> None:
        """Start every worker from this thread (a wrapper's parent-death signal follows
        the thread that spawned it), then wait for their ``init_fn`` at once."""
        conns: list[Any] = []
        try:
            for client in self._clients:
                conns.append(client.spawn())
        except BaseException:
            for client, conn in zip(self._clients, conns, strict=False):
                client._reap(conn, kill=True)
            raise
        errors: list[BaseException] = []
        ready: list[Any] = [None] * len(conns)

        def wait(i: int) -> None:
            try:
                ready[i] = self._clients[i].await_ready(conns[i])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=wait, args=(i,)) for i in range(1, len(conns))]
        for thread in threads:
            thread.start()
        wait(0)
        for thread in threads:
            thread.join()
        if errors:
            for client, conn in zip(self._clients, ready, strict=True):
                if conn is not None:
                    client._reap(conn, kill=True)
            raise errors[0]
        for client, conn in zip(self._clients, ready, strict=True):
            client.adopt(conn)

    def _stop_clients(self) -> int | None:
        status = None
        for client in self._clients:
            try:
                client.stop()
            except Exception:
                pass
            status = status if status is not None else client._last_status
        return status

    def stop(self) -> None:
        """Stop every worker (each waits for its running calls), then finish the session."""
        status = self._stop_clients()
        self._launcher.finish(status)

    def kill_worker(self) -> None:
        for client in self._clients:
            client.kill_worker()

    def _pick(self) -> Client:
        best = None
        load = 1 << 62
        for client in self._clients:  # the first idle one: a sequential caller stays warm
            state = client.state
            if state == FAILED:  # one worker failed closed: so does the sandbox
                raise SandboxProtocolError(client._fail_message)
            busy = len(client._pending)
            if busy < load:
                best, load = client, busy
                if not busy:
                    break
        assert best is not None
        return best

    def call(self, *args: Any, **kwargs: Any) -> Any:
        return self._pick().call(*args, **kwargs)

    async def call_async(self, *args: Any, **kwargs: Any) -> Any:
        return await self._pick().call_async(*args, **kwargs)
