"""The guest's view of the host: which directories are shared, and the per-run archive.

The guest runs the host's own interpreter, so it sees the host's ``/usr`` (read-only), the
interpreter's prefix and symlink chain, and exactly the plan's exposures, each at its own
path (or at ``Exposure.target`` for renames). Read-only shares are read-only *on the host*
(``readonly=on``), not just mounted read-only in the guest. The host's ``/etc`` is never
shared: ``passwd``, ``group``, ``hosts`` and ``resolv.conf`` are synthesized.

Everything that changes from run to run goes into a small second cpio archive appended to
the cached base initramfs; ``/init`` (guest_init.sh) reads it.

Why one module: it is the one description of what the guest sees: the shares (read-only,
read-write, renamed), the synthesized ``/etc``, the run script and the per-run archive all
derive from the same :class:`GuestLayout`, and the guest's ``/init`` reads what this module
writes. Split, the host and the archive could disagree about a path.
"""

from __future__ import annotations

import os
import pwd
import shlex
import stat
from dataclasses import dataclass, field

from pysb_core.providerkit import LaunchPlan, SandboxError, is_within
from pysb_qemu import started
from pysb_qemu.cpio import CpioWriter

#: Root directories that are symlinks into /usr on a merged-/usr host (else shared as is).
ROOT_LINK_CANDIDATES = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Capabilities the program keeps when it runs as the guest's uid 0 (pysb run as root; any
#: other user runs as its own uid inside, without capabilities).
#: Everything that could undo the guest's own set-up (mounts, packet filter, modules, raw
#: ports, ptrace of PID 1) is dropped from the bounding set, with no-new-privs.
KEPT_CAPS = (
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "net_bind_service",
)
#: First guest fd /init uses for the ports (pass_fds must stay below it).
PORT_FD_BASE = 200
#: The write end of /init's start FIFO in the program's process.
STARTED_FD = started.FD
#: Largest exposed *file* copied into the initramfs (9p shares directories only).
MAX_FILE_SNAPSHOT = 8 << 20
#: Read-only directories copied into the initramfs when the shares would not all get a
#: virtio transport: at most this many bytes (guest RAM) and entries in all.
MAX_TREE_SNAPSHOT_BYTES = 48 << 20
MAX_TREE_SNAPSHOT_ENTRIES = 20_000
SETPRIV = "/usr/bin/setpriv"
#: A share of the host's ``/`` cannot be mounted on the guest's root (it holds /init and
#: busybox): it is mounted here and its top-level directories are bind-mounted into place,
#: except these (the guest's own, or synthesized: never the host's /etc).
ROOT_SHARE_MOUNT = "/pysb/root"
ROOT_SHARE_SKIP = frozenset(
    {"proc", "sys", "dev", "run", "etc", "pysb", "bb", "modules", "lost+found"}
)


@dataclass(frozen=True)
class Share:
    """One 9p share: host directory, where the guest mounts it, and how."""

    tag: str
    host: str
    guest: str
    writable: bool
    reason: str = ""

    @property
    def cache(self) -> str:
        # Read-only trees do not change during a run: cache them (``none`` costs ~0.4 s
        # per cold Python start). Writable ones must show the host's view at once.
        return "mmap" if self.writable else "loose"


@dataclass(frozen=True)
class Port:
    """A virtio-serial port standing for one file descriptor of the program.

    ``direction``: ``in`` (host to guest), ``out`` (guest to host) or ``both``; ``ctl`` is
    pysb's own control port (exit status, signals).
    """

    name: str
    guest_fd: int | None
    direction: str
    host_fd: int | None


