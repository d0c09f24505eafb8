"""Test helpers for pysb and for plugin authors: a pytest plugin.

Install with ``pip install 'pysb-core[testing]'`` (it needs pytest, which pysb itself does
not) and opt in with ``pytest_plugins = ["pysb_core.testing"]``. Partial-mode helpers
(modules written on the fly, worker PIDs) are in :mod:`pysb_core.testing.partial`.

For a provider's tests: :func:`make_launch_plan` (the ``launch_plan`` fixture) builds a
launch plan by hand, exactly what the provider's ``prepare``/``launch`` receive, and
:func:`run_plan` (the ``sandbox_runner`` fixture) launches it under a provider instance
and returns the output; :func:`require_provider` skips a test where the provider cannot
run. For end-to-end runs of ``pysb`` (a guard's tests): the ``project`` fixture and
:func:`run_pysb`.

Tests that claim enforcement run real programs under real providers. A provider that is
not available here is a skip -- unless its name is in ``PYSB_REQUIRE_PROVIDERS`` (CI sets
it), where it is a failure, so a run cannot silently skip the OS layer.

Why one module: it is the pytest plugin a third party enables with one ``pytest_plugins`` line;
its fixtures, the helpers behind them and the hooks that turn a required provider's skip into a
failure must be registered together, in the one module pytest loads. The parts with a job of
their own are already apart: :mod:`.partial`, :mod:`.netfilter` and :mod:`.interpreters`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

try:
    import pytest
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "pysb_core.testing is pysb's pytest plugin and needs pytest: "
        "pip install 'pysb-core[testing]'"
    ) from exc

from pysb_core.testing.interpreters import _pysb_venvs, pysb_python  # noqa: F401 - fixtures

if TYPE_CHECKING:
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Exposure, NetworkRule
    from pysb_core.provider import Provider

#: Where the tests' pysb keeps the records of trusted profiles (``pysb trust``): a store
#: of this test session's own, never the user's. The test process uses it too (set in
#: :func:`pytest_configure`), so that in-process ``sandboxes()`` agrees with ``pysb run``.
#: Not below /tmp: the sandboxes' /tmp is their own, and a state directory under the
#: host's /tmp would make the guards treat /tmp as holding a protected path.
STATE_HOME = tempfile.mkdtemp(
    prefix="pysb-test-state-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None
)
atexit.register(shutil.rmtree, STATE_HOME, True)

#: Environment a test's pysb starts with: enough to run, nothing secret.
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": os.environ.get("HOME", "/root"),
    "XDG_STATE_HOME": STATE_HOME,
}


def pytest_configure(config: pytest.Config) -> None:
    os.environ["XDG_STATE_HOME"] = STATE_HOME


def trust_profile(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> None:
    """Trust the profile at ``path`` as ``pysb trust`` would, in the store the tests' pysb
    uses: a profile the test wrote stands for one a person wrote and trusted. A discovered
    profile that is not trusted is refused (exit 125; :mod:`pysb_core.profile.trust`)."""
    from pysb_core.profile.trust import trust_profile as trust

    path = os.fspath(path)
    trust(path, cwd=os.path.dirname(os.path.abspath(path)), environ={**BASE_ENV, **(env or {})})


def pysb_command() -> list[str]:
    """The ``pysb`` console script of the interpreter running the tests."""
    script = Path(sys.executable).with_name("pysb")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "pysb_core"]


def run_pysb(
    *args: str,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    timeout: float = 120,
    python: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``pysb ARGS`` as a real process (``python -P -m pysb_core ARGS`` when ``python`` is
    given: the ``pysb_python`` fixture; ``-P``: as the console script, pysb itself is not
    taken from the working directory); text output, never raises on a status."""
    full_env = {**BASE_ENV, **(env or {})}
    command = [python, "-P", "-m", "pysb_core"] if python else pysb_command()
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env=full_env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


#: Every provider pysb ships, for ``pytest.mark.parametrize("provider", EVERY_PROVIDER)``:
#: qemu marked ``slow`` (a guest start costs seconds without KVM; the fast tier leaves it
#: out). Call :func:`require_provider` in the test for the OS ones.
EVERY_PROVIDER = [
    "subprocess",
    "landlock",
    "bwrap",
    "unshare",
    "firejail",
    pytest.param("qemu", marks=pytest.mark.slow),
]


