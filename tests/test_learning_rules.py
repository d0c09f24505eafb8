"""Learning writes least privilege that every provider can start (SPEC §4 "Learning writes...").

Real learning runs (``pysb run --learn``) of small programs, then the learned profile read
back for tightness and run unchanged under every provider available here.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pysb_core.testing import Project, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap", "unshare", "firejail", "qemu"]


@pytest.fixture
def project() -> Iterator[Project]:
    """A project in the home directory (projects live anywhere; one below /tmp is tested
    on its own, test_a_project_below_tmp_runs_while_tmp_is_private)."""
    root = Path(tempfile.mkdtemp(prefix=".pysb-learn-", dir=Path.home()))
    try:
        yield Project(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def learned(project: Project, *program: str, env: dict[str, str] | None = None) -> dict:
    """Learn ``program`` once; the profile it wrote, as data."""
    r = project.run("run", "--learn", *program, env=env)
    assert r.returncode == 0, r.stderr
    return yaml.safe_load((project.root / ".pysb.yaml").read_text()) or {}


def exposures(profile: dict) -> dict[str, set[str]]:
    files = profile.get("files") or {}
    return {key: set(files.get(key) or ()) for key in ("expose-ro", "expose-rw")}


def run_under(project: Project, provider: str, *program: str) -> None:
    if provider != "subprocess":
        require_provider(provider)
    r = project.run("run", "--provider", provider, *program, timeout=240)
    assert r.returncode == 0, f"{provider}: {r.stderr}"


WRITES_A_SUBDIRECTORY = """
import os, pathlib
os.makedirs("out", exist_ok=True)
with open("out/report.txt", "w") as f:
    f.write(open("data/in.txt").read().upper())
# config files looked for up the tree, as pytest, black and setuptools do
here = os.getcwd()
while True:
    for name in ("setup.cfg", "tox.ini", "pyproject.toml"):
        try:
            open(os.path.join(here, name)).close()
        except OSError:
            pass
        os.path.exists(os.path.join(here, "." + name))
    if here == "/":
        break
    here = os.path.dirname(here)
print("ok")
"""


def test_writes_map_to_the_directory_written_into(project: Project) -> None:
    project.file("data/in.txt", "abc")
    project.file("app.py", WRITES_A_SUBDIRECTORY)
    profile = learned(project, "app.py")
    seen = exposures(profile)
    assert seen["expose-rw"] == {"./out"}, profile
    # the data directory, never "." (nothing was read there but the script), "/" or a
    # parent probed for a config file
    assert seen["expose-ro"] == {"./data"}, profile
    assert (project.root / "out" / "report.txt").read_text() == "ABC"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_learned_subdirectory_profile_runs_everywhere(project: Project, provider: str) -> None:
    project.file("data/in.txt", "abc")
    project.file("app.py", WRITES_A_SUBDIRECTORY)
    learned(project, "app.py")
    run_under(project, provider, "app.py")


MAKEDIRS_EXISTING = """
import os, pathlib
os.makedirs("out", exist_ok=True)
os.makedirs("ro", exist_ok=True)
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("ro").mkdir(parents=True, exist_ok=True)
for d in ("out", "ro"):
    try:
        os.mkdir(d)
    except FileExistsError:
        pass
os.makedirs("out/a/b", exist_ok=True)
print("ok")
"""


@pytest.mark.parametrize("provider", PROVIDERS)
def test_makedirs_of_an_exposed_existing_directory_succeeds(
    project: Project, provider: str
) -> None:
    """The kernel answers EEXIST for an existing directory, whatever the parent allows: so
    does the guard (``pathlib`` only tolerates ``FileExistsError``)."""
    (project.root / "out").mkdir()
    (project.root / "ro").mkdir()
    project.file("app.py", MAKEDIRS_EXISTING)
    project.profile("files:\n  expose-rw: [./out]\n  expose-ro: [./ro]\nimports: [os, pathlib]\n")
    run_under(project, provider, "app.py")
    assert (project.root / "out" / "a" / "b").is_dir()


def test_a_stat_of_a_missing_zip_on_sys_path_exposes_nothing(project: Project) -> None:
    """``python311.zip`` (first on ``sys.path``, never there) is stat'ed by every import."""
    project.file(
        "app.py",
        "import os, sys\n"
        "for p in sys.path:\n"
        "    if p.endswith('.zip'):\n"
        "        os.path.exists(p); os.path.isdir(os.path.dirname(p))\n"
        "import json, csv\n",
    )
    profile = learned(project, "app.py")
    assert exposures(profile) == {"expose-ro": set(), "expose-rw": set()}, profile


