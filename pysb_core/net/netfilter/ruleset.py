"""An nftables ruleset as data (chains, named sets), written as one ``nft -f`` input or as
several small ones.

Why several: ``nft`` sends a whole input as one netlink batch, and in a user namespace (an
unprivileged sandbox, and bwrap's and unshare's even for root) it cannot raise its socket
buffer (``SO_SNDBUFFORCE`` is refused; ``wmem_default`` is 208 KiB), so an input past
about 250 rule statements fails with ``Message too long``. :func:`split_batches` writes a
large ruleset as a first input that makes the table, its sets (empty) and its chains
(policy ``drop``, no statement yet), then ``add rule`` and ``add element`` commands in
inputs bounded by :data:`BATCH_BYTES`. They are loaded in order before the program
starts, so no packet of the program meets a partial ruleset; a batch that fails stops
the launch (:meth:`pysb_core.net.netns.session.NetnsNetwork.load_filter`).
"""

from __future__ import annotations

from pysb_core._startup.records import Record, record

#: Text bytes of one ``nft -f`` input. A statement costs about 5 times its text in
#: netlink (its comment, an anonymous set per ``{ }``), a set element about 3 times, and
#: the batch must stay under the 208 KiB socket buffer: 24 KiB leaves room for both.
BATCH_BYTES = 24 * 1024
#: Elements of one ``add element`` command (several commands fill a batch).
ELEMENTS_PER_COMMAND = 200
#: Elements shown per line inside one input (readability of ``pysb check``).
_ELEMENTS_PER_LINE = 8


@record
class NftSet(Record):
    """A named interval set: ``type`` (``ipv4_addr . inet_service``...), disjoint elements."""

    name: str
    type: str
    elements: tuple[str, ...]


@record
class Chain(Record):
    """A base chain and its statements, in order."""

    name: str
    kind: str
    hook: str
    priority: int
    policy: str
    statements: list[str]

    def head(self) -> str:
        return (
            f"  chain {self.name} {{\n    type {self.kind} hook {self.hook} priority "
            f"{self.priority}; policy {self.policy};"
        )


@record
class Ruleset(Record):
    """One ``table inet NAME``: its sets and chains."""

    table: str
    sets: list[NftSet]
    chains: list[Chain]

    def text(self) -> str:
        """The whole ruleset as one input (one transaction)."""
        body = [f"table inet {self.table} {{"]
        for s in self.sets:
            body += _set_lines(s, with_elements=True)
        for c in self.chains:
            body += [c.head(), *(f"    {ln}" for ln in c.statements), "  }"]
        body.append("}")
        return "\n".join(body) + "\n"

    def skeleton(self) -> str:
        """The table, its empty sets and its statement-less chains."""
        body = [f"table inet {self.table} {{"]
        for s in self.sets:
            body += _set_lines(s, with_elements=False)
        for c in self.chains:
            body += [c.head(), "  }"]
        body.append("}")
        return "\n".join(body) + "\n"

    def commands(self) -> list[str]:
        """``add rule`` then ``add element`` commands that fill :meth:`skeleton`."""
        out = [
            f"add rule inet {self.table} {c.name} {stmt}"
            for c in self.chains
            for stmt in c.statements
        ]
        for s in self.sets:
            for at in range(0, len(s.elements), ELEMENTS_PER_COMMAND):
                chunk = s.elements[at : at + ELEMENTS_PER_COMMAND]
                out.append(f"add element inet {self.table} {s.name} {{ {', '.join(chunk)} }}")
        return out


def _set_lines(s: NftSet, *, with_elements: bool) -> list[str]:
    lines = [f"  set {s.name} {{", f"    type {s.type}; flags interval;"]
    if with_elements and s.elements:
        rows = [
            ", ".join(s.elements[at : at + _ELEMENTS_PER_LINE])
            for at in range(0, len(s.elements), _ELEMENTS_PER_LINE)
        ]
        lines.append("    elements = { " + (",\n                 ".join(rows)) + " }")
    lines.append("  }")
    return lines


def split_batches(ruleset: Ruleset, limit: int = BATCH_BYTES) -> list[str]:
    """``ruleset`` as ``nft -f`` inputs of at most ``limit`` bytes each (a command longer
    than that alone in its input): ``[text]`` when it fits in one."""
    text = ruleset.text()
    if len(text.encode()) <= limit:
        return [text]
    return [ruleset.skeleton(), *pack(ruleset.commands(), limit)]


def pack(commands: list[str], limit: int = BATCH_BYTES) -> list[str]:
    """Consecutive ``commands`` (one line each) joined into inputs of at most ``limit``
    bytes, order kept."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for cmd in commands:
        cost = len(cmd.encode()) + 1
        if current and size + cost > limit:
            out.append("\n".join(current) + "\n")
            current, size = [], 0
        current.append(cmd)
        size += cost
    if current:
        out.append("\n".join(current) + "\n")
    return out