def required_providers() -> set[str]:
    return {p.strip() for p in os.environ.get("PYSB_REQUIRE_PROVIDERS", "").split(",") if p.strip()}


def require_provider(name: str) -> None:
    """Skip (or fail, when required) unless provider ``name`` can run here."""
    from pysb_core.errors import ProviderUnavailableError
    from pysb_core.launch.drivers import load_provider_class

    note_provider(name)
    try:
        status = load_provider_class(name)({}).probe()
        reason = status.reason
        ok = status.available
    except ProviderUnavailableError as exc:
        ok, reason = False, str(exc)
    if ok:
        return
    message = f"provider {name} unavailable: {reason}"
    if name in required_providers():
        pytest.fail(message + " (required by PYSB_REQUIRE_PROVIDERS)")
    pytest.skip(message)


def wheelhouse() -> Path:
    """Where ``make dev`` keeps wheels of pysb's dependencies, for offline installs."""
    return Path(sys.prefix) / "wheelhouse"


def offline_venv(env_dir: Path, *requirements: str) -> Path:
    """A fresh virtual environment with only ``requirements`` (paths or names) installed,
    offline, from the wheelhouse: what a user's ``pip install`` gives, with no editable
    path and no plugin that happens to sit in the repository. Skips without a wheelhouse."""
    import venv

    if not wheelhouse().is_dir():
        pytest.skip("no wheelhouse: run `make dev` (it builds one for offline installs)")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    offline_pip(env_dir, *requirements)
    return env_dir


