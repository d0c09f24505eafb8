"""The interpreter ``pysb run`` starts ahead (pysb_core.launch.prestart), with real runs.

It may only ever stand for the interpreter the launch would have started: the same command
line, environment, working directory, descriptors and pre-exec steps, or it is killed
before it reads anything. These runs check what the program sees with and without it, and
that a changed profile, an error before the launch or a hand-written entry never lets it
run with what the profile no longer allows.
"""

from __future__ import annotations

import json
import marshal
import os
import subprocess
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, pysb_command, require_provider, run_pysb

PROGRAM = r"""
import json, os, sys
try:
    with open('/proc/self/environ', 'rb') as f:
        exec_env = sorted(x.split(b'=', 1)[0].decode() for x in f.read().split(b'\0') if x)
except OSError as exc:
    exec_env = type(exc).__name__
tmp = os.environ.get('TMPDIR', '')
print(json.dumps({
    'env': {k: (v if k != 'TMPDIR' else '<tmp>') for k, v in os.environ.items()},
    'exec_env': exec_env,
    'tmp_is_dir': os.path.isdir(tmp),
    'argv': sys.argv, 'path': sys.path, 'cwd': os.getcwd(),
    'flags': [getattr(sys.flags, n) for n in ('optimize', 'dont_write_bytecode', 'safe_path')],
    'modules': sorted(sys.modules),  # the guards imported while waiting: the same set
}))
sys.exit(3)
"""


def _profile(project: Path, *names: str) -> Path:
    env = "".join(f"  {n}: ${{{n}}}\n" for n in names)
    path = project / "p.yaml"
    path.write_text(
        "version: 1\nlearn: false\nimports: [json, os, sys]\n" + (f"env:\n{env}" if env else "")
    )
    return path


def _run(project: Path, provider: str, env: dict[str, str], *extra: str):
    return run_pysb(
        "run", "--provider", provider, "--profile", "p.yaml", *extra, "-c", PROGRAM,
        cwd=project, env=env,
    )  # fmt: skip


def _trace(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln.split("prestart: ", 1)[1] for ln in proc.stderr.splitlines() if "prestart: " in ln]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tmp").mkdir()
    return {
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # an entry directory of this test's own
        "TMPDIR": str(tmp_path / "tmp"),
        "PYSB_DEBUG_PRESTART": "1",
        "KEEP": "kept value",
        "DROP": "dropped value",
    }


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def _entries(env: dict[str, str]) -> list[Path]:
    return sorted((Path(env["XDG_CACHE_HOME"]) / "pysb" / "prestart").iterdir())


def _record(entry: Path) -> dict:
    fmt, record = marshal.loads(entry.read_bytes())
    assert fmt == 2
    return record


def _rewrite(entry: Path, **changes) -> None:
    entry.write_bytes(marshal.dumps((2, {**_record(entry), **changes})))


def _host_tmp_left(env: dict[str, str]) -> list[Path]:
    """What is left of the private host directories this test's runs made."""
    base = Path(env["TMPDIR"]) / f"pysb-{os.getuid()}"
    return list(base.iterdir()) if base.exists() else []


@pytest.mark.parametrize(
    "provider",
    [
        "subprocess",
        pytest.param("landlock", marks=pytest.mark.provider("landlock")),
        pytest.param("bwrap", marks=pytest.mark.provider("bwrap")),
    ],
)
def test_the_second_run_starts_ahead_and_the_program_sees_the_same(project, env, provider):
    if provider != "subprocess":
        require_provider(provider)
    _profile(project, "KEEP")
    first = _run(project, provider, env)
    assert first.returncode == 3, first.stderr
    assert _trace(first) == ["nothing remembered", "remembered 1 names"]
    ahead = _run(project, provider, env, "-B")
    plain = _run(project, provider, {**env, "PYSB_PRESTART": "0"}, "-B")
    assert [ahead.returncode, plain.returncode] == [3, 3], (ahead.stderr, plain.stderr)
    # -B is one of pysb's CPython options: another entry, remembered, then run ahead
    assert _trace(ahead) == ["nothing remembered", "remembered 1 names"]
    assert _trace(plain) == []
    again = _run(project, provider, env, "-B")
    assert again.returncode == 3, again.stderr
    assert _trace(again)[-1] == "used", again.stderr
    seen, expected = json.loads(again.stdout), json.loads(plain.stdout)
    assert seen == expected
    seen["env"].pop("LC_CTYPE", None)  # CPython's own locale coercion (PEP 538), both ways
    assert seen["env"] == {"KEEP": "kept value", "TMPDIR": "<tmp>"}
    assert seen["tmp_is_dir"] is True
    assert seen["flags"][1] == 1  # -B reached the interpreter ahead's command line
    if isinstance(seen["exec_env"], list):  # what the interpreter was exec'd with
        assert seen["exec_env"] == ["KEEP", "TMPDIR"]
    assert len(_entries(env)) == 2
    assert not _host_tmp_left(env)  # all removed