def test_a_temporary_directory_made_and_removed_is_its_parent(project: Project) -> None:
    """A directory created then removed was written *in* its parent (the only rule that lets
    the next run do it again); never "/" nor a directory that no longer exists."""
    (project.root / "work").mkdir()
    project.file(
        "app.py",
        "import os, shutil\n"
        "os.makedirs('work/tmp1/deep')\n"
        "open('work/tmp1/deep/f', 'w').close()\n"
        "shutil.rmtree('work/tmp1')\n",
    )
    profile = learned(project, "app.py")
    assert exposures(profile)["expose-rw"] == {"./work"}, profile
    run_under(project, "subprocess", "app.py")


def test_learning_never_writes_the_root(tmp_path: Path) -> None:
    from pysb_guards.files.hooks import learned_exposures

    from pysb_core.events import Event

    def ev(target: str, detail: str, **data: object) -> Event:
        return Event("python", "files", "learn", target, detail, data=data)

    rows = learned_exposures(
        [
            ev("/pysb-nosuch-file", "write", write=True, exists=False),
            ev("/etc", "write", write=True, isdir=True),  # a directory written through
            ev("/tmp", "read", isdir=True),
            ev("/hostname", "read"),
            ev(str(tmp_path / "gone" / "x"), "read"),  # a directory that no longer exists
        ]
    )
    assert rows == [("expose-rw", "/etc"), ("expose-ro", "/tmp")]


def test_a_module_read_from_its_bytecode_cache_is_its_source_directory(tmp_path: Path) -> None:
    """An import that finds a valid ``.pyc`` reads only it (the source is stat'ed by the
    import system's own calls): the rule must still be the source's directory, or the
    next run cannot find the module (``./__pycache__`` alone was learned)."""
    from pysb_guards.files.hooks import learned_exposures

    from pysb_core.events import Event

    cache = tmp_path / "__pycache__"
    cache.mkdir()
    (cache / "mod.cpython-311.pyc").write_bytes(b"")
    (tmp_path / "__pycache__x").mkdir()
    (tmp_path / "__pycache__x" / "data.pyc").write_bytes(b"")
    rows = learned_exposures(
        [
            Event("python", "files", "learn", str(cache / "mod.cpython-311.pyc"), "read"),
            Event("python", "files", "learn", str(tmp_path / "__pycache__x" / "data.pyc"), "read"),
        ]
    )
    assert rows == [("expose-ro", str(tmp_path))]


def test_caching_bytecode_makes_nothing_writable(project: Project) -> None:
    """Importing a module of the project writes its ``__pycache__`` (as under ``python``,
    unless PYTHONDONTWRITEBYTECODE): a learning run must not turn that into ``expose-rw``
    of the project; the next run imports it without writing the cache."""
    project.file("helper.py", "def f():\n    return 41 + 1\n")
    project.file("app.py", "import helper\nprint(helper.f())\n")
    profile = learned(project, "app.py")  # the project's runs get no PYTHONDONTWRITEBYTECODE
    assert (project.root / "__pycache__").is_dir()  # the learning run did cache it
    assert "expose-rw" not in (profile.get("files") or {}), profile
    shutil.rmtree(project.root / "__pycache__")
    r = project.run("run", "--provider", "subprocess", "app.py")
    assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr
    assert not (project.root / "__pycache__").exists()  # refused, and not missed


# -- the private temporary directory (SPEC §4 "temporary files") ---------------------------

USES_TMP = """
import json, os, sys, tempfile
tmp = os.environ["TMPDIR"]
report = {"tmpdir": tmp, "empty": os.listdir(tmp) == [], "gettempdir": tempfile.gettempdir()}
with tempfile.NamedTemporaryFile(dir=None) as f:
    f.write(b"x")
    report["named"] = os.path.dirname(f.name)
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "f"), "w").write("x")
    os.makedirs(os.path.join(d, "a", "b"))
open(os.path.join(tmp, "left-behind"), "w").write("x")
if sys.argv[1:] == ["slash-tmp"]:
    open("/tmp/also", "w").write("x")  # /tmp itself, the same private directory
    report["slash-tmp"] = sorted(os.listdir("/tmp"))
print(json.dumps(report))
"""


