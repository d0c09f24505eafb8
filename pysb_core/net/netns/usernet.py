"""User-mode network helpers (slirp4netns, pasta) attached to a sandbox's namespace by PID.

A helper runs on the host, outside the sandbox, and gives the namespace a ``tap0`` device whose
traffic it turns into ordinary host sockets. It never outlives pysb:

- it gets the read end of a *lifeline* pipe whose write end only pysb holds (``O_CLOEXEC``,
  never passed to any child): slirp4netns watches it with ``--exit-fd`` and exits on EOF, so a
  SIGKILLed pysb takes its helpers with it;
- :meth:`UserNet.stop` closes the lifeline, waits a moment, then kills the helper by the PID
  pysb itself started (never by name).

Which helper is used is decided by :func:`choose_helper` (slirp4netns first: its host-loopback
address lets the packet filter see and DNAT every connection; pasta is the fallback).

Why one module: the two user-mode helpers (slirp4netns and pasta) are interchangeable
implementations of one :class:`UserNet` interface, with the same lifeline rule and the same stop
by the PID pysb started; :func:`choose_helper` chooses between them, and keeping them side by
side keeps their behaviour comparable line for line.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

from pysb_core.errors import ProviderUnavailableError, SandboxError
from pysb_core.net.netfilter.plan import Forward
from pysb_core.net.netfilter.target import SLIRP4NETNS, FilterTarget

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pysb_core.net.netns.enter import SandboxNamespaces

INSTALL_HINT = "apt-get install slirp4netns nftables"
READY_TIMEOUT = 10.0


def choose_helper(preferred: str | None = None) -> type[UserNet]:
    """The helper class to use: ``preferred`` if given and present, else the first found."""
    order: list[type[UserNet]] = [Slirp4netns, Pasta]
    if preferred:
        chosen = [c for c in order if c.name == preferred]
        if not chosen:
            raise ProviderUnavailableError(
                f"unknown user-mode network helper '{preferred}' (use slirp4netns or pasta)"
            )
        if chosen[0].binary() is None:
            raise ProviderUnavailableError(
                f"{preferred} is not installed", fix=f"apt-get install {chosen[0].package}"
            )
        return chosen[0]
    for cls in order:
        if cls.binary() is not None:
            return cls
    raise ProviderUnavailableError(
        "network rules need a user-mode network helper (slirp4netns or pasta), none is installed",
        fix=INSTALL_HINT,
    )


class UserNet(ABC):
    """One helper process serving one namespace."""

    name: str = ""
    package: str = ""
    layout: FilterTarget = SLIRP4NETNS

    def __init__(self, *, dns: bool, host_loopback: bool, inbound: Sequence[Forward]) -> None:
        self.dns = dns
        self.host_loopback = host_loopback
        self.inbound = list(inbound)
        self.proc: subprocess.Popen[bytes] | None = None
        self._lifeline_w: int | None = None
        self._tmpdir: str | None = None

    @classmethod
    def binary(cls) -> str | None:
        from pysb_core.launch.probecache import which

        return which(cls.name, ":/usr/sbin:/usr/bin")

    @abstractmethod
    def start(self, pid: int, namespaces: SandboxNamespaces | None = None) -> None:
        """Attach to the network namespace of ``pid`` and return once ``tap0`` is up.

        ``namespaces``: that namespace and its owning user namespace, held open (the helper
        joins them by descriptor: the sandbox process may have moved to a nested user
        namespace meanwhile, :mod:`pysb_core.net.netns.enter`); opened here when ``None``.

        Raises :class:`SandboxError` (and leaves nothing running) when it cannot.
        """

    def _lifeline(self) -> int:
        """Create the lifeline pipe; return the read end (the caller passes it to the helper)."""
        r, w = os.pipe()  # both O_CLOEXEC: only the helper gets ``r``, via pass_fds
        self._lifeline_w = w
        return r

    def stop(self) -> None:
        """Stop the helper (idempotent): close the lifeline, wait briefly, then kill by PID."""
        if self._lifeline_w is not None:
            with contextlib.suppress(OSError):
                os.close(self._lifeline_w)
            self._lifeline_w = None
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            # Our own child, by PID; it keeps no state worth a graceful exit. Its exit takes
            # the kernel 15-30 ms (the tap device is unregistered): reap it in the background
            # rather than make the program's exit wait for it.
            proc.kill()
            threading.Thread(target=proc.wait, name=f"reap-{self.name}", daemon=True).start()
        _remove_tree(self._tmpdir)
        self._tmpdir = None

    def _fail(self, message: str) -> SandboxError:
        err = b""
        proc = self.proc
        if proc is not None and proc.stderr is not None:
            # Whatever it said so far, without blocking: a grandchild may hold the pipe.
            with contextlib.suppress(OSError, TypeError):
                os.set_blocking(proc.stderr.fileno(), False)
                err = proc.stderr.read() or b""
        self.stop()
        detail = err.decode(errors="replace").strip().splitlines()[-3:]
        return SandboxError(
            f"{self.name}: {message}" + (": " + " / ".join(detail) if detail else "")
        )


class Slirp4netns(UserNet):
    """slirp4netns: ``tap0`` = 10.0.2.100, gateway 10.0.2.2 = the host's 127.0.0.1."""

    name = "slirp4netns"
    package = "slirp4netns"
    layout = SLIRP4NETNS

    def start(self, pid: int, namespaces: SandboxNamespaces | None = None) -> None:
        exe = self.binary()
        if exe is None:
            raise ProviderUnavailableError("slirp4netns is not installed", fix=INSTALL_HINT)
        if namespaces is None:
            with _opened(pid) as ns:
                return self.start(pid, ns)
        argv = [exe, "--configure", "--mtu=65520", "--enable-seccomp"]
        if namespaces.user_fd is not None:
            argv.append(f"--userns-path={namespaces.path(namespaces.user_fd)}")
        # Its own mount namespace with only /etc and /run of the host. A normal user's
        # slirp4netns makes it as uid 0 of the namespace owning the network (it joins
        # /proc/PID/ns/user and calls setegid(0)): the owner must map 0 to the user (bwrap
        # and unshare do), and PID must be in it -- an unprivileged bwrap's sandbox process
        # has moved on to a nested namespace, so a process of pysb's own stands in.
        sandbox = os.geteuid() == 0 or namespaces.owner_root_is(os.geteuid(), os.getegid())
        if sandbox:
            argv.append("--enable-sandbox")
        if not self.dns:
            argv.append("--disable-dns")
        if not self.host_loopback:
            argv.append("--disable-host-loopback")
        # The sandbox process may still be in the owner now and move on while slirp4netns
        # starts (bwrap does, asynchronously): for a normal user, always the stand-in.
        if sandbox and os.geteuid() != 0 and namespaces.user_fd is not None:
            with namespaces.holder() as target:
                self._run(argv, target, namespaces)
        else:
            self._run(argv, pid, namespaces)

    def _run(self, argv: list[str], target: int, namespaces: SandboxNamespaces) -> None:
        """Start slirp4netns on the network namespace of ``target`` and wait until it is up."""
        lifeline_r = self._lifeline()
        ready_r, ready_w = os.pipe()
        argv = [*argv, f"--ready-fd={ready_w}", f"--exit-fd={lifeline_r}"]
        api = None
        if self.inbound:
            import tempfile  # only for inbound forwards (the API socket's directory)

            self._tmpdir = tempfile.mkdtemp(prefix="pysb-slirp-")
            api = os.path.join(self._tmpdir, "api.sock")
            argv.append(f"--api-socket={api}")
        # By PID: its network namespace never changes (the user namespace is the held one).
        # With --netns-type=path, a normal user's slirp4netns does not join the user
        # namespace before its sandbox step, which then fails ("setegid(0)").
        argv += [str(target), "tap0"]
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(ready_w, lifeline_r, *namespaces.fds),
                start_new_session=True,  # a Ctrl-C meant for the program must not stop it
            )
        except OSError as exc:
            os.close(ready_r)
            raise self._fail(f"cannot start: {exc}") from exc
        finally:
            os.close(ready_w)
            os.close(lifeline_r)
        try:
            if not _wait_readable(ready_r, self.proc, READY_TIMEOUT) or os.read(ready_r, 1) != b"1":
                raise self._fail("did not bring the namespace's network up")
        finally:
            os.close(ready_r)
        if api is not None:
            for fwd in self.inbound:
                self._hostfwd(api, fwd)
            # The API is only needed to add the forwards: remove its socket now, so that not
            # even a SIGKILLed pysb leaves the directory behind.
            _remove_tree(self._tmpdir)
            self._tmpdir = None

    def _hostfwd(self, api: str, fwd: Forward) -> None:
        import json
        import socket

        request = {
            "execute": "add_hostfwd",
            "arguments": {
                "proto": fwd.proto,
                "host_addr": "127.0.0.1",
                "host_port": fwd.port,
                "guest_port": fwd.port,
            },
        }
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5.0)
                s.connect(api)
                s.sendall(json.dumps(request).encode())
                s.shutdown(socket.SHUT_WR)
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
            answer = json.loads(data or b"{}")
        except (OSError, ValueError) as exc:
            raise self._fail(f"cannot forward {fwd.proto} port {fwd.port}: {exc}") from exc
        if "error" in answer or "return" not in answer:
            desc = answer.get("error", {}).get("desc", answer) if isinstance(answer, dict) else ""
            raise self._fail(
                f"cannot forward the host's 127.0.0.1:{fwd.port}/{fwd.proto} into the sandbox "
                f"(is the port already in use on the host?) [{desc}]"
            )