def test_other_code_shares_the_entry(project, env):
    """The entry is the command's options and directory, not the program: an LLM's tool
    loop runs other code every time."""
    _profile(project)
    for code, expected in (("print(1)", "1"), ("print(2)", "2"), ("print(3)", "3")):
        proc = run_pysb(
            "run", "--provider", "subprocess", "--profile", "p.yaml", "-c", code,
            cwd=project, env=env,
        )  # fmt: skip
        assert proc.returncode == 0 and proc.stdout.strip() == expected, proc.stderr
    assert _trace(proc)[-1] == "used"
    assert len(_entries(env)) == 1


def test_a_variable_the_profile_no_longer_forwards_never_reaches_the_program(project, env):
    _profile(project, "KEEP", "DROP")
    assert _run(project, "subprocess", env).returncode == 3
    _profile(project, "KEEP")  # the user takes DROP out of the profile
    proc = _run(project, "subprocess", env)
    assert proc.returncode == 3, proc.stderr
    trace = _trace(proc)
    assert trace[0].startswith("started ahead") and "discarded: another environment" in trace
    seen = json.loads(proc.stdout)
    assert "DROP" not in seen["env"] and "DROP" not in seen["exec_env"]
    assert _trace(_run(project, "subprocess", env))[-1] == "used"  # remembered anew


def test_a_hand_written_entry_naming_a_secret_changes_nothing_the_program_sees(project, env):
    """The entry holds names only; one naming more than the profile forwards lets pysb's own
    bootstrap hold the value until the comparison kills it, never the program."""
    _profile(project, "KEEP")
    assert _run(project, "subprocess", env).returncode == 3
    [entry] = _entries(env)
    _rewrite(entry, names=("KEEP", "SECRET"))
    proc = _run(project, "subprocess", {**env, "SECRET": "s3cr3t"})
    assert proc.returncode == 3, proc.stderr
    assert "discarded: another environment" in _trace(proc)
    seen = json.loads(proc.stdout)
    assert "SECRET" not in seen["env"] and "SECRET" not in seen["exec_env"]
    assert "s3cr3t" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.chmod(0o666), id="writable-by-others"),
        pytest.param(lambda p: p.write_bytes(b"\x00garbage"), id="not-marshal"),
        pytest.param(lambda p: _rewrite(p, names=("A=B",)), id="bad-name"),
        pytest.param(lambda p: _rewrite(p, names=["KEEP"]), id="a-list"),
        pytest.param(lambda p: _rewrite(p, names=("K",) * 5000), id="too-many"),
        pytest.param(lambda p: p.write_bytes(marshal.dumps((1, ("KEEP",)))), id="other-format"),
        pytest.param(lambda p: _rewrite(p, cwd="relative"), id="relative-cwd"),
        pytest.param(lambda p: _rewrite(p, tmpdir="relative"), id="relative-tmp"),
        pytest.param(lambda p: _rewrite(p, extra=1), id="another-key"),
        pytest.param(lambda p: _rewrite(p, prefix=(("exec", "/bin/sh"),)), id="unknown-kind"),
        pytest.param(lambda p: _rewrite(p, prefix=(("copy", "etc/passwd"),)), id="relative-copy"),
        pytest.param(lambda p: _rewrite(p, prefix=(("bytes", b"x" * 70_000),)), id="big-bytes"),
        pytest.param(lambda p: _rewrite(p, prefix=(("report", 7),)), id="report-number"),
        pytest.param(lambda p: _rewrite(p, prefix=("a\0b",)), id="nul-word"),
        pytest.param(lambda p: _rewrite(p, hint=(("os; import x",), ("/",))), id="hint-name"),
        pytest.param(lambda p: _rewrite(p, hint=(("json",), ("relative",))), id="hint-root"),
        pytest.param(lambda p: _rewrite(p, hint=["json"]), id="hint-shape"),
    ],
)
def test_an_entry_that_cannot_be_trusted_is_not_used(project, env, damage):
    _profile(project, "KEEP")
    assert _run(project, "subprocess", env).returncode == 3
    [entry] = _entries(env)
    damage(entry)
    proc = _run(project, "subprocess", env)
    assert proc.returncode == 3, proc.stderr
    assert _trace(proc)[0] == "nothing remembered"
    assert json.loads(proc.stdout)["env"]["KEEP"] == "kept value"