def _tmp_report(r) -> dict:
    import json

    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_provider_gives_a_private_temporary_directory(
    project: Project, provider: str
) -> None:
    """Private, empty, writable, removed at the end, needing no rule: the profile exposes
    nothing at all, and the host's own temporary directory is never what the program gets."""
    if provider != "subprocess":
        require_provider(provider)
    project.file("app.py", USES_TMP)
    project.profile("imports: [json, os, sys, tempfile]\n")
    namespace = provider in ("bwrap", "unshare", "firejail", "qemu")
    args = ["slash-tmp"] if namespace else []
    r = project.run("run", "--provider", provider, "app.py", *args, timeout=240)
    report = _tmp_report(r)
    assert report["empty"], report
    assert report["named"] == report["tmpdir"] == report["gettempdir"], report
    if namespace:  # a mount namespace: /tmp itself is the private directory
        assert report["tmpdir"] == "/tmp", report
        assert report["slash-tmp"] == ["also", "left-behind"], report
    else:
        assert report["tmpdir"] not in ("/tmp", "/var/tmp"), report
        assert not os.path.exists(report["tmpdir"]), "the private directory outlived the run"


def test_a_killed_pysb_leaves_no_temporary_directory_behind(project: Project) -> None:
    """A pysb killed by SIGKILL runs no clean-up: the next run removes what it left."""
    import signal
    import subprocess
    import time

    from pysb_core.testing import BASE_ENV, pysb_command

    project.profile("imports: [os, time]\n")
    code = "import os, time; print(os.environ['TMPDIR'], flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [*pysb_command(), "run", "--provider", "subprocess", "-c", code],
        cwd=project.root,
        env=BASE_ENV,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        left = proc.stdout.readline().strip()
        assert os.path.isdir(left), left
        os.kill(proc.pid, signal.SIGKILL)  # our own child, by its PID
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(left) and time.monotonic() < deadline:
        assert project.run("run", "--provider", "subprocess", "-c", "pass").returncode == 0
        time.sleep(0.2)
    assert not os.path.exists(left)


def test_learning_never_writes_a_rule_for_the_temporary_directory(project: Project) -> None:
    project.file("app.py", USES_TMP)
    profile = learned(project, "app.py")
    assert exposures(profile) == {"expose-ro": set(), "expose-rw": set()}, profile
    assert "TMPDIR" not in (profile.get("env") or {}), profile


def test_a_variable_unset_while_learning_is_not_forwarded(project: Project) -> None:
    project.file(
        "app.py",
        "import os\n"
        "print(os.environ.get('SSLKEYLOGFILE'), os.getenv('PYSB_LEARN_SET'))\n"
        "print('PYSB_LEARN_UNSET' in os.environ, os.environ.get('PYSB_LEARN_EMPTY'))\n",
    )
    profile = learned(project, "app.py", env={"PYSB_LEARN_SET": "1", "PYSB_LEARN_EMPTY": ""})
    assert set(profile.get("env") or {}) == {"PYSB_LEARN_SET", "PYSB_LEARN_EMPTY"}, profile


def test_a_category_collapses_when_every_function_is_used_whatever_the_spelling(
    project: Project,
) -> None:
    """Every deserialization function, some through their C aliases (``_pickle.loads`` is
    ``pickle.loads``): one ``deserialization`` line, not one line per spelling."""
    project.file(
        "app.py",
        "import io, pickle, _pickle, fractions\n"
        "data = pickle.dumps(fractions.Fraction(1, 3))  # a class: find_class runs\n"
        "_pickle.loads(data); _pickle.load(io.BytesIO(data))\n"
        "pickle._loads(data); pickle._load(io.BytesIO(data))\n"
        "pickle._Unpickler(io.BytesIO(data)).load()\n"
        "_pickle.Unpickler(io.BytesIO(data)).load()\n",
    )
    profile = learned(project, "app.py")
    assert (profile.get("api") or {}).get("allow") == ["deserialization"], profile


