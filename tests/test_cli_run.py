"""``pysb run`` behaves like ``python``: argv, modes, exit statuses, environment.

Real programs, real child interpreters (subprocess provider, Python guards on).
"""

from __future__ import annotations

import json
import re
import signal
import sys

from pysb_core.testing import Project

OPEN = "version: 1\nimports: '*'\nfiles:\n  expose-ro: [.]\napi:\n  allow: ['*']\n"


def test_argv_after_c_is_the_programs(project: Project) -> None:
    project.profile(OPEN)
    r = project.run("run", "-c", "import sys; print(sys.argv)", "a", "-c", "b")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['-c', 'a', '-c', 'b']"


def test_module_script_and_stdin_modes(project: Project) -> None:
    project.profile(OPEN)
    project.file("f.json", '{"a": [1]}')
    r = project.run("run", "-m", "json.tool", "f.json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"a": [1]}
    project.file("s.py", "import sys\nprint(sys.argv, __name__, __file__, sys.path[0])\n")
    r = project.run("run", "s.py", "x", "--y")
    assert r.returncode == 0, r.stderr
    # __file__ as CPython 3.9+ makes it: the working directory joined to the path given
    script = str(project.root / "s.py")
    assert r.stdout.split() == ["['s.py',", "'x',", "'--y']", "__main__", script, str(project.root)]
    r = project.run("run", "-", "z", input="import sys; print(sys.argv)")
    assert r.stdout.strip() == "['-', 'z']"


def test_exit_statuses_match_python(project: Project) -> None:
    project.profile(OPEN)
    assert project.run("run", "-c", "import sys; sys.exit(3)").returncode == 3
    r = project.run("run", "-c", "import os; os.kill(os.getpid(), 9)")
    assert r.returncode == 128 + signal.SIGKILL
    r = project.run("run", "nosuch.py")
    assert r.returncode == 2 and "can't open file" in r.stderr
    r = project.run("run", "-m", "nosuch_module_xyz")
    assert r.returncode == 1 and "No module named nosuch_module_xyz" in r.stderr


def test_traceback_has_no_pysb_frames(project: Project) -> None:
    project.profile(OPEN)
    project.file("boom.py", "def f():\n    raise ValueError('boom')\nf()\n")
    r = project.run("run", "boom.py")
    assert r.returncode == 1
    assert "ValueError: boom" in r.stderr
    assert f'File "{project.root / "boom.py"}", line 3' in r.stderr  # as CPython names it
    assert "pysb_core" not in r.stderr


def test_environment_is_only_the_whitelist(project: Project) -> None:
    project.profile(OPEN + "env:\n  GREETING: hello\n  TERM: ${TERM}\n")
    host_env = {"SECRET_TOKEN": "s3cr3t", "TERM": "xterm"}
    r = project.run("run", "-c", "import os; print(sorted(os.environ))", env=host_env)
    assert r.returncode == 0, r.stderr
    # LC_CTYPE may be set by the interpreter itself (PEP 538 locale coercion), never the host.
    # TMPDIR: the private temporary directory every sandbox gets (pysb_core.launch.tmpdir).
    assert set(eval(r.stdout)) - {"LC_CTYPE"} == {"GREETING", "TERM", "TMPDIR"}
    # The kernel's view, read without the Python layer: nothing else was ever there.
    project.profile("env:\n  GREETING: hello\n  TERM: ${TERM}\n", name="env-only.yaml")
    code = "print(open('/proc/self/environ').read())"
    # subprocess: what pysb itself hands over (bwrap adds PWD: plugins/pysb-bwrap's tests).
    r = project.run(
        "run",
        "--profile",
        "env-only.yaml",
        "--provider",
        "subprocess",
        "--no-python-guards",
        "-c",
        code,
        env=host_env,
    )
    assert r.returncode == 0, r.stderr
    names = {kv.split("=", 1)[0] for kv in r.stdout.rstrip("\n").split("\0") if kv}
    assert names == {"GREETING", "TERM", "TMPDIR"}
    assert "s3cr3t" not in r.stdout


def test_python_options_reach_the_interpreter(project: Project) -> None:
    project.profile(OPEN)
    r = project.run(
        "run",
        "-OO",
        "-B",
        "-c",
        "import sys; print(sys.flags.optimize, sys.flags.dont_write_bytecode)",
    )
    assert r.stdout.split() == ["2", "1"]
    r = project.run("run", "-I", "-c", "import sys; print(sys.flags.isolated, sys.path[0] != '')")
    assert r.stdout.split() == ["1", "True"]


def test_bad_profile_lists_every_error_and_exits_125(project: Project) -> None:
    project.profile("version: 1\ninclude: [extra.yaml]\nimprots: [json]\nlimits: {memory: lots}\n")
    project.file("extra.yaml", "files:\n  expose-ro: [./does-not-exist]\n")
    r = project.run("run", "-c", "print('must not run')")
    assert r.returncode == 125
    assert "must not run" not in r.stdout
    assert "Traceback" not in r.stderr
    assert ".pysb.yaml:3:" in r.stderr and "did you mean 'imports'" in r.stderr
    assert ".pysb.yaml:4:" in r.stderr
    assert "extra.yaml:2:" in r.stderr


def test_unknown_provider_exits_125_without_installing_its_name(project: Project) -> None:
    project.profile(OPEN)
    r = project.run("run", "--provider", "nosuch", "-c", "pass")
    assert r.returncode == 125
    assert "unknown provider 'nosuch'" in r.stderr and "see pysb providers" in r.stderr
    assert "pip install" not in r.stderr  # an unknown name is nobody's package to install


def test_usage_error_is_2(project: Project) -> None:
    r = project.run("run", "--provder", "x", "-c", "pass")
    assert r.returncode == 2 and "--provider" in r.stderr


def test_wall_time_kills_and_exits_124(project: Project) -> None:
    project.profile(OPEN + "limits: {wall-time: 1s}\n")
    r = project.run("run", "-c", "import time; time.sleep(30)", timeout=20)
    assert r.returncode == 124
    assert "wall-time" in r.stderr


def test_cpu_time_limit_is_sigxcpu(project: Project) -> None:
    project.profile(OPEN + "limits: {cpu-time: 1s}\n")
    r = project.run("run", "-c", "while True: pass", timeout=30)
    assert r.returncode == 128 + signal.SIGXCPU
    assert "cpu-time" in r.stderr


def test_memory_limit_is_memory_error(project: Project) -> None:
    project.profile(OPEN + "limits: {memory: 200M}\n")
    r = project.run("run", "-c", "x = bytearray(400 * 1024 * 1024)")
    assert r.returncode == 1
    assert "MemoryError" in r.stderr and "memory" in r.stderr.split("MemoryError", 1)[1]


def test_sigterm_to_pysb_reaches_the_program(project: Project) -> None:
    import os
    import subprocess
    import time

    from pysb_core.testing import BASE_ENV, pysb_command

    project.profile(OPEN)
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (os.write(1, b'got TERM\\n'), sys.exit(7)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen(
        [*pysb_command(), "run", "-c", code],
        cwd=project.root,
        env=BASE_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGTERM)  # our own child, by PID
    out, err = proc.communicate(timeout=20)
    assert "got TERM" in out, (proc.returncode, err)
    assert proc.returncode == 7
    del time


def test_repl_banner_when_stdin_is_a_terminal(project: Project) -> None:
    import os
    import pty
    import subprocess

    from pysb_core.testing import BASE_ENV, pysb_command

    project.profile(OPEN)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*pysb_command(), "run"],
        cwd=project.root,
        env=BASE_ENV,
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    os.write(leader, b"print(6*7)\nexit()\n")
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=20)
    text = out.decode(errors="replace")
    # The default provider is auto: an OS sandbox, named in the banner (never subprocess).
    assert "pysb sandbox" in text and re.search(
        r"provider (bwrap|unshare|landlock|firejail)\b", text
    )
    assert "42" in text
    assert sys.version.split()[0] in text