@dataclass
class GuestLayout:
    """What the guest sees, computed from a plan before anything is started."""

    shares: list[Share] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (target, guest path)
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # guest path -> data
    dirs: set[str] = field(default_factory=set)  # directories copied in (read-only trees)
    symlinks: dict[str, str] = field(default_factory=dict)  # guest path -> link target
    hide: list[tuple[str, str]] = field(default_factory=list)  # (dir|file, guest path)
    protect: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def guest_path(self, host_path: str) -> str | None:
        """Where a host path appears in the guest (deepest share wins), or None."""
        best: Share | None = None
        for share in self.shares:
            if is_within(host_path, share.host) and (
                best is None or len(share.host) > len(best.host)
            ):
                best = share
        if best is None:
            return None
        rel = os.path.relpath(host_path, best.host)
        return best.guest if rel == "." else os.path.join(best.guest, rel)

    def covered_readonly(self, host: str, guest: str) -> bool:
        """True if a read-only share already shows ``host`` at ``guest``."""
        shown = self.guest_path(host)
        share = self._deepest(host)
        return shown == guest and share is not None and not share.writable

    def _deepest(self, host_path: str) -> Share | None:
        found = [s for s in self.shares if is_within(host_path, s.host)]
        return max(found, key=lambda s: len(s.host)) if found else None


def _check_path(path: str) -> str:
    if "\n" in path or path != path.strip() or not os.path.isabs(path):
        raise SandboxError(
            f"qemu: cannot share the path {path!r} (absolute, no newline or surrounding blanks)"
        )
    return os.path.normpath(path)


def interpreter_dirs(python: str) -> list[tuple[str, str]]:
    """Directories the interpreter needs: every link of its symlink chain and its prefix.

    A pyenv build has an absolute RUNPATH to ``<prefix>/lib`` and a venv names its base
    interpreter by absolute path, so both are shared at their own host paths.
    """
    out: list[tuple[str, str]] = []
    path = os.path.abspath(python)
    for _ in range(40):
        parent = os.path.dirname(path)
        venv = os.path.dirname(parent)
        if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
            out.append((venv, f"virtual environment of {python}"))
        else:
            out.append((os.path.realpath(parent), f"symlink chain of {python}"))
        if not os.path.islink(path):
            break
        path = os.path.join(parent, os.readlink(path))
    real = os.path.realpath(python)
    out.append((os.path.dirname(os.path.dirname(real)), f"prefix of {real}"))
    return out


def plan_layout(plan: LaunchPlan, max_shares: int | None = None) -> GuestLayout:
    """Compute the shares, links, masks and synthesized files for a plan.

    ``max_shares``: how many 9p shares the VM can attach; beyond it, the smallest read-only
    directories are copied into the per-run archive instead (:func:`_fit_shares`).
    """
    layout = GuestLayout()
    counter = iter(range(1000))

    def share(host: str, guest: str, writable: bool, reason: str) -> None:
        host, guest = _check_path(host), _check_path(guest)
        for i, s in enumerate(layout.shares):
            if s.guest == guest:
                if s.host == host and writable and not s.writable:
                    layout.shares[i] = Share(s.tag, host, guest, True, reason)
                return
        if not writable and host == guest and layout.covered_readonly(host, guest):
            return
        layout.shares.append(Share(f"p{next(counter)}", host, guest, writable, reason))

    wanted: list[tuple[str, str, bool, str]] = [
        ("/usr", "/usr", False, "system programs and libraries")
    ]
    for root in ROOT_LINK_CANDIDATES:
        if os.path.islink(root):
            layout.links.append((os.readlink(root), root))
        elif os.path.isdir(root):
            wanted.append((root, root, False, "system libraries (not merged into /usr)"))
    for host, reason in interpreter_dirs(plan.argv[0] if plan.argv else plan.python):
        wanted.append((host, host, False, reason))
    files = []
    for e in plan.exposures:
        if not os.path.exists(e.path):
            layout.notes.append(f"qemu: exposure {e.path} does not exist; not shared")
        elif os.path.isdir(e.path):
            wanted.append((e.path, e.target, e.writable, f"exposure ({e.source})"))
        else:
            files.append(e)
    # Parents before children: a share already showing a path read-only makes a read-only
    # share of a directory below it redundant (fewer virtio devices, faster boot).
    for host, guest, writable, reason in sorted(
        wanted, key=lambda w: (os.path.normpath(w[1]).count("/"), not w[2])
    ):
        share(host, guest, writable, reason)
    for e in files:
        # An exposed file already visible through a share (libpython under the prefix)
        # needs nothing; others are copied in.
        holder = layout._deepest(e.path)
        shown = holder is not None and layout.guest_path(e.path) == e.target
        if holder is not None and shown and (holder.writable or not e.writable):
            continue
        _snapshot_file(layout, e.path, e.target, e.writable)
    if max_shares is not None:
        _fit_shares(layout, plan, max_shares)
    layout.shares.sort(key=lambda s: (s.guest.count("/"), s.guest))
    for path in plan.hidden:
        seen = layout.guest_path(path)
        if seen is not None and os.path.lexists(path):
            kind = "dir" if os.path.isdir(path) and not os.path.islink(path) else "file"
            layout.hide.append((kind, _check_path(seen)))
    for path in plan.protected:
        seen = layout.guest_path(path)
        holder = layout._deepest(path)
        if seen is not None and holder is not None and holder.writable and os.path.exists(path):
            layout.protect.append(_check_path(seen))
    return layout