def test_every_category_collapses_from_any_spelling_of_its_functions() -> None:
    from pysb_guards import registry
    from pysb_guards.api import hooks as api_hooks

    from pysb_core.events import Event

    for category in registry.CATEGORIES:
        entries = [e for e in registry.applicable() if e.category == category]
        for spelled in (lambda e: e.qualname, lambda e: e.group):
            records = [Event("python", "api", "learn", spelled(e), category) for e in entries]
            assert [v for v, _ in api_hooks.learned_api(records)] == [category]
        one_short = [Event("python", "api", "learn", e.qualname, category) for e in entries]
        missing = entries[-1].group
        one_short = [r for r in one_short if registry.BY_NAME[r.target].group != missing]
        rows = [v for v, _ in api_hooks.learned_api(one_short)]
        assert category not in rows and len(rows) == len(set(rows)), (category, rows)


# -- ephemeral ports ------------------------------------------------------------------------

SELF_SERVER = """
import socket, threading
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
server.settimeout(20)  # a connection that went elsewhere fails the run, never hangs it
port = server.getsockname()[1]

def answer():
    conn, _ = server.accept()
    conn.sendall(conn.recv(16).upper())
    conn.close()

t = threading.Thread(target=answer)
t.start()
with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
    c.sendall(b"ping")
    print(c.recv(16).decode())
t.join()
"""


def _ephemeral() -> str:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return f"{low}-{high}"


def test_a_port_zero_server_and_its_clients_learn_the_ephemeral_range(project: Project) -> None:
    project.file("app.py", SELF_SERVER)
    profile = learned(project, "app.py")
    span = _ephemeral()
    assert sorted(profile["network"]) == [
        f"allow tcp 127.0.0.1 {span} in",
        f"allow tcp 127.0.0.1 {span} out",
    ], profile


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_learned_ephemeral_server_runs_everywhere(project: Project, provider: str) -> None:
    project.file("app.py", SELF_SERVER)
    learned(project, "app.py")
    if provider != "subprocess":
        require_provider(provider)
    r = project.run("run", "--provider", provider, "app.py", timeout=240)
    if provider == "firejail" and os.getuid() != 0:
        # Documented (docs/providers.md, root and normal users): firejail enforces network
        # rules for root only; a normal user is refused with the reason and the fix.
        assert r.returncode == 125 and "bwrap or unshare" in r.stderr, r.stderr
        return
    assert r.returncode == 0 and r.stdout.strip() == "PING", f"{provider}: {r.stderr}"


LEARNED_EPHEMERAL = ("allow tcp 127.0.0.1 32768-60999 in", "allow tcp 127.0.0.1 32768-60999 out")


def test_every_compiler_reads_a_learned_ephemeral_range_as_the_programs_own() -> None:
    """A bind to port 0 is allowed by the range (guard, landlock); nothing is forwarded from
    the host, and connections to the range are not sent to the host's loopback (nft for
    bwrap/unshare, the qemu guest's nft)."""
    from pysb_landlock.compiler import compile_plan
    from pysb_qemu import netfilter

    from pysb_core.net.netfilter import compile_nft
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Policy, netmatch
    from pysb_core.policy.netrules import parse_rule

    rules = tuple(parse_rule(r, source=f"p.yaml:{i}") for i, r in enumerate(LEARNED_EPHEMERAL))
    span = (32768, 60999)
    m = netmatch.compile_matcher(rules, {}, None, None, span)
    ip = m["algebra"]["ip"]("127.0.0.1")
    assert netmatch.decide(m, "tcp", ip, 0, "in")[0]
    assert not netmatch.decide(m, "tcp", ip, 0, "out")[0]
    narrow = netmatch.compile_matcher(
        [parse_rule("allow tcp 127.0.0.1 40000-40010 in")], {}, None, None, span
    )
    assert not netmatch.decide(narrow, "tcp", ip, 0, "in")[0]
    denied = netmatch.compile_matcher([*rules, parse_rule("deny tcp * 0 in")], {}, None, None, span)
    assert not netmatch.decide(denied, "tcp", ip, 0, "in")[0]

    compiled = compile_nft(rules, {})
    assert compiled.inbound == [] and compiled.host_loopback == []
    assert "dnat" not in compiled.ruleset
    host = compile_nft([parse_rule("allow tcp 127.0.0.1 8000 out")], {})
    assert host.host_loopback  # a host service on a named port is still the host's

    policy = Policy(network=rules, provider="qemu")
    guest = netfilter.compile_guest_filter(policy)
    assert guest.inbound == [] and not guest.nat
    assert "dnat" not in guest.ruleset

    plan = LaunchPlan(
        policy=policy.replace(provider="landlock"), python="/p", argv=[], env={}, cwd="/"
    )
    bind = compile_plan(plan, 4).bind
    assert bind is not None and bind[0] == (0, 0)


