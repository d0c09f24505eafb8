"""Launch mechanics of the provider base: the pre-exec steps, run in order between fork
and exec, and the one pids cgroup of a root pysb with ``limits: processes``
(pysb_core.provider, pysb_core.linux.pidlimit). Real processes under the subprocess provider."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pysb_core.builtin.subprocess_provider import SubprocessProvider
from pysb_core.errors import SandboxError
from pysb_core.linux import pidlimit
from pysb_core.plan import LaunchPlan, PreExecStep
from pysb_core.policy import Limits
from pysb_core.provider import set_pre_exec
from pysb_core.testing import make_launch_plan, run_plan

ROOT_WITH_PIDS = os.geteuid() == 0 and pidlimit.find_controller() is not None


def _appender(path: Path, text: str) -> PreExecStep:
    def run() -> None:  # between fork and exec: system calls only
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, text.encode())
        os.close(fd)

    return PreExecStep(text, run)


def _plan(code: str, **limits: int) -> LaunchPlan:
    plan = make_launch_plan([sys.executable, "-c", code])
    plan.policy = plan.policy.replace(limits=Limits(**limits))
    return plan


def test_steps_run_in_order_then_the_callers_preexec_fn(tmp_path: Path) -> None:
    log = tmp_path / "log"
    plan = _plan(f"print(open({str(log)!r}).read())")
    for step in (_appender(log, "a"), _appender(log, "b")):
        plan.add_pre_exec(step.what, step.run)
    caller = _appender(log, "c").run
    proc = SubprocessProvider().launch(plan, stdout=subprocess.PIPE, preexec_fn=caller)
    out, _ = proc.communicate(timeout=30)
    assert out.decode().strip() == "abc"  # the program sees every step done, in order


def test_a_failing_step_stops_the_launch_naming_the_steps(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plan = _plan(f"open({str(marker)!r}, 'w')")

    def fails() -> None:
        raise OSError("no such namespace")

    plan.add_pre_exec("entering the namespace", fails)
    with pytest.raises(SandboxError, match=r"the set-up before subprocess starts failed "
                       r"\(entering the namespace\)"):  # fmt: skip
        SubprocessProvider().launch(plan)
    assert not marker.exists()  # nothing ran


def test_set_pre_exec_leaves_popen_alone_without_steps() -> None:
    kwargs: dict[str, object] = {"stdout": None}
    assert set_pre_exec(kwargs, _plan("pass")) == []
    assert kwargs == {"stdout": None}


def test_no_cgroup_without_a_process_limit() -> None:
    plan = _plan("pass")
    assert SubprocessProvider().pids_cgroup(plan) is None
    assert plan.cleanups == []


@pytest.mark.skipif(os.geteuid() == 0, reason="as root RLIMIT_NPROC does not apply")
def test_no_cgroup_for_an_ordinary_user() -> None:
    assert SubprocessProvider().pids_cgroup(_plan("pass", processes=5)) is None
    assert pidlimit.problem(5) is None


@pytest.mark.skipif(not ROOT_WITH_PIDS, reason="needs root and a writable pids controller")
def test_a_root_pysb_runs_the_program_in_a_pids_cgroup_sized_with_the_providers_own() -> None:
    class TwoOwn(SubprocessProvider):
        own_processes = 2

    code = (
        "import os\n"
        "line = [l for l in open('/proc/self/cgroup') if ':pids:' in l or l.startswith('0::')]\n"
        "path = line[0].strip().split(':', 2)[2]\n"
        "print(path)\n"
    )
    plan = _plan(code, processes=5)
    res = run_plan(TwoOwn(), plan)
    assert res.returncode == 0, res.stderr
    cgroup = res.stdout.strip()
    assert os.path.basename(cgroup).startswith(f"pysb-{os.getpid()}-"), cgroup
    parent = pidlimit.find_controller()
    assert parent is not None
    assert not os.path.exists(os.path.join(parent, os.path.basename(cgroup)))  # removed


@pytest.mark.skipif(not ROOT_WITH_PIDS, reason="needs root and a writable pids controller")
def test_the_cgroup_counts_the_sandboxs_processes() -> None:
    code = (
        "import os, time\n"
        "kids = []\n"
        "try:\n"
        "    for _ in range(20):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        kids.append(pid)\n"
        "except BlockingIOError:\n"
        "    print('EAGAIN')\n"
        "print(len(kids))\n"
        "for k in kids:\n"
        "    os.kill(k, 9); os.waitpid(k, 0)\n"
    )
    res = run_plan(SubprocessProvider(), _plan(code, processes=4))
    assert res.stdout.split() == ["EAGAIN", "3"], res  # the program is one of the 4


@pytest.mark.skipif(os.geteuid() != 0, reason="the cgroup is for a root pysb only")
def test_without_a_pids_controller_a_root_launch_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pidlimit, "find_controller", lambda: None)
    assert "RLIMIT_NPROC does not limit" in (pidlimit.problem(5) or "")
    with pytest.raises(SandboxError, match="cannot be enforced"):
        SubprocessProvider().launch(_plan("pass", processes=5))


@pytest.mark.parametrize("name", ["landlock", "bwrap", "unshare", "firejail", "qemu"])
def test_every_provider_runs_the_plans_steps_before_its_host_process(
    name: str, tmp_path: Path
) -> None:
    """The steps run in the provider's host process (a wrapper, unshare's init, qemu's
    supervisor) between fork and exec, in order, whether the provider starts it through
    the base ``launch`` or its own."""
    from pysb_core.launch.drivers import load_provider
    from pysb_core.testing import require_provider

    require_provider(name)
    log = tmp_path / "log"
    python = os.path.realpath(sys.executable)
    plan = make_launch_plan([python, "-I", "-c", "print('ran')"], provider=name, python=python)
    for step in (_appender(log, "1"), _appender(log, "2")):
        plan.add_pre_exec(step.what, step.run)
    res = run_plan(load_provider(name), plan, timeout=180)
    assert res.returncode == 0, res.stderr
    assert "ran" in res.stdout
    assert log.read_text() == "12"