def offline_pip(env_dir: Path, *requirements: str) -> None:
    """``pip install`` into ``env_dir``, offline, from the wheelhouse; fails the test on error."""
    python = str(env_dir / "bin" / "python")
    cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse())]
    r = subprocess.run([*cmd, *requirements], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


@dataclass
class Project:
    """A temporary project directory with a profile, for end-to-end runs."""

    root: Path
    #: The profiles written with ``trust=True`` (re-trusted before each run).
    trusted: set[Path] = field(default_factory=set)

    def profile(self, text: str, name: str = ".pysb.yaml", *, trust: bool = True) -> Path:
        """Write a profile; trusted (:func:`trust_profile`) unless ``trust=False``: the
        project's own profile stands for one its author reviewed and trusted."""
        path = self.root / name
        path.write_text(text)
        if trust:
            trust_profile(path)
            self.trusted.add(path)
        return path

    def file(self, rel: str, text: str = "") -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def run(self, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        """``pysb ARGS`` in the project; the profiles it wrote trusted are trusted again
        first, as they are now (a file written later may be one of their includes)."""
        for path in self.trusted:
            if path.is_file():
                trust_profile(path, kwargs.get("env"))  # type: ignore[arg-type]
        return run_pysb(*args, cwd=self.root, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    return Project(root)


class LoopbackServer:
    """A TCP server on 127.0.0.1 that answers each connection with ``ok\\n``.

    Bounded: it serves until closed, and the tests close it. Never anything but loopback.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            with conn:
                try:
                    conn.sendall(b"ok\n")
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def loopback_server() -> Iterator[LoopbackServer]:
    server = LoopbackServer()
    try:
        yield server
    finally:
        server.close()


def profile_lines(*lines: str | Sequence[str]) -> str:
    """Join profile lines (a small convenience for readable tests)."""
    out: list[str] = []
    for line in lines:
        out.extend([line] if isinstance(line, str) else list(line))
    return "\n".join(out) + "\n"


# -- launch plans built by hand, run under a provider (a provider's own tests) -----------


def interpreter_exposures(python: str = sys.executable) -> list[Exposure]:
    """The interpreter's installation, read-only: what a hand-built plan needs to start
    ``python`` inside a sandbox with its own file-system view (the pipeline adds it, and
    more, implicitly)."""
    from pysb_core.policy import Exposure

    real = os.path.realpath(python)
    prefix = os.path.dirname(os.path.dirname(real))
    return [Exposure(path=prefix, target=prefix, writable=False, implicit=True)]


def make_launch_plan(
    argv: Sequence[str],
    *,
    provider: str = "subprocess",
    cwd: str | os.PathLike[str] = "/",
    exposures: Sequence[Exposure] = (),
    env: Mapping[str, str] | None = None,
    network: Sequence[NetworkRule] = (),
    options: Mapping[str, object] | None = None,
    python: str = sys.executable,
) -> LaunchPlan:
    """A launch plan for ``argv`` (run as it is inside the sandbox: no bootstrap, no
    guards), with the interpreter's installation and ``exposures`` exposed, ``env`` as the
    whole environment and ``options`` as the provider's ``providers: {NAME: ...}``."""
    from pysb_core.plan import LaunchPlan
    from pysb_core.policy import Policy

    exps = [*interpreter_exposures(python), *exposures]
    environment = dict(env if env is not None else {"PATH": BASE_ENV["PATH"]})
    policy = Policy(
        exposures=tuple(exps),
        network=tuple(network),
        env=dict(environment),
        provider=provider,
        provider_options={provider: dict(options)} if options is not None else {},
        cwd=os.fspath(cwd),
    )
    return LaunchPlan(
        policy=policy,
        python=python,
        argv=list(argv),
        env=environment,
        cwd=os.fspath(cwd),
        exposures=exps,
    )


def run_plan(
    provider: Provider, plan: LaunchPlan, *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Launch ``plan`` under ``provider`` (its real ``launch``), wait, run the plan's
    cleanups; the output as text, never raises on a status (a timeout kills the sandbox)."""
    note_provider(provider.name)
    proc = provider.launch(plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for cleanup in plan.cleanups:
            cleanup()
    return subprocess.CompletedProcess(
        plan.argv, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
    )


@pytest.fixture
def launch_plan() -> Callable[..., LaunchPlan]:
    """:func:`make_launch_plan`, as a fixture."""
    return make_launch_plan


@pytest.fixture
def sandbox_runner() -> Callable[..., subprocess.CompletedProcess[str]]:
    """:func:`run_plan`, as a fixture."""
    return run_plan


# -- which OS-provider tests ran (printed at the end of every run; CI reads it) ---------

_current_test: list[str] = [""]
_provider_tests: dict[str, dict[str, set[str]]] = {}


def note_provider(name: str) -> None:
    """Count the running test as one that needed provider ``name`` (the summary at the
    end of the run says how many of those passed, failed or were skipped)."""
    entry = _provider_tests.setdefault(name, {"tests": set()})
    entry["tests"].add(_current_test[0])


_note_provider = note_provider  # the former private name


def pytest_runtest_setup(item: pytest.Item) -> None:
    _current_test[0] = item.nodeid


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for entry in _provider_tests.values():
        if report.nodeid in entry["tests"] and report.when in ("setup", "call"):
            outcome = "skipped" if report.skipped else "failed" if report.failed else "passed"
            if report.when == "call" or report.skipped or report.failed:
                entry.setdefault(outcome, set()).add(report.nodeid)


def _all_skipped() -> list[str]:
    """The providers ``PYSB_REQUIRE_PROVIDERS`` names whose every test was skipped (a
    skip condition of the test's own, not "unavailable", which already fails): a run
    that exercised none of a required provider must not pass."""
    return sorted(
        name
        for name, entry in _provider_tests.items()
        if name in required_providers()
        and entry.get("skipped")
        and not entry.get("passed")
        and not entry.get("failed")
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _all_skipped() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: object) -> None:
    write = terminalreporter.write_line  # type: ignore[attr-defined]
    write("")
    write("OS provider tests (tests that needed a real provider):")
    if not _provider_tests:
        write("  none ran")
    for name in sorted(_provider_tests):
        entry = _provider_tests[name]
        write(
            f"  {name:<10} passed {len(entry.get('passed', ()))}, "
            f"failed {len(entry.get('failed', ()))}, skipped {len(entry.get('skipped', ()))}"
        )
    for name in _all_skipped():
        write(
            f"  FAILED: every test of {name} was skipped, and PYSB_REQUIRE_PROVIDERS "
            "requires it (the reasons are in the short summary above)"
        )