def test_an_error_before_the_launch_ends_the_interpreter_ahead(project, env):
    profile = _profile(project, "KEEP")
    assert _run(project, "subprocess", env).returncode == 3
    profile.write_text(profile.read_text() + "no-such-section: 1\n")
    proc = _run(project, "subprocess", env)
    assert proc.returncode == 125
    assert "no-such-section" in proc.stderr
    started = _trace(proc)[0]
    assert started.startswith("started ahead (pid ")
    pid = int(started.rsplit(" ", 1)[1].rstrip(")"))
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped by pysb before it ended
    assert not _host_tmp_left(env)


def test_a_profile_value_is_not_taken_from_the_host(project, env):
    """A variable the profile sets to its own value cannot be named for the next run (the
    interpreter ahead gets the host's values): no entry, no interpreter ahead."""
    (project / "p.yaml").write_text(
        "version: 1\nlearn: false\nimports: [json, os, sys]\nenv:\n  KEEP: own value\n"
    )
    for _ in range(2):
        proc = _run(project, "subprocess", env)
        assert proc.returncode == 3, proc.stderr
        assert json.loads(proc.stdout)["env"]["KEEP"] == "own value"
        assert _trace(proc) == [
            "nothing remembered",
            "not for this launch: values set by the profile",
        ]


@pytest.mark.provider("landlock")
def test_a_file_on_stdout_gets_a_fresh_interpreter_under_landlock(project, env, tmp_path):
    """A file as stdout becomes a pipe under a provider that confines files
    (pysb_core.launch.stdio): the interpreter ahead, started with the file, cannot stand
    for that launch."""
    require_provider("landlock")
    _profile(project, "KEEP")
    out = tmp_path / "out.json"
    for _ in range(2):
        with out.open("w") as f:
            proc = subprocess.run(
                [*pysb_command(), "run", "--provider", "landlock", "--profile", "p.yaml",
                 "-c", PROGRAM],
                cwd=project, env={**BASE_ENV, **env}, stdin=subprocess.DEVNULL, stdout=f,
                stderr=subprocess.PIPE, text=True, timeout=120,
            )  # fmt: skip
        assert proc.returncode == 3, proc.stderr
        assert json.loads(out.read_text())["env"]["KEEP"] == "kept value"
        assert "used" not in _trace(proc)
        assert _trace(proc)[-1] == "not for this launch: other streams or process group"


