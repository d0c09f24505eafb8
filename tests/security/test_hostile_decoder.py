"""Generated hostile frames against the parent's decoders (issue 26, the harness).

A fresh parent interpreter (so that what it has imported is a real application's, not
pytest's) decodes thousands of hypothesis-generated frames the way partial mode decodes
what a sandboxed worker sends: results (``unpickler.loads`` with no allowed classes),
raised exceptions (``exceptions=True``) and exception chains (``rebuild_chain``), and
report lines (``events.report_lines`` + ``Event.from_json``). The frames are pickles built
from every opcode of the protocol, with globals naming modules the parent has not loaded,
reconstructors, huge memo indices, lengths and digit counts; truncations and mutations of
real pickles; tracebacks with hostile names and line numbers; raw bytes.

For every frame the parent asserts: no module was imported (``sys.modules`` unchanged,
and the ``import`` audit event never fired), no file was opened (the ``open`` audit
event), the decode took < 5 s and < 64 MiB (``tracemalloc``), and it either returned or
raised a pysb ``SandboxError`` (``RestrictedResultError``, ``SandboxProtocolError``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HARNESS = textwrap.dedent(
    r"""
    import io, json, os, pickle, pickletools, socket, struct, sys, threading, time, tracemalloc

    from hypothesis import HealthCheck, given, settings, strategies as st

    from pysb_core.errors import SandboxError
    from pysb_core.events import Event, ReportLimits, report_lines
    from pysb_core.remote import exceptions as remote_exceptions
    from pysb_core.errors import SandboxProtocolError
    from pysb_core.remote import buffers as pysb_buffers, transport, unpickler

    EXAMPLES = int(sys.argv[1])
    # Modules a fresh application has not loaded (some are ones pysb's allowlist names).
    UNLOADED = ["tzdata", "zoneinfo", "ipaddress", "fractions", "decimal", "uuid", "pathlib",
                "xml.dom.minidom", "planted_module", "os", "subprocess", "ctypes", "importlib"]
    NAMES = ["system", "Popen", "ZoneInfo", "_unpickle", "IPv4Network", "Fraction", "loads",
             "import_module", "getattr", "eval", "__import__", "Path", "PosixPath", "UUID",
             "OrderedDict", "bytearray", "RuntimeError", "_rebuild_denied"]
    OPCODES = [op for op in pickletools.opcodes]

    def arg_bytes(op, draw):
        kind = op.arg
        if kind is None:
            return b""
        name = kind.name
        if name == "uint1":
            return bytes([draw(st.integers(0, 255))])
        if name == "uint2":
            return struct.pack("<H", draw(st.integers(0, 0xFFFF)))
        if name in ("int4", "uint4"):
            return struct.pack("<I", draw(st.sampled_from([0, 1, 7, 2**20, 2**31 - 1, 2**32 - 1])))
        if name == "uint8":
            return struct.pack("<Q", draw(st.sampled_from([0, 3, 2**40, 2**64 - 1])))
        if name in ("stringnl", "stringnl_noescape", "decimalnl_short", "decimalnl_long",
                    "floatnl", "unicodestringnl"):
            text = draw(st.sampled_from(["0", "9" * 5000, "'x'", "1.5", "builtins", "x"]))
            return text.encode() + b"\n"
        if name == "stringnl_noescape_pair":
            return f"{draw(st.sampled_from(UNLOADED))}\n{draw(st.sampled_from(NAMES))}\n".encode()
        if name in ("long1", "long4"):
            n = draw(st.sampled_from([0, 1, 255, 2**20]))
            head = bytes([min(n, 255)]) if name == "long1" else struct.pack("<i", n)
            return head + b"\x01" * min(n, 64)
        if name in ("string1", "bytes1", "unicodestring1", "short_unicode"):
            n = draw(st.integers(0, 255))
            return bytes([n]) + b"a" * draw(st.integers(0, n))
        if name in ("string4", "bytes4", "unicodestring4", "bytes8", "unicode8", "bytearray8"):
            size = 8 if name.endswith("8") else 4
            n = draw(st.sampled_from([0, 5, 2**20, 2**31 - 1]))
            return n.to_bytes(size, "little") + b"b" * min(n, 16)
        if name == "float8":
            return struct.pack(">d", 1.0)
        return b""

    @st.composite
    def opcode_pickles(draw):
        out = bytearray(b"\x80\x05")
        for _ in range(draw(st.integers(1, 40))):
            op = draw(st.sampled_from(OPCODES))
            if op.name == "STACK_GLOBAL" and draw(st.booleans()):
                for text in (draw(st.sampled_from(UNLOADED)), draw(st.sampled_from(NAMES))):
                    raw = text.encode()
                    out += b"\x8c" + bytes([len(raw)]) + raw
            out += op.code.encode("latin-1") + arg_bytes(op, draw)
        if draw(st.booleans()):
            out += b"."
        return bytes(out)

    VALUES = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
        | st.binary(),
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5)
        | st.tuples(inner, inner),
        max_leaves=20,
    )

    @st.composite
    def mutated_pickles(draw):
        data = bytearray(pickle.dumps(draw(VALUES), protocol=draw(st.integers(0, 5))))
        for _ in range(draw(st.integers(0, 4))):
            if data:
                data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data[: draw(st.integers(0, len(data)))])

    @st.composite
    def hostile_chains(draw):
        link = {
            "module": draw(st.sampled_from(UNLOADED + ["builtins"])),
            "qualname": draw(st.sampled_from(NAMES + ["ValueError", "<locals>.X"])),
            "args": [draw(st.text(max_size=50))],
            "frames": [
                {
                    "file": draw(st.sampled_from(["/etc/shadow", "/etc/passwd", "x\n\x1b[2J",
                                                 "<stdin>", "a" * 5000])),
                    "line": draw(st.sampled_from([0, -1, 1, 6 * 10**8, 2**31, 2**63, "1"])),
                    "name": draw(st.text(max_size=30)),
                    "text": draw(st.text(max_size=30)),
                }
                for _ in range(draw(st.integers(0, 3)))
            ],
            "relation": draw(st.sampled_from(["cause", "context", None])),
        }
        return pickle.dumps([link] * draw(st.integers(1, 40)))

    FRAMES = opcode_pickles() | mutated_pickles() | hostile_chains() | st.binary(max_size=200)

    seen_files = []
    seen_imports = []

    def audit(event, args):
        if event == "open":
            seen_files.append(str(args[0]))
        elif event == "import":
            seen_imports.append(str(args[0]))

    sys.addaudithook(audit)
    stats = {"cases": 0, "errors": 0}

    def decode(fn, data):
        before = set(sys.modules)
        del seen_files[:], seen_imports[:]
        tracemalloc.start()
        start = time.monotonic()
        try:
            fn(data)
        except SandboxError:
            stats["errors"] += 1
        finally:
            took = time.monotonic() - start
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        stats["cases"] += 1
        new = set(sys.modules) - before
        assert not new, (new, data[:200])
        assert not seen_imports, (seen_imports, data[:200])
        assert not seen_files, (seen_files, data[:200])
        assert took < 5, (took, data[:200])
        assert peak < 64 << 20, (peak, data[:200])

    def result(data):
        unpickler.loads(data, {})

    def raised(data):
        unpickler.loads(data, {}, exceptions=True)

    def chain(data):
        exc = remote_exceptions.rebuild_chain(data, {})
        assert isinstance(exc, BaseException)
        if isinstance(exc, SandboxError) and exc.__traceback__ is not None:
            # A refusal raised here carries the parent's own frames (its own files, which
            # printing may read); a rebuilt chain carries only the child's.
            exc.__traceback__ = None
        import traceback
        "".join(traceback.format_exception(exc))  # printing reads no host file either

    def events(data):
        r, w = os.pipe()
        os.write(w, data[:60000] + b"\n")
        os.close(w)
        for line in report_lines(r, ReportLimits()):
            try:
                Event.from_json(line)
            except (ValueError, TypeError, RecursionError):
                pass
        os.close(r)

    def oob(data):
        # An out-of-band result frame (kind RESULT_OOB), read and decoded as the client
        # does: a buffer table that breaks the bounds is a protocol violation.
        a, b = socket.socketpair()

        def send():
            a.sendall(transport.HEADER.pack(len(data), 1, transport.RESULT_OOB) + data)
            a.shutdown(socket.SHUT_WR)  # a reader that reads past the frame sees the end

        sender = threading.Thread(target=send)
        sender.start()
        try:
            reader = transport.FrameReader(b.fileno(), transport.child_limits())
            try:
                kind, _, payload = reader.read()
            except transport.FrameTooLarge as exc:
                raise SandboxProtocolError(str(exc)) from None
            assert kind == transport.RESULT_OOB
            assert len(payload) <= len(data)  # never more than the frame held
            unpickler.loads_oob(payload, {})
        finally:
            sender.join()
            a.close()
            b.close()

    # The decoders' own lazy imports happen once, on honest input, before watching.
    honest, parts = pysb_buffers.dumps([b"x" * (1 << 17), memoryview(b"v")])
    oob(b"".join(bytes(p) for p in pysb_buffers.frame_parts(honest, parts)))
    for fn in (result, raised, chain, events):
        try:
            fn(pickle.dumps([{"module": "builtins", "qualname": "ValueError", "args": ["x"],
                              "frames": [], "relation": None}]))
        except Exception:
            pass

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(FRAMES, st.sampled_from(["result", "raised", "chain", "events"]))
    def test(data, kind):
        decode({"result": result, "raised": raised, "chain": chain, "events": events}[kind], data)

    test()

    # Out-of-band frames: buffer tables of hostile counts, sizes and types, before a
    # generated pickle (whose persistent ids name buffers the frame may not have).
    SIZES = st.sampled_from([0, 1, 4, 100, 2**16, 2**20, 2**62, 2**64 - 1])
    TABLES = st.tuples(
        st.one_of(st.none(), st.sampled_from([0, 1, 2, 1024, 1025, 2**32 - 1])),
        st.lists(st.tuples(SIZES, st.integers(0, 5)), max_size=4),
    )

    @settings(max_examples=max(50, EXAMPLES // 3), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(TABLES, FRAMES, st.binary(max_size=300))
    def test_oob(table, body, tail):
        count, entries = table
        head = struct.pack("<I", len(entries) if count is None else count)
        head += b"".join(struct.pack("<QB", size, code) for size, code in entries)
        decode(oob, head + body + tail)

    test_oob()
    print(json.dumps(stats))
    """
)


@pytest.mark.slow
def test_generated_hostile_frames_import_nothing_open_nothing_and_stay_bounded() -> None:
    result = subprocess.run(
        [sys.executable, "-c", HARNESS, "3000"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    stats = json.loads(result.stdout.splitlines()[-1])
    assert stats["cases"] >= 3000
    assert 0 < stats["errors"] < stats["cases"]  # both refusals and decodes were exercised
