"""``pysb import-profile``: pysandboxes 0.7.0 configurations converted to ``.pysb.yaml``.

Hand-written cases check each conversion and each refusal; the template shipped in the
pysandboxes 0.7.0 package is converted as it is, and, with rules added, run twice: the
same probe program under pysandboxes' own ``python-sb`` and under pysb with the converted
profile (subprocess, landlock and bwrap), which must take the same decisions.

The reference is installed from PyPI into ``benchmarks/.venv-ref`` (the venv ``make
bench`` uses) the first time; without it those tests are skipped, never passed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, require_provider, run_pysb

ROOT = Path(__file__).resolve().parents[1]
REF_VENV = ROOT / "benchmarks" / ".venv-ref"
REF_VERSION = "0.7.0"


def convert(tmp_path: Path, text: str, *extra: str, name: str = ".py-sandboxes"):
    (tmp_path / name).write_text(text)
    return run_pysb("import-profile", name, *extra, cwd=tmp_path)


# ---------------------------------------------------------------------------------------
# Hand-written cases
# ---------------------------------------------------------------------------------------

HAND_WRITTEN = """\
# a comment, then rules
include "more.py-sandboxes"
include "missing.py-sandboxes"
env=GREETING=hello  # trailing comment
env=HOME=${HOME}
env=*_API_KEY=${*_API_KEY}
unenv=SECRET_API_KEY
expose-ro=./data
expose-rw=./out
ignore=*.pem
ignore=./secrets
net=ALLOW|tcp|127.0.0.1|8000-8010|OUT
net=DENY|*|10.0.0.0/8|*|IN,OUT
net=ALLOW|udp|localhost||OUT
python-import=json,os.path,pysandboxes
python-api=ALLOW:threads,os.system
python-api=DENY:subprocess.run
eval-syntax=arith
os-sandbox=bwrap
bwrap.hostname=box
bwrap.share-net=yes
qemu.memory=1024
port=8123
learn=false
{template line, dropped as pysandboxes drops it}
"""


@pytest.fixture
def converted(tmp_path: Path) -> str:
    (tmp_path / "data").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "more.py-sandboxes").write_text("python-import=csv\n")
    r = convert(tmp_path, HAND_WRITTEN, "-o", "converted.yaml")
    assert r.returncode == 0, r.stderr
    assert "not carried over" in r.stderr
    return (tmp_path / "converted.yaml").read_text()


def test_every_rule_is_carried_over_with_its_line(converted: str) -> None:
    import yaml

    profile = yaml.safe_load(converted)
    assert profile["version"] == 1
    assert profile["provider"] == "bwrap" and profile["learn"] is False
    assert profile["env"] == {
        "TERM": "${TERM}",  # python-sb adds it to every run
        "GREETING": "hello",
        "HOME": "${HOME}",
        "*_API_KEY": "${*_API_KEY}",
    }
    assert profile["unenv"] == ["SECRET_API_KEY"]
    assert profile["files"] == {
        "expose-ro": ["./data"],
        "expose-rw": ["./out"],
        "ignore": ["*.pem"],
    }
    assert profile["network"] == [
        "allow tcp 127.0.0.1 8000-8010 out",
        "deny any 10.0.0.0/8 * any",
    ]
    assert sorted(profile["imports"]) == ["csv", "json"]
    assert profile["api"] == {"allow": ["threads", "os.system"], "deny": ["subprocess.run"]}
    assert profile["providers"] == {"bwrap": {"hostname": "box"}, "qemu": {"memory": "1024M"}}
    assert "  GREETING: hello  # .py-sandboxes:4" in converted
    assert "  - csv  # more.py-sandboxes:1" in converted


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (3, "missing.py-sandboxes does not exist here"),
        (11, "hides nothing there"),
        (14, "matches no port"),
        (15, "'os.path' is dotted"),
        (15, "'pysandboxes' itself"),
        (18, "no eval-* sub-language"),
        (21, "never shares the host network"),
        (23, "not a TCP port"),
    ],
)
def test_every_line_not_carried_over_is_a_comment(converted: str, line: int, reason: str) -> None:
    tail = converted.split("# Not carried over:\n", 1)[1]
    entries = ("\n" + tail).split("\n# .py-sandboxes:")
    assert any(e.split(":", 1)[0] == str(line) and reason in e for e in entries), tail


def test_converted_profile_is_valid_for_pysb(tmp_path: Path, converted: str) -> None:
    r = run_pysb("check", "--profile", "converted.yaml", "--provider", "subprocess", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("expose-ro=/tmp\nnet=ALLOW|tcp|x|443\n", ":2:", "5 fields"),
        ("frobnicate=1\n", ":1:", "Invalid rule 'frobnicate=1'"),
        ("\n\nexpose-ro\n", ":3:", "expected key=value"),
        ("python-api=MAYBE:os.system\n", ":1:", "ALLOW:... or DENY:..."),
        ("python-api=ALLOW:threads,DENY:native\n", ":1:", "one action per line"),
        ("env=A=${B:C}\n", ":1:", "invalid variable '${B:C}'"),
        ("os-sandbox=docker\n", ":1:", "unknown os-sandbox 'docker'"),
        ("os-sandbox=bwrap\nos-sandbox=bwrap\n", ":2:", "Multiple os-sandbox parameters"),
        ("net=allow|tcp|*|443|OUT\n", ":1:", "ALLOW or DENY"),
        ("net=ALLOW|tcp|*|99999|OUT\n", ":1:", "out of range"),
        ("include more.py-sandboxes\n", ":1:", "double-quoted"),
        ("learn=true\n", ":1:", "a file name or false"),
        ("expose-ro=./a,./b\n", ":1:", "one path per line"),
        ("py-sandbox=yes\n", ":1:", "py-sandbox is true or false"),
    ],
)
def test_a_file_pysandboxes_refuses_is_exit_125_with_file_and_line(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    r = convert(tmp_path, text, "-o", "out.yaml")
    assert r.returncode == 125, r.stdout + r.stderr
    assert f".py-sandboxes{where} " in r.stderr and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out.yaml").exists()


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    r = convert(tmp_path, "frobnicate=1\nnet=ALLOW|tcp\nos-sandbox=docker\n")
    assert r.returncode == 125
    assert [line.split(": ", 1)[0] for line in r.stderr.splitlines()[:3]] == [
        ".py-sandboxes:1",
        ".py-sandboxes:2",
        ".py-sandboxes:3",
    ]


def test_errors_in_an_included_file_name_that_file(tmp_path: Path) -> None:
    (tmp_path / "inc.py-sandboxes").write_text("\nbogus=1\n")
    r = convert(tmp_path, 'include "inc.py-sandboxes"\n')
    assert r.returncode == 125 and "inc.py-sandboxes:2: Invalid rule 'bogus=1'" in r.stderr


def test_output_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "keep.yaml").write_text("precious\n")
    r = convert(tmp_path, "python-import=json\n", "-o", "keep.yaml")
    assert r.returncode == 125 and "exists" in r.stderr
    assert (tmp_path / "keep.yaml").read_text() == "precious\n"


def test_missing_input_is_a_clear_error(tmp_path: Path) -> None:
    r = run_pysb("import-profile", "nope", cwd=tmp_path)
    assert r.returncode == 125 and "pysb: error: nope: no such file" in r.stderr


def test_without_output_the_profile_goes_to_stdout(tmp_path: Path) -> None:
    r = convert(tmp_path, "python-import=*\npy-sandbox=false\n")
    assert r.returncode == 0, r.stderr
    assert 'imports: "*"  # .py-sandboxes:1' in r.stdout
    assert "python-guards: false  # .py-sandboxes:2" in r.stdout


def test_unknown_api_target_is_not_carried_over(tmp_path: Path) -> None:
    r = convert(tmp_path, "python-api=ALLOW:os.nosuchthing,threads\n")
    assert r.returncode == 0, r.stderr
    assert "- threads  # .py-sandboxes:1" in r.stdout
    body, tail = r.stdout.split("# Not carried over:")
    assert "os.nosuchthing" not in body and "'os.nosuchthing': unknown target" in tail


# ---------------------------------------------------------------------------------------
# The reference's own template, and the same decisions as the reference
# ---------------------------------------------------------------------------------------


def _reference_python() -> Path:
    python = REF_VENV / "bin" / "python"
    probe = [str(python), "-c", "import importlib.metadata as m; print(m.version('pysandboxes'))"]

    def installed() -> bool:
        if not python.exists():
            return False
        r = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        return r.stdout.strip() == REF_VERSION

    if not installed():
        base = Path(sys.base_prefix) / "bin" / "python3"
        subprocess.run([str(base), "-m", "venv", "--clear", str(REF_VENV)], check=True, timeout=120)
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"pysandboxes=={REF_VERSION}"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if pip.returncode != 0 or not installed():
            pytest.skip(f"cannot install pysandboxes {REF_VERSION}: {pip.stderr[-400:]}")
    return python


@pytest.fixture(scope="module")
def reference() -> tuple[Path, Path]:
    """``(python-sb, template)`` of the installed reference."""
    python = _reference_python()
    where = subprocess.run(
        [str(python), "-c", "import os, pysandboxes; print(os.path.dirname(pysandboxes.__file__))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    template = Path(where) / "templates" / "py-sandboxes.template"
    assert template.is_file()
    return python.with_name("python-sb"), template


def _meaningful_lines(text: str) -> list[int]:
    from pysb_core.cli.pysandboxes_format import strip_comment

    return [
        n
        for n, line in enumerate(text.splitlines(), 1)
        if strip_comment(line.strip()).strip() and not line.strip().startswith("{")
    ]


def test_the_reference_template_converts_and_is_valid(
    tmp_path: Path, reference: tuple[Path, Path]
) -> None:
    _, template = reference
    text = template.read_text()
    r = convert(tmp_path, text, "-o", ".pysb.yaml")
    assert r.returncode == 0, r.stderr
    out = (tmp_path / ".pysb.yaml").read_text()
    # every meaningful line is accounted for: a rule or a comment naming it
    for number in _meaningful_lines(text):
        assert f".py-sandboxes:{number}" in out, f"template line {number} vanished"
    check = run_pysb(
        "check", "--provider", "subprocess", cwd=tmp_path, env={"OS_SANDBOX": "subprocess"}
    )
    assert check.returncode == 0, check.stdout + check.stderr


PROBE = """\
import json, os, socket, sys
base, open_port, closed_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
result = {}
def attempt(name, fn):
    try:
        fn()
        result[name] = "allowed"
    except OSError:  # every refusal is one (PermissionError, FileNotFoundError, ...)
        result[name] = "denied"
    except ImportError:
        result[name] = "denied"
