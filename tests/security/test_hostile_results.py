"""What a hostile partial-mode child sends back, decoded by a real parent (issue 26 #1-#3).

Each case runs a fresh parent interpreter (so that a data module such as ``ipaddress`` is
not loaded yet, as in a real application) that enters ``sandboxes()`` under a real
provider, with and without the Python guards. The sandboxed functions may write the
project directory (``expose-rw``), which is also the parent's ``sys.path[0]``: the child
plants modules there and returns values that name them; it raises exceptions whose frames
name a host file holding a secret; and it forges frames on its own socket (its code can
find the worker's writer) with line numbers and sizes far beyond the bounds.

The parent reports, as JSON: which planted module ran (a marker file), what each call
raised, every file it opened (an audit hook on ``open``), its own time and peak memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pysb_core.testing import require_provider
from pysb_core.testing.partial import profile_text

PROVIDERS = ["subprocess", "landlock", "bwrap", "unshare", "firejail"]

TOOLS = '''
"""The hostile child's functions (imported by the parent and by the sandboxed worker)."""
import contextvars
import gc
import os
import sys
import types
import _pickle

from pysb_core import sandbox

PLANT = "import pathlib\\npathlib.Path(%r).write_text(%r)\\n"


@sandbox
def plant(directory, module, marker):
    """Write a module (or package) that, if the parent ever imports it, leaves a marker."""
    if module == "ipaddress":
        import ipaddress  # noqa: F401  (this child's own, before the planted one exists)
    path = os.path.join(directory, *module.split(".")) + ".py"
    if module == "tzdata":
        os.makedirs(os.path.join(directory, "tzdata", "zoneinfo"), exist_ok=True)
        path = os.path.join(directory, "tzdata", "__init__.py")
    with open(path, "w") as f:
        f.write(PLANT % (marker, module))
    return "planted"


@sandbox
def value_of(module, qualname):
    """A value whose pickle names module.qualname (a module only this child has)."""
    mod = types.ModuleType(module)
    cls = type(qualname, (), {})
    cls.__module__, cls.__qualname__ = module, qualname
    setattr(mod, qualname, cls)
    sys.modules[module] = mod
    return cls()


@sandbox
def address():
    import ipaddress

    return ipaddress.ip_address("127.0.0.1")


@sandbox
def fail_in(filename, lineno):
    """Raise from code that claims to come from `filename` (no grant needed for that)."""
    code = compile("raise ValueError('raised by the child')", filename, "exec")
    exec(code.replace(co_firstlineno=lineno), {})  # the child's own line


def _writer_and_call():
    writer = next(o for o in gc.get_objects() if type(o).__name__ == "FrameWriter")
    ctx = contextvars.copy_context()
    cid = next(v for k, v in ctx.items() if k.name == "pysb_call")
    return writer, cid


@sandbox
def forge_exception(frames, links=1, message="forged"):
    """Send our own EXCEPTION frame for this call, as hostile code in the worker can."""
    writer, cid = _writer_and_call()
    link = {"pickled": None, "state": {}, "module": "builtins", "qualname": "ValueError",
            "message": message, "frames": frames, "relation": "context", "suppress": False}
    writer.send(15, cid, _pickle.dumps([link] * links, protocol=5))
    return "sent"


@sandbox
def forge_result(payload):
    writer, cid = _writer_and_call()
    writer.send(14, cid, payload)
    return "sent"
