"""The compiled, frozen policy that every layer reads.

A profile (YAML, includes, variables, CLI additions) is turned into one :class:`Policy`.
The parent hands it to the guards (which contribute to the launch plan) and to the
provider (which compiles it into its own mechanism); the sandboxed interpreter receives
the same policy as JSON over an inherited file descriptor and installs the guards from it.

Every rule remembers where it came from (``source`` = ``FILE:LINE``) so that ``pysb check``
and denial messages can point at it.
"""

from __future__ import annotations

from pysb_core._startup.records import Record, asdict, field, record

TYPE_CHECKING = False  # no typing import at run time: this module is loaded in the sandbox
if TYPE_CHECKING:
    from typing import Any, Literal

    Action = Literal["allow", "deny"]
    Direction = Literal["in", "out", "any"]


#: The default provider name: the strongest that can run the profile here, chosen by the
#: pipeline (:mod:`pysb_core.launch.autoprovider`).
AUTO = "auto"


@record
class Exposure(Record):
    """A host directory made visible inside the sandbox.

    ``path`` is the canonical host path; ``target`` is where the sandbox sees it (equal to
    ``path`` unless the profile renamed it with ``SRC:DEST``).
    """

    path: str
    target: str
    writable: bool
    source: str = "<implicit>"
    implicit: bool = False

    @property
    def renamed(self) -> bool:
        return self.path != self.target


@record
class IgnoreRule(Record):
    """A glob hiding paths below the exposures (a relative glob matches any component)."""

    pattern: str
    source: str = "<implicit>"


@record
class PortRange(Record):
    low: int
    high: int

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.low <= port <= self.high

    def __str__(self) -> str:
        if self.low == 0 and self.high == 65535:
            return "*"
        if self.low == self.high:
            return str(self.low)
        if self.high == 65535:
            return f"{self.low}-"
        return f"{self.low}-{self.high}"


@record
class NetworkRule(Record):
    """``ACTION PROTO NETWORK PORTS DIRECTION`` (SPEC §4).

    ``network`` is ``*``, an IP, a CIDR or a host name (``is_host`` true); host names are
    resolved before launch and their addresses land in :attr:`Policy.pins`.
    """

    action: Action
    protocols: tuple[str, ...]  # subset of ("tcp", "udp")
    network: str
    ports: tuple[PortRange, ...]
    direction: Direction
    source: str = "<cli>"
    text: str = ""

    @property
    def is_host(self) -> bool:
        from pysb_core.policy.hostnames import is_hostname

        return is_hostname(self.network)

    def __str__(self) -> str:
        return self.text or (
            f"{self.action} {','.join(self.protocols)} {self.network} "
            f"{','.join(str(p) for p in self.ports)} {self.direction}"
        )


@record
class ApiRule(Record):
    """``allow`` or ``deny`` of a registered sensitive function, a category, or ``*``."""

    action: Action
    target: str
    source: str = "<cli>"


@record
class Limits(Record):
    """Resource limits; ``None`` means unlimited. Sizes in bytes, times in seconds."""

    memory: int | None = None
    processes: int | None = None
    open_files: int | None = None
    cpu_time: int | None = None
    wall_time: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    #: ``limits: tmp``: the size of the private temporary directory (and of a private
    #: ``/dev/shm``); ``None`` = the default (:meth:`tmp_bytes`). Never unbounded.
    tmp: int | None = None

    def any(self) -> bool:
        return any(
            v is not None
            for v in (self.memory, self.processes, self.open_files, self.cpu_time, self.wall_time)
        )

    def tmp_bytes(self) -> int:
        """The bound of the private temporary directory (SPEC §4 "temporary files"):
        ``limits: tmp``, else :data:`DEFAULT_TMP`, or ``memory`` when that is smaller (a
        tmpfs is memory: it must not let a run hold more than its memory limit)."""
        if self.tmp is not None:
            return self.tmp
        return DEFAULT_TMP if self.memory is None else min(DEFAULT_TMP, self.memory)


#: The default ``limits: tmp``: 512 MiB (docs/profile.md).
DEFAULT_TMP = 512 << 20