def connect(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
attempt("read data", lambda: open(os.path.join(base, "data", "in.txt")).read())
attempt("read secret", lambda: open(os.path.join(base, "secret", "key.txt")).read())
attempt("read ignored", lambda: open(os.path.join(base, "data", "cert.pem")).read())
attempt("write out", lambda: open(os.path.join(base, "out", "new.txt"), "w").write("x"))
attempt("write data", lambda: open(os.path.join(base, "data", "new.txt"), "w").write("x"))
attempt("import csv", lambda: __import__("csv"))
attempt("import sqlite3", lambda: __import__("sqlite3"))
attempt("os.system", lambda: os.system("true"))
attempt("connect allowed port", lambda: connect(open_port))
attempt("connect other port", lambda: connect(closed_port))
result["env GREETING"] = os.environ.get("GREETING")
result["env OTHER"] = os.environ.get("OTHER")
result["env SECRET_API_KEY"] = os.environ.get("SECRET_API_KEY")
print("RESULT " + json.dumps(result, sort_keys=True))
"""

RULES = """
env=GREETING=${GREETING}
env=*_API_KEY=${*_API_KEY}
unenv=SECRET_API_KEY
expose-ro=${PROJECT}/data
expose-rw=${PROJECT}/out
ignore=*.pem
net=ALLOW|tcp|127.0.0.1|${OPEN_PORT}|OUT
python-import=json,os,socket,csv
"""


@pytest.fixture
def listeners() -> Iterator[tuple[int, int]]:
    """Two loopback listeners: one the profile allows, one it does not."""
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        socks.append(s)
    try:
        yield socks[0].getsockname()[1], socks[1].getsockname()[1]
    finally:
        for s in socks:
            s.close()


def _result(stdout: str) -> dict[str, object]:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, stdout
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["subprocess", "landlock", "bwrap"])
def test_converted_template_decides_as_the_reference(
    tmp_path: Path, reference: tuple[Path, Path], listeners: tuple[int, int], provider: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    python_sb, template = reference
    project = tmp_path / "my project"  # a path with a space
    for d in ("data", "out", "secret"):
        (project / d).mkdir(parents=True)
    (project / "data" / "in.txt").write_text("in")
    (project / "data" / "cert.pem").write_text("pem")
    (project / "secret" / "key.txt").write_text("key")
    (project / "data" / "probe.py").write_text(PROBE)
    (project / ".py-sandboxes").write_text(template.read_text() + RULES)
    open_port, closed_port = listeners
    env = {
        **BASE_ENV,
        "PROJECT": str(project),
        "OPEN_PORT": str(open_port),
        "GREETING": "hello",
        "OTHER": "not granted",
        "SECRET_API_KEY": "never forwarded",
        "OS_SANDBOX": "subprocess",
    }
    argv = [str(project / "data" / "probe.py"), str(project), str(open_port), str(closed_port)]
    ref = subprocess.run(
        [str(python_sb), *argv], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )
    assert ref.returncode == 0, ref.stderr
    expected = _result(ref.stdout)
    # the reference itself took the decisions this test is about
    assert expected["read data"] == "allowed" and expected["read secret"] == "denied"
    assert expected["connect allowed port"] == "allowed"
    assert expected["connect other port"] == "denied"

    r = run_pysb("import-profile", ".py-sandboxes", "-o", ".pysb.yaml", cwd=project)
    assert r.returncode == 0, r.stderr
    run = ["run", "--profile", ".pysb.yaml", "--provider", provider]  # named: found needs trust
    ours = run_pysb(*[*run, *argv], cwd=project, env={
        k: v for k, v in env.items() if k != "OS_SANDBOX"
    })  # fmt: skip
    assert ours.returncode == 0, ours.stderr
    got = _result(ours.stdout)
    if provider == "bwrap":
        # bwrap's network namespace has its own loopback: a host listener is not there,
        # so both connects fail (denied or refused) -- compare everything else.
        for key in ("connect allowed port", "connect other port"):
            expected.pop(key)
            got.pop(key)
    assert got == expected
    assert not os.path.exists(project / "out" / "new.txt") or expected["write out"] == "allowed"


def test_quiet_and_verbose(tmp_path: Path) -> None:
    (tmp_path / ".py-sandboxes").write_text("python-import=json\nport=1\n")
    quiet = run_pysb("import-profile", "-q", ".py-sandboxes", "-o", "a.yaml", cwd=tmp_path)
    assert (quiet.returncode, quiet.stderr) == (0, "")
    verbose = run_pysb("import-profile", "-v", ".py-sandboxes", "-o", "b.yaml", cwd=tmp_path)
    assert ".py-sandboxes:2: not carried over: port=1" in verbose.stderr