def test_process_limit_holds_for_root_too(project: Project) -> None:
    """RLIMIT_NPROC does not bind root; pysb then bounds the sandbox with a pids cgroup."""
    project.profile(OPEN + "limits: {processes: 5, wall-time: 60s}\n")
    code = (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(20):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno); break\n"
        "    if pid == 0:\n"
        "        time.sleep(5); os._exit(0)\n"
        "    kids.append(pid)\n"
        "print('forked', len(kids))\n"
        "for pid in kids: os.kill(pid, 9); os.waitpid(pid, 0)\n"
    )
    r = project.run("run", "-c", code, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "refused 11" in r.stdout  # EAGAIN
    forked = int(r.stdout.split("forked")[1])
    assert forked < 5


def test_denial_traceback_shows_only_the_programs_frames(project: Project) -> None:
    """A guarded call's refusal reads as if the standard function had raised it."""
    project.profile("version: 1\nimports: '*'\nfiles:\n  expose-ro: [.]\n")
    secret = project.root.parent / "secret.txt"
    secret.write_text("s3cr3t")
    project.file("d.py", f"def read():\n    return open({str(secret)!r}).read()\n\nread()\n")
    # The Python layer's refusal, alone: under a provider with a mount namespace this path
    # below /tmp is inside the sandbox's own private /tmp, where it does not exist at all.
    r = project.run("run", "--provider", "subprocess", "d.py")
    assert r.returncode == 1
    assert "FileDeniedError" in r.stderr and "expose-ro" in r.stderr
    script = project.root / "d.py"
    assert (
        f'File "{script}", line 4' in r.stderr and f'File "{script}", line 2, in read' in r.stderr
    )
    assert "<pysb" not in r.stderr and "pysb_guards" not in r.stderr and "bootstrap" not in r.stderr
    assert "s3cr3t" not in r.stderr + r.stdout


def test_unknown_provider_option_is_reported_once_with_a_hint(project: Project) -> None:
    project.profile(OPEN + "providers:\n  subprocess: {isolate: true}\n")
    r = project.run("run", "-c", "print('must not run')")
    assert r.returncode == 125 and "must not run" not in r.stdout
    assert r.stderr.count("providers: subprocess:") == 1, r.stderr
    assert "unknown option 'isolate'" in r.stderr


def test_directory_program_imports_its_siblings_as_python_does(project: Project) -> None:
    """`pysb run app/`: the directory is sys.path[0] and its modules are the program's."""
    import subprocess

    project.profile("version: 1\nfiles:\n  expose-ro: [.]\n")
    project.file("app/util.py", "X = 1\n")
    project.file("app/sub/__init__.py", "")
    project.file("app/sub/m.py", "Y = 2\n")
    project.file(
        "app/__main__.py",
        "import sys, util\nfrom sub import m\nprint(sys.argv, sys.path[0], util.X, m.Y)\n"
        "try:\n    from app import util\nexcept ModuleNotFoundError as e:\n    print(e)\n",
    )
    r = project.run("run", "app/")
    assert r.returncode == 0, r.stderr
    plain = subprocess.run(
        [sys.executable, "app/"], cwd=project.root, capture_output=True, text=True
    )
    assert r.stdout == plain.stdout
    assert "1 2" in r.stdout and "No module named 'app'" in r.stdout


def test_sys_path_is_the_interpreters_own(project: Project) -> None:
    """The sandboxed interpreter's ``sys.path`` is what plain Python gives a ``-c`` program:
    no exposure directory (``.../pysb_core``, the venv's ``lib/pythonX.Y``) is an import
    root, so pysb's own modules cannot be imported under bare names."""
    import subprocess

    from pysb_core.testing import BASE_ENV

    project.profile('version: 1\nimports: ["*"]\n')
    code = "import sys; print(sys.path)"
    plain = subprocess.run(
        [sys.executable, "-c", code], cwd=project.root, env=BASE_ENV,
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    res = project.run("run", "-c", code + "\ntry:\n import errors\nexcept ImportError: pass\n"
                      "else: print('BARE NAME IMPORTED')")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == plain.stdout.splitlines()


def test_learning_records_accesses_made_during_an_import(project: Project, tmp_path) -> None:
    """The first learned access can come from inside an import (the import system stats
    every ``sys.path`` entry): recording it must not start another import."""
    dirs = []
    for i in range(40):
        d = tmp_path / f"entry{i}"
        d.mkdir()
        dirs.append(str(d))
    code = f"import sys\nsys.path[:0] = {dirs!r}\nimport json\nprint(json.dumps('ok'))"
    res = project.run("run", "--learn", "-c", code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == '"ok"'
    assert "json" in (project.root / ".pysb.yaml").read_text()


def test_many_import_roots_do_not_lengthen_the_command_line(tmp_path) -> None:
    """Import roots reach the sandbox in the payload, not in argv (firejail refuses an
    argument over 4 KiB): a host with a long ``sys.path`` still starts sandboxes."""
    import os

    from pysb_core.launch.pipeline import Program, Session

    extra = []
    for i in range(200):
        d = tmp_path / f"root-with-a-long-name-{i:03}"
        d.mkdir()
        extra.append(str(d))
    from pysb_core.launch.pyenv import python_paths

    saved = sys.path[:]
    sys.path.extend(extra)
    python_paths.cache_clear()  # cached per process: must not keep the 200 roots
    try:
        session = Session.create(
            provider="subprocess", profile=None, learn=True, cwd=str(tmp_path), stderr=None
        )
        plan = session.plan(Program("code", argv=["-c"], code="pass"))
    finally:
        sys.path[:] = saved
        python_paths.cache_clear()
    try:
        assert max(len(a) for a in plan.argv) < 4096
        assert set(extra) <= set(plan.payload["sys_path"])
    finally:
        for fd in (plan.payload_fd, plan.report_read_fd, plan.report_write_fd):
            if fd is not None:
                os.close(fd)