#: pasta reads one port specification into a buffer of ``BUFSIZ`` (8 KiB) and calls a
#: longer one invalid ("Invalid port specifier"): each ``-T``/``-U`` stays well below.
PASTA_SPEC_BYTES = 4000


def port_specs(ports: Sequence[str]) -> list[str]:
    """``ports`` (``"P"`` or ``"A-B"``) as pasta port specifications: neighbouring ports
    joined into ranges, in lists of at most :data:`PASTA_SPEC_BYTES` bytes, one for each
    ``-T`` option (pasta takes several). Before, 9,000 loopback ports made one spec of
    52 KiB, and pasta refused to start."""
    from pysb_core.net.netfilter.merge import merge_intervals, port_text

    spans = []
    for item in ports:
        low, _, high = item.partition("-")
        spans.append((int(low), int(high or low)))
    specs: list[str] = []
    current = ""
    for lo, hi in merge_intervals(spans):
        text = port_text(lo, hi)
        if current and len(current) + 1 + len(text) > PASTA_SPEC_BYTES:
            specs.append(current)
            current = ""
        current = f"{current},{text}" if current else text
    if current:
        specs.append(current)
    return specs


class Pasta(UserNet):
    """pasta (passt): splices the namespace's loopback to the host's (``-T``/``-t``).

    Every automatic forwarding is switched off (``-t none -u none -T none -U none`` unless a
    rule names ports), because pasta's default is to forward every bound port.
    """

    name = "pasta"
    package = "passt"
    #: slirp4netns's addresses (pasta is started with them), without NAT to the gateway.
    layout = FilterTarget(name="pasta", host_loopback_nat=False)

    def __init__(
        self,
        *,
        dns: bool,
        host_loopback: bool,
        inbound: Sequence[Forward],
        loopback_ports: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(dns=dns, host_loopback=host_loopback, inbound=inbound)
        self.loopback_ports = loopback_ports or {}

    def start(self, pid: int, namespaces: SandboxNamespaces | None = None) -> None:
        exe = self.binary()
        if exe is None:
            raise ProviderUnavailableError("pasta is not installed", fix="apt-get install passt")
        if namespaces is None:
            with _opened(pid) as ns:
                return self.start(pid, ns)
        lay = self.layout
        argv = [
            exe,
            "--config-net",
            "-f",
            "-q",
            "-4",
            "-a",
            lay.guest,
            "-n",
            "24",
            "-g",
            lay.gateway,
            "--no-map-gw",
            "-I",
            "tap0",
            "--netns",
            namespaces.path(namespaces.net_fd),
        ]
        if namespaces.user_fd is not None:
            argv += ["--userns", namespaces.path(namespaces.user_fd)]
        if os.geteuid() == 0:
            argv += ["--runas", "0:0"]
        if self.dns:
            argv += ["--dns-forward", lay.resolver]
        tcp_in = ",".join(str(f.port) for f in self.inbound if f.proto == "tcp")
        udp_in = ",".join(str(f.port) for f in self.inbound if f.proto == "udp")
        argv += ["-t", f"127.0.0.1/{tcp_in}" if tcp_in else "none"]
        argv += ["-u", f"127.0.0.1/{udp_in}" if udp_in else "none"]
        for option, proto in (("-T", "tcp"), ("-U", "udp")):
            for spec in port_specs(self.loopback_ports.get(proto, [])) or ["none"]:
                argv += [option, spec]
        # pasta has no --exit-fd: a small shell supervises it, and a reader in that shell
        # kills pasta (by the PID the shell itself started) once the lifeline reaches EOF.
        lifeline_r = self._lifeline()
        # The lifeline arrives as the shell's stdin, and is moved to a spare descriptor
        # below 10 (higher numbers are not portable sh) that is not one of the namespaces'.
        fd = min(set(range(3, 10)) - set(namespaces.fds))
        script = (
            f'exec {fd}<&0 </dev/null; "$@" {fd}<&- & p=$!; '
            f"{{ while read -r _; do :; done; kill $p 2>/dev/null; }} <&{fd} & w=$!; "
            f"exec {fd}<&-; wait $p; s=$?; kill $w 2>/dev/null; exit $s"
        )
        try:
            self.proc = subprocess.Popen(
                ["/bin/sh", "-c", script, "pysb-pasta", *argv],
                stdin=lifeline_r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=namespaces.fds,
                start_new_session=True,
            )
        except OSError as exc:
            raise self._fail(f"cannot start: {exc}") from exc
        finally:
            os.close(lifeline_r)
        # pasta has no ready fd: the namespace is configured once its default route via
        # tap0 exists (the last step of --config-net), seen through the sandbox's /proc.
        deadline = time.monotonic() + READY_TIMEOUT
        while not _has_default_route(pid, "tap0"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise self._fail("did not bring the namespace's network up")
            time.sleep(0.002)
        # ... and its -T/-U listeners on the namespace's loopback may come after the route
        # (thousands of ports take a while under load): the program connecting first got
        # ECONNREFUSED from an allowed host port. Wait until every one is bound.
        missing = {proto: _expand(self.loopback_ports.get(proto, [])) for proto in ("tcp", "udp")}
        while True:
            missing = {
                proto: ports - _bound(pid, proto) for proto, ports in missing.items() if ports
            }
            if not missing:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                count = sum(len(p) for p in missing.values())
                raise self._fail(f"did not listen on {count} of the loopback ports it forwards")
            time.sleep(0.01)


@contextlib.contextmanager
def _opened(pid: int) -> Iterator[SandboxNamespaces]:
    from pysb_core.net.netns.enter import SandboxNamespaces

    try:
        namespaces = SandboxNamespaces(pid)
    except OSError as exc:
        raise SandboxError(f"cannot open the sandbox's network namespace: {exc}") from exc
    with namespaces:
        yield namespaces


def _remove_tree(path: str | None) -> None:
    if path is not None:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def _expand(specs: list[str]) -> set[int]:
    """The ports of ``"P"`` / ``"A-B"`` specifications."""
    out: set[int] = set()
    for spec in specs:
        low, _, high = spec.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def _bound(pid: int, proto: str) -> set[int]:
    """Local ports with a listening TCP socket (or a bound UDP one) on 127.0.0.1 in the
    network namespace of ``pid`` (``/proc/PID/net/tcp``: ``0100007F:PORT``, state 0A)."""
    state = "0A" if proto == "tcp" else "07"
    try:
        with open(f"/proc/{pid}/net/{proto}") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return set()
    ports = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == state and fields[1].startswith("0100007F:"):
            ports.add(int(fields[1][9:], 16))
    return ports


def _has_default_route(pid: int, device: str) -> bool:
    """True when the network namespace of ``pid`` has an IPv4 default route via ``device``."""
    try:
        with open(f"/proc/{pid}/net/route") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return False
    return any(ln.split()[:2] == [device, "00000000"] for ln in lines)


def _wait_readable(fd: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for ``fd`` to be readable while ``proc`` lives (False on timeout or death)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], min(left, 0.05))
        if ready:
            return True
        if proc.poll() is not None:
            # it may have written and exited in between
            ready, _, _ = select.select([fd], [], [], 0)
            return bool(ready)