def _fit_shares(layout: GuestLayout, plan: LaunchPlan, max_shares: int) -> None:
    """Copy the smallest read-only directories into the archive until the shares fit.

    A microvm has a fixed number of virtio transports, and every separate directory on the
    program's import path is a share (editable installs add one each). Widening a share to a
    common parent would show the guest more of the host; a read-only copy shows exactly the
    same files, fixed at start (read-only trees do not change during a run). The copies live
    in guest RAM, so they are bounded: when the shares still do not fit, the VM's device
    check refuses the start with the usual message.
    """
    excess = len(layout.shares) - max_shares
    if excess <= 0:
        return
    hidden = [os.path.normpath(h) for h in plan.hidden]
    candidates = []
    for share in layout.shares:
        if share.writable or share.guest in ("/", "/usr") or share.host != share.guest:
            continue
        if any(is_within(other.host, share.host) for other in layout.shares if other is not share):
            continue  # a deeper share would be mounted over the copy: keep the tree whole
        size = _tree_size(share.host, hidden, MAX_TREE_SNAPSHOT_BYTES, MAX_TREE_SNAPSHOT_ENTRIES)
        if size is not None:
            candidates.append((size, share))
    budget_bytes, budget_entries = MAX_TREE_SNAPSHOT_BYTES, MAX_TREE_SNAPSHOT_ENTRIES
    # pysb's own implicit exposures (import roots, "exposure (<python>)") first: a directory
    # the profile names may be read while the host changes it, a copy would not show that.
    candidates.sort(key=lambda c: ("exposure (<" not in c[1].reason, c[0]))
    for (nbytes, nentries), share in candidates:
        if excess <= 0:
            break
        if nbytes > budget_bytes or nentries > budget_entries:
            break
        _snapshot_tree(layout, share.host, hidden)
        layout.protect.append(_check_path(share.host))  # read-only in the guest, as a share
        layout.shares.remove(share)
        budget_bytes -= nbytes
        budget_entries -= nentries
        excess -= 1
        layout.notes.append(
            f"qemu: {share.host} is copied into the VM read-only (more directories than "
            "virtio transports)"
        )


def _is_hidden(path: str, hidden: list[str]) -> bool:
    return any(is_within(path, h) for h in hidden)


def _tree_walk(root: str, hidden: list[str]):  # type: ignore[no-untyped-def]
    """(path, lstat) of each entry below ``root``, symlinks not followed, hidden ones left out."""
    for top, dirs, names in os.walk(root, followlinks=False):
        keep = []
        for name in sorted(dirs):
            path = os.path.join(top, name)
            if _is_hidden(path, hidden):
                continue
            st = os.lstat(path)
            yield path, st
            if stat.S_ISDIR(st.st_mode):
                keep.append(name)
        dirs[:] = keep
        for name in sorted(names):
            path = os.path.join(top, name)
            if not _is_hidden(path, hidden):
                yield path, os.lstat(path)