'''

PARENT = """
import json, os, resource, sys, time, traceback, logging, io
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
opened = []
sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" else None)
import zoneinfo  # loaded by the application; tzdata is not (yet)
from pysb_core import sandboxes
import tools

case = json.loads(sys.argv[1])
report = {"results": {}, "errors": {}}


def attempt(name, fn, *args):
    try:
        report["results"][name] = repr(fn(*args))
    except Exception as exc:
        text = "".join(traceback.format_exception(exc))
        log = io.StringIO()
        handler = logging.StreamHandler(log)
        logging.getLogger("t").addHandler(handler)
        logging.getLogger("t").error("call failed", exc_info=exc)
        logging.getLogger("t").removeHandler(handler)
        mro = [c.__name__ for c in type(exc).__mro__]
        report["errors"][name] = {"type": type(exc).__name__, "mro": mro, "text": text,
                                  "log": log.getvalue()}


with sandboxes(profile=case["profile"], cwd=case["project"], python_guards=case["guards"],
               start_timeout=180.0):
    d, m = case["project"], case["markers"]
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    before = set(sys.modules)
    tools.plant(d, "planted_mod", os.path.join(m, "planted_mod"))
    attempt("unloaded module", tools.value_of, "planted_mod", "Thing")
    tools.plant(d, "ipaddress", os.path.join(m, "ipaddress"))
    attempt("data module not loaded", tools.address)
    tools.plant(d, "tzdata", os.path.join(m, "tzdata"))
    # what no honest pickle has (a ZoneInfo pickles through getattr): the reconstructor
    # by name, with a key that is in no time-zone directory, so zoneinfo imports tzdata
    attempt("zoneinfo key", tools.forge_result, b"\\x80\\x05\\x8c\\x08zoneinfo\\x8c\\x12"
            b"ZoneInfo._unpickle\\x93\\x8c\\x0cNowhere/ZoneK\\x01\\x86R.")
    report["new_modules"] = sorted(set(sys.modules) - before)
    opened.clear()
    attempt("host file in a frame", tools.fail_in, case["secret"], 1)
    report["opened"] = [p for p in opened if not p.startswith(("/proc/", "/dev/"))]
    for lineno in (600_000_000, 2**31, 2**63):
        attempt(f"line {lineno}", tools.forge_exception, [("/x.py", lineno, "f", "line")])
    attempt("deep chain", tools.forge_exception, [("/x.py", 1, "f", "line")], 10_000)
    attempt("many frames", tools.forge_exception, [("/x.py", 1, "f", "line")] * 100_000)
    attempt("long name", tools.forge_exception, [("/x.py", 1, "f" * 10**6, "line")])
    attempt("long message", tools.forge_exception, [], 1, "m" * (1 << 21))
    attempt("memo bomb", tools.forge_result, b"\\x80\\x05N\\x72\\xff\\xff\\xff\\x07.")
    attempt("set bomb", tools.forge_result,
            b"\\x80\\x05\\x8c\\x08builtins\\x8c\\x03set\\x93\\x8c\\x08builtins\\x8c\\x05range"
            b"\\x93\\x8a\\x06\\x00\\x10\\xa5\\xd4\\xe8\\x00\\x85R\\x85R.")
    report["seconds"] = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report["rss_growth_mib"] = (peak - start_rss) / 1024
    report["still_serves"] = tools.plant(d, "late_mod", os.path.join(m, "late_mod"))
report["markers"] = sorted(os.listdir(case["markers"]))
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(params=PROVIDERS)
def provider(request) -> str:
    if request.param != "subprocess":
        require_provider(request.param)
    return request.param


@pytest.fixture(params=[True, False], ids=["guards", "no-guards"])
def guards(request, provider) -> bool:
    if not request.param and provider == "subprocess":
        pytest.skip("subprocess without the Python guards refuses to start (no boundary)")
    if request.param:
        try:
            import pysb_guards  # noqa: F401
        except ImportError:
            pytest.skip("pysb-guards is not installed")
    return request.param


_reports: dict[tuple[str, bool], dict] = {}


@pytest.fixture
def report(tmp_path_factory: pytest.TempPathFactory, provider: str, guards: bool) -> dict:
    """One parent run per provider and guards setting, shared by the tests below."""
    if (provider, guards) not in _reports:
        _reports[provider, guards] = _run_parent(
            tmp_path_factory.mktemp("hostile"), provider, guards
        )
    return _reports[provider, guards]


def _run_parent(tmp_path: Path, provider: str, guards: bool) -> dict:
    project = tmp_path / "project"
    markers = tmp_path / "markers"
    project.mkdir()
    markers.mkdir()
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-SECRET-MARKER-7f3a\n")
    (project / "tools.py").write_text(TOOLS)
    (project / "parent.py").write_text(textwrap.dedent(PARENT))
    profile = tmp_path / "profile.pysb.yaml"  # outside expose-rw: landlock cannot guard it there
    profile.write_text(profile_text(provider, project, rw=project))
    case = {
        "profile": str(profile),
        "project": str(project),
        "markers": str(markers),
        "secret": str(secret),
        "guards": guards,
    }
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, str(project / "parent.py"), json.dumps(case)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=project,
        env=env,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"the parent failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("REPORT ") :])


def test_decoding_never_imports_what_the_child_planted(report):
    assert report["markers"] == [], "a planted module ran in the parent"
    assert report["new_modules"] == []
    for case in ("unloaded module", "data module not loaded", "zoneinfo key"):
        error = report["errors"][case]
        assert error["type"] == "RestrictedResultError", error
    assert "has not imported ipaddress" in report["errors"]["data module not loaded"]["text"]
    assert report["still_serves"] == "planted"


def test_a_traceback_never_opens_the_file_a_frame_names(report):
    error = report["errors"]["host file in a frame"]
    assert error["type"] == "ValueError"
    for text in (error["text"], error["log"]):
        assert "HOST-SECRET-MARKER" not in text
        assert "raised by the child" in text
        # the child's own frame, with its own source line as the child read it
        assert "exec(code.replace(co_firstlineno=lineno), {})" in text
    assert not [p for p in report["opened"] if "host-secret" in p], report["opened"]


def test_numbers_and_sizes_beyond_the_bounds_are_protocol_errors(report):
    for case in (
        "line 600000000",
        "line 2147483648",
        "line 9223372036854775808",
        "deep chain",
        "many frames",
        "long name",
        "long message",
        "memo bomb",
        "set bomb",
    ):
        error = report["errors"][case]
        assert "SandboxProtocolError" in error["mro"], (case, error)
    assert report["seconds"] < 60, report["seconds"]
    assert report["rss_growth_mib"] < 200, report["rss_growth_mib"]