# -- child processes ------------------------------------------------------------------------

RUNS_CHILDREN = """
import os, subprocess
print(subprocess.run(["ls", "/usr/bin"], capture_output=True, check=True).returncode)
print(subprocess.run(["/bin/sh", "-c", "exit 0"]).returncode)
os.system("true")
"""


@pytest.mark.parametrize("provider", PROVIDERS)
def test_what_a_child_program_needs_is_learned(project: Project, provider: str) -> None:
    """The binary, its ELF interpreter and its shared libraries: landlock and firejail then
    start it too (they confine exec and the loader's reads)."""
    project.file("app.py", RUNS_CHILDREN)
    profile = learned(project, "app.py")
    ro = exposures(profile)["expose-ro"]
    assert "/usr/bin" in ro and "/" not in ro, profile
    assert any(p.startswith(("/usr/lib", "/lib")) for p in ro), profile
    run_under(project, provider, "app.py")


def test_needed_files_reads_pt_interp_and_the_loaders_list() -> None:
    from pysb_core.linux import execdeps

    ls = execdeps.find_executable("ls", "/nonexistent:/usr/bin:/bin", "/")
    assert ls is not None
    files = execdeps.needed_files(ls)
    loader = execdeps.elf_interpreter(os.path.realpath(ls))
    assert loader and os.path.realpath(loader) in files
    assert any(os.path.basename(f).startswith("libc.so") for f in files), files
    script = execdeps.find_executable("pysb", os.path.dirname(sys.executable), "/")
    assert script is not None and os.path.realpath(sys.executable) in execdeps.needed_files(script)
    assert execdeps.find_executable("pysb-no-such-tool", "/usr/bin", "/") is None
    # a PT_INTERP that is not the system's loader is never run
    assert execdeps.shared_libraries(os.path.realpath(ls), "/bin/true") == []
    assert execdeps.is_system_loader(os.path.realpath(loader))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_project_below_tmp_runs_while_tmp_is_private(tmp_path: Path, provider: str) -> None:
    """Projects live anywhere, /tmp too: the private /tmp of bwrap, unshare and the qemu guest
    still shows the exposed project below it (qemu copied the script into a /tmp its tmpfs
    then hid)."""
    if provider != "subprocess":
        require_provider(provider)
    assert str(tmp_path).startswith(tempfile.gettempdir())
    here = Project(tmp_path)
    here.file("data/in.txt", "abc")
    here.file(
        "app.py",
        "import os\n"
        "open(os.path.join(os.environ['TMPDIR'], 'pysb-probe-below-tmp'), 'w').write('x')\n"
        "print(open('data/in.txt').read(), os.listdir(os.environ['TMPDIR']))\n",
    )
    here.profile("files:\n  expose-ro: [./data]\nimports: [os]\n")
    r = here.run("run", "--provider", provider, "app.py", timeout=240)
    assert r.returncode == 0 and r.stdout.split()[0] == "abc", f"{provider}: {r.stderr}"
    assert not os.path.exists("/tmp/pysb-probe-below-tmp")  # private: not the host's /tmp


@pytest.mark.parametrize("provider", ["bwrap", "firejail"])
def test_a_profile_exposing_tmp_itself_still_gets_a_private_directory(
    project: Project, provider: str
) -> None:
    """``expose-ro: [/tmp]`` shows the host's /tmp: TMPDIR is then a directory of the
    sandbox's own, and writing /tmp itself stays refused (read-only, as the profile says)."""
    require_provider(provider)
    project.file(
        "app.py",
        "import os, tempfile\n"
        "with tempfile.NamedTemporaryFile() as f: f.write(b'x')\n"
        "try:\n"
        "    open('/tmp/pysb-probe-exposed-ro', 'w')\n"
        "except OSError:\n"
        "    print('refused', os.environ['TMPDIR'] != '/tmp')\n",
    )
    project.profile("files:\n  expose-ro: [/tmp]\nimports: [os, tempfile]\n")
    r = project.run("run", "--provider", provider, "app.py", timeout=240)
    assert r.returncode == 0 and r.stdout.strip() == "refused True", r.stderr
    assert not os.path.exists("/tmp/pysb-probe-exposed-ro")