def _tree_size(
    root: str, hidden: list[str], max_bytes: int, max_entries: int
) -> tuple[int, int] | None:
    """(bytes, entries) of a tree, or None when it exceeds the bounds or cannot be read."""
    nbytes = nentries = 0
    try:
        for _path, st in _tree_walk(root, hidden):
            nentries += 1
            if stat.S_ISREG(st.st_mode):
                nbytes += st.st_size
            if nbytes > max_bytes or nentries > max_entries:
                return None
    except OSError:
        return None
    return nbytes, nentries


def _snapshot_tree(layout: GuestLayout, root: str, hidden: list[str]) -> None:
    """Copy a directory tree into the archive: directories, regular files and symlinks,
    read-only (anything else -- sockets, FIFOs, devices -- is left out)."""
    layout.dirs.add(_check_path(root))
    for path, st in _tree_walk(root, hidden):
        if stat.S_ISDIR(st.st_mode):
            layout.dirs.add(_check_path(path))
        elif stat.S_ISLNK(st.st_mode):
            layout.symlinks[_check_path(path)] = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            # Not following a link swapped in since the walk: only what was seen is read.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                mode = 0o555 if st.st_mode & 0o111 else 0o444
                layout.files[_check_path(path)] = (f.read(st.st_size + 1)[: st.st_size], mode)


def _snapshot_file(layout: GuestLayout, host: str, guest: str, writable: bool) -> None:
    """9p shares directories; an exposed file (a CA bundle) is copied in, read-only."""
    if writable:
        raise SandboxError(
            f"qemu: cannot expose the file {host} read-write (expose its directory instead)"
        )
    st = os.stat(host)
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_SNAPSHOT:
        layout.notes.append(f"qemu: {host} is not a directory or small file; not shared")
        return
    with open(host, "rb") as f:
        layout.files[_check_path(guest)] = (f.read(), 0o444)


# -- the per-run archive -------------------------------------------------------------


def etc_files(plan: LaunchPlan) -> dict[str, bytes]:
    """Synthesized /etc: never the host's (qemu may run as root and 9p would read shadow)."""
    uid = os.getuid()
    passwd = ["root:x:0:0:root:/root:/bin/sh"]
    group = ["root:x:0:"]
    if uid != 0:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = "user"
        passwd.append(f"{name}:x:{uid}:{os.getgid()}:{name}:/tmp:/bin/sh")
        group.append(f"{name}:x:{os.getgid()}:")
    if uid != 65534:
        passwd.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
        group.append("nogroup:x:65534:")
    hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    if plan.hosts_file:
        with open(plan.hosts_file, encoding="utf-8") as f:
            hosts = f.read()
    files = {
        "/etc/passwd": ("\n".join(passwd) + "\n").encode(),
        "/etc/group": ("\n".join(group) + "\n").encode(),
        "/etc/hosts": hosts.encode(),
        "/etc/resolv.conf": b"nameserver 10.0.2.3\n",
        "/etc/hostname": b"pysb\n",
    }
    for name in HOST_ETC_COPIES:
        path = os.path.join("/etc", name)
        try:
            st = os.stat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size <= 4 << 20:
                with open(path, "rb") as f:
                    files[path] = f.read()
        except OSError:
            continue
    return files


#: Public, non-secret host files the guest's libc and Python expect (copied at start):
#: the loader cache (libraries outside the default paths, e.g. /usr/local/lib), port and
#: protocol names, resolver and time zone settings.
HOST_ETC_COPIES = (
    "ld.so.cache",
    "services",
    "protocols",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "localtime",
    "timezone",
)


