"""End to end through the real CLI: ``pysb run --provider landlock --no-python-guards``.

Only the OS layer is active here, so every refusal below comes from the kernel. Needs the
provider installed (``make dev``): entry points are how pysb finds it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from landlock_helpers import needs_abi

from pysb_core.testing import pysb_command, require_provider

PYSB = pysb_command()
pytestmark = pytest.mark.provider("landlock")


@pytest.fixture(autouse=True)
def _landlock_available():
    require_provider("landlock")  # a skip here, a failure under PYSB_REQUIRE_PROVIDERS


@pytest.fixture
def box(tmp_path):
    """A secret outside the exposures, a read-write dir, and a profile (outside both)."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key.pem").write_text("TOP-SECRET\n")
    (tmp_path / "rw").mkdir()
    return tmp_path


def pysb(box, *args, profile: str, **kw) -> subprocess.CompletedProcess[str]:
    path = box / "profile.yaml"
    path.write_text(profile)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSB_")}
    return subprocess.run(
        [
            *PYSB,
            "run",
            "--profile",
            str(path),
            "--provider",
            "landlock",
            "--no-python-guards",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=box,
        env=env,
        timeout=60,
        **kw,
    )


def files_profile(box, extra: str = "", files_extra: str = "") -> str:
    return (
        "version: 1\n"
        "imports: ['*']\n"
        "files:\n"
        "  expose-ro: [/usr/bin]\n"
        f"  expose-rw: [{box / 'rw'}]\n" + files_extra + extra
    )


def test_c_reader_cannot_read_secret(box):
    code = (
        "import subprocess, sys\n"
        "r = subprocess.run(['/bin/cat', sys.argv[1]], capture_output=True, text=True)\n"
        "print(r.returncode, r.stdout.strip(), r.stderr.strip())\n"
    )
    r = pysb(box, "-c", code, str(box / "secret" / "key.pem"), profile=files_profile(box))
    assert r.returncode == 0, r.stderr
    assert "TOP-SECRET" not in r.stdout
    assert r.stdout.startswith("1 ") and "Permission denied" in r.stdout


def test_writes_inside_rw_only(box):
    code = (
        "import sys\n"
        "open(sys.argv[1], 'w').write('ok')\n"
        "try:\n"
        "    open(sys.argv[2], 'w')\n"
        "except OSError as e:\n"
        "    print('denied', e.errno)\n"
    )
    inside, outside = box / "rw" / "out.txt", box / "secret" / "new.txt"
    r = pysb(box, "-c", code, str(inside), str(outside), profile=files_profile(box))
    # As root every mount outside the writable exposures is read-only (pysb_landlock.rofs).
    denied = errno.EROFS if os.geteuid() == 0 else errno.EACCES
    assert r.stdout.strip() == f"denied {denied}", r.stderr
    assert inside.read_text() == "ok"
    assert not outside.exists()


@needs_abi[4]
def test_tcp_port_rule(box):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    code = (
        "import socket, sys\n"
        "for p in sys.argv[1:]:\n"
        "    s = socket.socket()\n"
        "    try:\n"
        "        s.connect(('127.0.0.1', int(p)))\n"
        "        print('connected')\n"
        "    except OSError as e:\n"
        "        print('error', e.errno)\n"
    )
    other = port + 1 if port < 65535 else port - 1
    try:
        r = pysb(
            box,
            "-c",
            code,
            str(port),
            str(other),
            profile=files_profile(box, f"network:\n  - allow tcp * {port} out\n"),
        )
        assert r.stdout.split("\n")[:2] == ["connected", f"error {errno.EACCES}"], r.stderr
    finally:
        srv.close()


@pytest.mark.parametrize(
    "extra",
    [
        "network:\n  - allow tcp 127.0.0.1 8000 out\n",  # landlock cannot filter hosts
        "network:\n  - allow udp * 53 out\n",  # nor UDP
    ],
)
def test_rules_landlock_cannot_enforce_refuse_to_start(box, extra):
    r = pysb(box, "-c", "print('USER CODE RAN')", profile=files_profile(box, extra))
    assert r.returncode == 125
    assert "USER CODE RAN" not in r.stdout
    assert "' is not enforced by any active layer" in r.stderr


def test_ignore_is_python_layer_only(box):
    profile = files_profile(box, files_extra="  ignore: ['*.pem']\n")
    r = pysb(box, "-c", "print('USER CODE RAN')", profile=profile)
    assert r.returncode == 125, r.stderr
    assert "USER CODE RAN" not in r.stdout
    assert "ignore: *.pem' is not enforced by any active layer" in r.stderr


def test_profile_inside_expose_rw_refused_without_python_layer(box):
    # Landlock cannot keep one file of a writable tree read-only: fail closed.
    profile = box / "rw" / ".pysb.yaml"
    profile.write_text(f"version: 1\nfiles:\n  expose-rw: [{box / 'rw'}]\n")
    code = f"open({str(profile)!r}, 'a').write('# changed from inside')"
    argv = [*PYSB, "run", "--profile", str(profile), "--provider", "landlock"]
    r = subprocess.run(
        [*argv, "--no-python-guards", "-c", code],
        capture_output=True,
        text=True,
        cwd=box / "rw",
        env={k: v for k, v in os.environ.items() if not k.startswith("PYSB_")},
        timeout=60,
    )
    assert r.returncode == 125
    assert "stays read-only" in r.stderr
    assert "changed from inside" not in profile.read_text()


@needs_abi[6]
def test_signal_to_outside_process_refused(box):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        code = (
            "import os, signal, sys\n"
            "try:\n"
            "    os.kill(int(sys.argv[1]), signal.SIGTERM)\n"
            "    print('sent')\n"
            "except PermissionError as e:\n"
            "    print('refused', e.errno)\n"
        )
        r = pysb(box, "-c", code, str(victim.pid), profile=files_profile(box))
        assert r.stdout.strip() == f"refused {errno.EPERM}", r.stderr
        assert victim.poll() is None
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


def test_check_reports_layers(box):
    path = box / "profile.yaml"
    # A host name rule (localhost: pinned from /etc/hosts, no DNS query leaves the machine).
    path.write_text(files_profile(box, "network:\n  - allow tcp localhost 443 out\n"))
    r = subprocess.run(
        [*PYSB, "check", "--profile", str(path), "--provider", "landlock", "--json"],
        capture_output=True,
        text=True,
        cwd=box,
    )
    report = json.loads(r.stdout)
    layers = {rule["rule"]: rule["layers"] for rule in report["rules"]}
    assert "os" in layers[f"files: expose-rw: {box / 'rw'}"]
    assert "os" not in layers["network: allow tcp localhost 443 out"]


def test_with_python_guards_on(box):
    # Both layers: the guard refuses the Python-level open, the kernel the C-level reader.
    try:
        import pysb_guards  # noqa: F401
    except ImportError:
        pytest.skip("pysb-guards is not installed")
    code = (
        "import subprocess, sys\n"
        "r = subprocess.run(['/bin/cat', sys.argv[1]], capture_output=True, text=True)\n"
        "print(r.returncode, 'TOP-SECRET' in r.stdout)\n"
        "try:\n"
        "    open(sys.argv[1])\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
    )
    profile = (
        "version: 1\n"
        "imports: ['*']\n"
        "api:\n  allow: [process-exec, subprocess.run]\n"
        f"files:\n  expose-ro: [/usr/bin]\n  expose-rw: [{box / 'rw'}]\n"
    )
    path = box / "profile.yaml"
    path.write_text(profile)
    r = subprocess.run(
        [*PYSB, "run", "--profile", str(path), "--provider", "landlock", "-c", code,
         str(box / "secret" / "key.pem")],
        capture_output=True,
        text=True,
        cwd=box,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYSB_")},
        timeout=60,
    )  # fmt: skip
    assert r.stdout.splitlines() == ["1 False", "FileDeniedError"], r.stderr


@pytest.mark.parametrize("guards", [True, False], ids=["guards", "no-python-guards"])
def test_the_sandboxed_start_imports_no_ctypes(tmp_path, guards):
    """Start-up cost (docs/performance.md): the restriction's system calls go through the
    kit's C calls, the kernel's structures are bytes -- neither the ``ctypes`` package nor
    ``collections`` is imported in the sandbox for ``pass``; the restriction still holds."""
    (tmp_path / "secret").write_text("x")
    profile = tmp_path / "p.pysb.yaml"
    profile.write_text(f"version: 1\nimports: [os]\nfiles:\n  expose-ro: [{tmp_path / 'in'}]\n")
    (tmp_path / "in").mkdir()
    secret = str(tmp_path / "secret")
    code = f"import os\ntry:\n    open({secret!r})\nexcept OSError:\n    os.write(1, b'refused')\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSB_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = [*PYSB, "run", "--profile", str(profile), "--provider", "landlock"]
    if not guards:
        argv.append("--no-python-guards")
    proc = subprocess.run(
        [*argv, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path / "in",
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "refused"
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert {"pysb_landlock.ruleset", "pysb_landlock.caps"} <= loaded
    assert not loaded & {"ctypes", "collections", "collections.abc"}, loaded