def test_learning_runs_never_start_one(project, env):
    _profile(project, "KEEP")
    assert _run(project, "subprocess", env).returncode == 3
    proc = run_pysb(
        "run", f"--learn={project / 'learned.yaml'}", "--provider", "subprocess",
        "-c", "print(1)", cwd=project, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _trace(proc) == []


def test_a_payload_without_the_hinted_guards_gets_a_fresh_interpreter(project, env):
    """The hint (the guard modules, imported while the interpreter waits) is checked
    against the payload: a profile that turns the Python guards off makes the payload ask
    for none, and an interpreter that imported them never runs the program."""
    profile = _profile(project, "KEEP")
    assert _run(project, "subprocess", env).returncode == 3
    used = _run(project, "subprocess", env)
    assert _trace(used)[-1] == "used" and any(t.startswith("hinted") for t in _trace(used))
    profile.write_text(profile.read_text() + "python-guards: false\n")
    proc = _run(project, "subprocess", env)
    assert proc.returncode == 3, proc.stderr
    assert "discarded: other guards than the hint named" in _trace(proc)
    plain = _run(project, "subprocess", {**env, "PYSB_PRESTART": "0"})
    assert json.loads(proc.stdout)["modules"] == json.loads(plain.stdout)["modules"]
    assert not any(m.startswith("pysb_guards") for m in json.loads(proc.stdout)["modules"])


@pytest.mark.parametrize(
    "provider", ["subprocess", pytest.param("bwrap", marks=pytest.mark.provider("bwrap"))]
)
def test_a_signal_to_pysb_reaches_a_program_started_ahead(project, env, provider):
    """pysb forwards what it gets to the interpreter it took, as to one it forked (under
    bwrap: to the program, through the wrapper the launch adopted)."""
    import signal

    if provider != "subprocess":
        require_provider(provider)

    (project / "p.yaml").write_text("version: 1\nlearn: false\nimports: [os, signal, sys, time]\n")
    code = (
        "import os, signal, sys, time\n"
        "def bye(*_):\n"
        "    os.write(1, b'TERM\\n'); sys.exit(5)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    argv = [*pysb_command(), "run", "--provider", provider, "--profile", "p.yaml", "-c", code]
    for _ in range(2):
        proc = subprocess.Popen(
            argv, cwd=project, env={**BASE_ENV, **env}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            proc.send_signal(signal.SIGTERM)  # our own child, by its PID
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 5 and out == b"TERM\n", err
    assert b"prestart: used" in err


@pytest.mark.parametrize("opts", [["-v"], ["-X", "importtime"], ["-Ximporttime=2"]])
def test_an_interpreter_that_prints_while_it_starts_is_never_started_ahead(project, env, opts):
    """One started ahead and killed (the profile changed) would have printed its imports
    before the fresh one: such runs get only the fresh one, and leave no entry."""
    profile = _profile(project, "KEEP")
    for _ in range(2):
        proc = _run(project, "subprocess", env, *opts)
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert _trace(proc) == ["not for an interpreter that prints while it starts"]
    profile.write_text(profile.read_text().replace("KEEP", "DROP"))
    proc = _run(project, "subprocess", env, *opts)
    assert proc.returncode == 3 and "started ahead" not in proc.stderr
    assert not (Path(env["XDG_CACHE_HOME"]) / "pysb" / "prestart").exists()


def test_a_forwarded_pythonverbose_is_never_started_ahead(project, env):
    _profile(project, "PYTHONVERBOSE")
    for _ in range(2):
        proc = _run(project, "subprocess", {**env, "PYTHONVERBOSE": "1"})
        assert proc.returncode == 3, proc.stderr[-2000:]
    assert "not for PYTHONVERBOSE and kin" in _trace(proc)
    assert "started ahead" not in proc.stderr


@pytest.mark.provider("unshare")
def test_a_provider_with_its_own_tool_ends_the_interpreter_ahead_at_once(project, env):
    """An entry written under landlock, then the profile names unshare (which starts
    ``unshare`` and its own init): the interpreter ahead is ended when the provider is
    chosen, not left waiting while the program runs."""
    require_provider("landlock")
    require_provider("unshare")
    profile = _profile(project, "KEEP")
    text = profile.read_text()
    profile.write_text(text + "provider: landlock\n")
    proc = run_pysb("run", "--profile", "p.yaml", "-c", PROGRAM, cwd=project, env=env)
    assert proc.returncode == 3 and "remembered 1 names" in _trace(proc), proc.stderr
    profile.write_text(text + "provider: unshare\n")
    proc = run_pysb("run", "--profile", "p.yaml", "-c", PROGRAM, cwd=project, env=env)
    assert proc.returncode == 3, proc.stderr
    assert "discarded: provider unshare was not the last run's" in _trace(proc)
    assert json.loads(proc.stdout)["env"]["KEEP"] == "kept value"


def _bwrap_record(project: Path, env: dict[str, str]) -> Path:
    require_provider("bwrap")
    _profile(project, "KEEP")
    first = _run(project, "bwrap", env)
    assert first.returncode == 3, first.stderr
    [entry] = _entries(env)
    record = _record(entry)
    assert record["provider"] == "bwrap" and record["tmpdir"] == "/tmp"
    kinds = sorted({item[0] for item in record["prefix"] if isinstance(item, tuple)})
    assert "report" in kinds and "copy" in kinds  # bwrap's status pipe, its /etc copies
    return entry


def _marked_processes(mark: str) -> list[int]:
    """Processes whose environment holds ``mark`` (only this test's runs set it)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.provider("bwrap")
@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: (p[0], "--bind", "/", "/mnt", *p[1:]), id="a-bind-of-the-root"),
        pytest.param(lambda p: tuple(w for w in p if w != "--unshare-all"), id="no-namespaces"),
        pytest.param(
            lambda p: tuple(
                (i[0], b"\0" * 8) if isinstance(i, tuple) and i[0] == "bytes" else i for i in p
            ),
            id="another-seccomp-filter",
        ),
        pytest.param(
            lambda p: tuple(
                ("copy", "/etc/hostname") if isinstance(i, tuple) and i[0] == "copy" else i
                for i in p
            ),
            id="other-copies",
        ),
    ],
)
def test_a_wrapper_command_changed_by_hand_never_runs_the_program(project, env, change):
    """The entry of a wrapper (bwrap) holds its words: one changed by hand starts a wider
    sandbox ahead, which the launch compares word by word and descriptor by descriptor
    with its own and kills before it reads the payload; nothing of it is left."""
    entry = _bwrap_record(project, env)
    record = _record(entry)
    changed = change(record["prefix"])
    assert changed != record["prefix"]
    mark = f"PYSB_TEST_MARK_{os.getpid()}_{id(change)}"
    _rewrite(entry, prefix=changed, names=(*record["names"], "PYSB_TEST_MARK"))
    proc = _run(project, "bwrap", {**env, "PYSB_TEST_MARK": mark})
    plain = _run(project, "bwrap", {**env, "PYSB_PRESTART": "0"})
    assert [proc.returncode, plain.returncode] == [3, 3], proc.stderr
    trace = _trace(proc)
    assert trace[0].startswith("started ahead (pid "), trace
    assert any(
        t.startswith("discarded: another command line") or t.startswith("discarded: a copy of")
        for t in trace
    ), trace
    assert "used" not in trace
    assert json.loads(proc.stdout) == json.loads(plain.stdout)
    assert _marked_processes(mark) == []  # the sandbox ahead and all it started: gone
    assert _record(entry)["prefix"] == record["prefix"]  # remembered anew, as launched


@pytest.mark.provider("bwrap")
def test_a_wrapper_command_for_a_changed_profile_is_not_taken(project, env, tmp_path):
    """A directory the profile now exposes is a bind the remembered command lacks."""
    entry = _bwrap_record(project, env)
    assert _trace(_run(project, "bwrap", env))[-1] == "used"
    shared = tmp_path / "shared dir"
    shared.mkdir()
    (shared / "note.txt").write_text("seen")
    (project / "p.yaml").write_text(
        (project / "p.yaml").read_text() + f"files:\n  expose-ro: ['{shared}']\n"
    )
    code = f"print(open({str(shared / 'note.txt')!r}).read())"
    proc = run_pysb(
        "run", "--provider", "bwrap", "--profile", "p.yaml", "-c", code, cwd=project, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "seen\n"
    assert "discarded: another command line" in _trace(proc)
    assert any(isinstance(i, tuple) and i == ("dir", str(shared)) for i in _record(entry)["prefix"])


def test_the_last_runs_guards_are_hinted_at_the_start(project, env):
    """The record keeps the payload's guard modules and import roots: the command ahead is
    told them as it starts, before pysb has loaded its plugins."""
    _profile(project, "KEEP")
    assert _run(project, "subprocess", env).returncode == 3
    [entry] = _entries(env)
    guards, roots = _record(entry)["hint"]
    assert any(g.startswith("pysb_guards.") for g in guards) and roots
    proc = _run(project, "subprocess", env)
    assert proc.returncode == 3, proc.stderr
    trace = _trace(proc)
    assert trace[0].startswith("started ahead")
    assert trace[1] == f"hinted {len(guards)} guard modules"
    assert trace[-1] == "used"


def test_a_hint_from_a_root_pysb_does_not_import_from_is_not_sent(project, env, tmp_path):
    """A hand-written hint naming a directory of its own is not imported from: only roots on
    this pysb's own sys.path are hinted early; the hint then comes from the plugins, as
    without a record."""
    _profile(project, "KEEP")
    assert _run(project, "subprocess", env).returncode == 3
    [entry] = _entries(env)
    guards, roots = _record(entry)["hint"]
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "imported"
    (planted / "planted_guard.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    _rewrite(entry, hint=(("planted_guard", *guards), (str(planted), *roots)))
    proc = _run(project, "subprocess", env)
    assert proc.returncode == 3, proc.stderr
    assert not marker.exists()
    assert _trace(proc)[-1] == "used"  # hinted by the plugins instead, as before


def test_a_hint_of_other_modules_gets_a_fresh_interpreter(project, env):
    """A hint that names a module the payload does not (here one more from the standard
    library, which is on pysb's own path) is imported early, so the command ahead is not
    the one the launch would start: it is killed, and the program sees a fresh one."""
    _profile(project, "KEEP")
    assert _run(project, "subprocess", env).returncode == 3
    [entry] = _entries(env)
    guards, roots = _record(entry)["hint"]
    _rewrite(entry, hint=((*guards, "xml.dom.minidom"), roots))
    proc = _run(project, "subprocess", env)
    plain = _run(project, "subprocess", {**env, "PYSB_PRESTART": "0"})
    assert [proc.returncode, plain.returncode] == [3, 3], proc.stderr
    assert "discarded: other guards than the hint named" in _trace(proc)
    assert json.loads(proc.stdout)["modules"] == json.loads(plain.stdout)["modules"]
    assert "xml.dom.minidom" not in json.loads(proc.stdout)["modules"]