def run_script(
    plan: LaunchPlan,
    ports: list[Port],
    payload_fds: list[int],
    cwd: str | None = None,
    *,
    stderr_joins_stdout: bool = False,
) -> str:
    """The guest's ``/pysb/run``: fds, working directory, capabilities, environment, exec.

    ``cwd`` is the working directory as the guest names it (a renamed exposure moves it);
    one that no share shows is created empty, as bwrap does, before ``/`` turns read-only.
    ``stderr_joins_stdout``: the host's stdout and stderr are one stream (a terminal), so
    fd 2 is fd 1's FIFO too -- two ports would be relayed apart, and a traceback could
    show after the prompt that followed it.
    """
    argv = plan.argv
    if not argv or not os.path.isabs(argv[0]) or "=" in argv[0]:
        raise SandboxError(f"qemu: the command must start with an absolute path: {argv!r}")
    redirs = []
    mapped = {p.guest_fd for p in ports if p.guest_fd is not None}
    for k, port in enumerate(ports):
        if port.guest_fd in (1, 2) and port.direction == "out":
            redirs.append(f"{port.guest_fd}>/run/out{port.guest_fd}")  # /init's relay FIFO
        elif port.guest_fd is not None:
            op = "<&" if port.direction == "in" else ">&"
            redirs.append(f"{port.guest_fd}{op}{PORT_FD_BASE + k}")
    for fd in payload_fds:
        redirs.append(f"{fd}</pysb/fd/{fd}")
    redirs.append(f"{STARTED_FD}>/run/started")  # closed when the program starts (started.py)
    if stderr_joins_stdout and 2 not in mapped and 1 in mapped:
        redirs.append("2>&1")
        mapped.add(2)
    for fd in (0, 1, 2):
        if fd not in mapped:
            redirs.append(f"{fd}{'<' if fd == 0 else '>'}/dev/null")
    redirs += [f"{PORT_FD_BASE + k}>&-" for k in range(len(ports))]
    redirs.append("250>&-")
    for name, value in plan.env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise SandboxError(f"qemu: invalid environment variable {name!r}")
    caps = ",".join(f"+{c}" for c in KEPT_CAPS)
    # The program has the host user's uid inside (root stays 0): files in the shares keep
    # their meaning (owner checks, os.getuid(), tools that refuse to run as root).
    uid, gid = os.getuid(), os.getgid()
    ids = [] if uid == 0 else [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    cmd = [
        SETPRIV,
        *ids,
        "--no-new-privs",
        "--bounding-set",
        f"-all,{caps}",
        "--inh-caps",
        f"-all,{caps}",
        "/bb/env",
        "-i",
        *(f"{k}={v}" for k, v in plan.env.items()),
        *argv,
    ]
    where = shlex.quote(_check_path(cwd or plan.cwd))
    return "\n".join(
        [
            "echo $$ > /run/pysb.pid",
            *(
                [
                    "{ echo $$ > /sys/fs/cgroup/pysb/cgroup.procs && /bb/umount /sys/fs/cgroup; } "
                    "|| { echo 'pysb: cannot join the pids cgroup' >&2; exit 125; }"
                ]
                if plan.policy.limits.processes is not None
                else []
            ),
            # From here on, errors reach the program's stderr (the user), not the console.
            "exec " + " ".join(redirs),
            f"[ -d {where} ] || /bb/mkdir -p {where} 2>/dev/null",
            # The initramfs root (/etc, mount points, this file) becomes read-only: outside the
            # rw shares only the private tmpfs /tmp and /dev/shm stay writable, as under bwrap.
            "/bb/mount -o remount,ro / || { echo 'pysb: cannot make / read-only' >&2; exit 125; }",
            f"cd -- {where} || {{ echo 'pysb: cannot enter the working directory' {where} >&2; "
            "exit 125; }",
            "exec " + " ".join(shlex.quote(a) for a in cmd),
            "",
        ]
    )


def build_run_archive(
    plan: LaunchPlan,
    layout: GuestLayout,
    ports: list[Port],
    payloads: dict[int, bytes],
    marker: str,
    nft_rules: str | None,
    nat: bool = False,
    *,
    stderr_joins_stdout: bool = False,
) -> bytes:
    """The second initramfs archive: per-run configuration, /etc, payload snapshots."""
    w = CpioWriter()
    made = {"", "/", "/pysb", "/etc", "/usr", "/tmp", "/run", "/root", "/var", "/mnt"}

    def parents(path: str) -> None:
        parent = os.path.dirname(path)
        if parent not in made:
            parents(parent)
            w.add_dir(parent)
            made.add(parent)

    def lines(rows: list[str]) -> bytes:
        return "".join(f"{r}\n" for r in rows).encode()

    w.add_file(
        "pysb/ports",
        lines(
            [
                f"{p.name} {p.guest_fd if p.guest_fd is not None else '-'} {p.direction}"
                for p in ports
                if p.name != "ctl"
            ]
        ),
    )
    w.add_file("pysb/links", lines([f"{t} {p}" for t, p in layout.links]))
    binds: list[str] = []
    for share in layout.shares:
        if share.guest == "/":
            for entry in sorted(os.listdir(share.host)):
                host = os.path.join(share.host, entry)
                if entry in ROOT_SHARE_SKIP or os.path.islink(host) or not os.path.isdir(host):
                    continue
                binds.append(f"{ROOT_SHARE_MOUNT}/{entry} /{_check_path('/' + entry)[1:]}")
    w.add_file("pysb/binds", lines(binds))
    w.add_file(
        "pysb/mounts",
        lines(
            [
                f"{s.tag} {'rw' if s.writable else 'ro'} {s.cache} "
                f"{ROOT_SHARE_MOUNT if s.guest == '/' else s.guest}"
                for s in layout.shares
            ]
        ),
    )
    # The guest's /tmp and /dev/shm are tmpfs of ``limits: tmp`` bytes (guest_init.sh).
    w.add_file("pysb/tmp-size", lines([str(plan.policy.limits.tmp_bytes())]))
    w.add_file("pysb/hide", lines([f"{k} {p}" for k, p in layout.hide]))
    w.add_file("pysb/protect", lines(layout.protect))
    w.add_file("pysb/marker", lines([marker]), 0o400)
    cwd = layout.guest_path(os.path.realpath(plan.cwd)) or plan.cwd
    w.add_file(
        "pysb/run",
        run_script(
            plan,
            [p for p in ports if p.name != "ctl"],
            sorted(payloads),
            cwd,
            stderr_joins_stdout=stderr_joins_stdout,
        ).encode(),
        0o500,
    )
    if os.environ.get("PYSB_QEMU_DEBUG"):
        w.add_file("pysb/debug", b"")
    if plan.policy.limits.processes is not None:
        w.add_file("pysb/pids.max", f"{int(plan.policy.limits.processes)}\n".encode())
    if nft_rules is not None:
        w.add_file("pysb/net", b"")
        w.add_file("pysb/nft.rules", nft_rules.encode(), 0o400)
        if nat:
            w.add_file("pysb/nat", b"")
    if payloads:
        w.add_dir("pysb/fd", 0o500)
        for fd, data in sorted(payloads.items()):
            w.add_file(f"pysb/fd/{fd}", data, 0o400)
    for path, data in etc_files(plan).items():
        w.add_file(path, data)
    for path in sorted(layout.dirs):
        if path not in made:
            parents(path)
            w.add_dir(path, 0o555)
            made.add(path)
    for path, target in sorted(layout.symlinks.items()):
        parents(path)
        w.add_symlink(path, target)
    for path, (data, mode) in sorted(layout.files.items()):
        parents(path)
        w.add_file(path, data, mode)
    return w.finish()