@record
class Policy(Record):
    """Everything a run is allowed to do, with the origin of each grant.

    ``imports`` is ``None`` when absent (nothing but the interpreter's own modules),
    ``("*",)`` for everything. ``env`` is the complete environment the child starts with.
    ``pins`` maps each host name of a network rule to its pinned addresses.
    """

    exposures: tuple[Exposure, ...] = ()
    ignore: tuple[IgnoreRule, ...] = ()
    network: tuple[NetworkRule, ...] = ()
    pins: dict[str, tuple[str, ...]] = field(default_factory=dict)
    imports: tuple[str, ...] | None = None
    imports_source: str = ""
    api: tuple[ApiRule, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    env_sources: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    #: A provider name, or ``auto`` (:mod:`pysb_core.launch.autoprovider`) until the pipeline
    # chooses.
    provider: str = AUTO
    provider_options: dict[str, Any] = field(default_factory=dict)
    python_guards: bool = True
    learn: bool = False
    learn_path: str | None = None
    locked: bool = False
    profile_files: tuple[str, ...] = ()
    #: The digest of each profile file's bytes as parsed, in ``profile_files`` order
    #: (:mod:`pysb_core.profile.trust` compares them with what the user trusted).
    profile_digests: tuple[str, ...] = ()
    profile_path: str | None = None
    #: pysb's own state directories (caches): like the profile files, never writable inside.
    state_dirs: tuple[str, ...] = ()
    cwd: str = "/"
    #: third-party sections declared with ``ProfileSchema.add_section``, as plain data.
    extra: dict[str, Any] = field(default_factory=dict)
    #: FILE:LINE of each item of a list section of ``extra``, in the same order.
    extra_sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Sections of ``extra`` that never reach the sandbox (``add_section(host_only=True)``:
    #: secrets a host-side service uses for the sandbox, never given to it).
    host_only: tuple[str, ...] = ()

    # -- serialisation for the sandboxed interpreter (JSON: no pickle before the guards) --

    def to_json(self) -> str:
        import json  # not at module level: the sandbox reads the policy without json

        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Policy:
        d = dict(data)
        d["exposures"] = tuple(Exposure(**e) for e in d.get("exposures", ()))
        d["ignore"] = tuple(IgnoreRule(**e) for e in d.get("ignore", ()))
        d["network"] = tuple(
            NetworkRule(
                **{
                    **r,
                    "protocols": tuple(r["protocols"]),
                    "ports": tuple(PortRange(**p) for p in r["ports"]),
                }
            )
            for r in d.get("network", ())
        )
        d["pins"] = {k: tuple(v) for k, v in d.get("pins", {}).items()}
        if d.get("imports") is not None:
            d["imports"] = tuple(d["imports"])
        d["api"] = tuple(ApiRule(**r) for r in d.get("api", ()))
        d["limits"] = Limits(**d.get("limits", {}))
        d["profile_files"] = tuple(d.get("profile_files", ()))
        d["profile_digests"] = tuple(d.get("profile_digests", ()))
        d["state_dirs"] = tuple(d.get("state_dirs", ()))
        d["extra_sources"] = {k: tuple(v) for k, v in d.get("extra_sources", {}).items()}
        d["host_only"] = tuple(d.get("host_only", ()))
        return cls(**d)

    def for_sandbox(self) -> Policy:
        """The policy without its host-only sections: what may cross into the sandbox."""
        if not self.host_only:
            return self
        hidden = set(self.host_only)
        return self.replace(
            extra={k: v for k, v in self.extra.items() if k not in hidden},
            extra_sources={k: v for k, v in self.extra_sources.items() if k not in hidden},
            host_only=(),
        )

    @classmethod
    def from_json(cls, text: str) -> Policy:
        import json

        return cls.from_dict(json.loads(text))

    # -- convenience views used by guards and providers --

    @property
    def readable(self) -> tuple[Exposure, ...]:
        return self.exposures

    @property
    def writable(self) -> tuple[Exposure, ...]:
        return tuple(e for e in self.exposures if e.writable)

    def allows_network(self) -> bool:
        """True when at least one rule allows some traffic."""
        return any(r.action == "allow" for r in self.network)
