"""Run code in a real child interpreter with the Python guards installed.

The child is started the way the pipeline starts it: ``python -c <stub> FD`` where FD holds
the JSON payload that :mod:`pysb_core.child.bootstrap` reads (policy, program, guard
modules, report channel). Nothing is mocked: the guards patch a real interpreter and the
program's effects (files written, processes started) are observed from outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pysb_core.events import Event
from pysb_core.policy import ApiRule, Exposure, IgnoreRule, Policy
from pysb_core.policy.netrules import parse_rule

ROOT = Path(__file__).resolve().parents[3]
GUARDS_SRC = ROOT / "plugins" / "pysb-guards" / "src"
FAMILIES = ("imports", "files", "api", "env")

STUB = (
    "import sys;sys.path[0:0]=[p for p in {paths!r} if p not in sys.path];"
    "from pysb_core.child.bootstrap import main;main(sys.argv[1])"
)


def implicit(python: str = sys.executable) -> list[Exposure]:
    """The read-only exposures the pipeline adds (interpreter, stdlib, pysb itself)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        from pysb_core.launch.pyenv import implicit_exposures

        out = list(implicit_exposures(python))
    else:  # another interpreter: ask it where it lives
        probe = (
            "import sys, sysconfig; print(sys.base_prefix); print(sysconfig.get_paths()['stdlib'])"
        )
        lines = subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout
        out = [
            Exposure(os.path.realpath(p), os.path.realpath(p), False, "<python>", True)
            for p in lines.split()
        ]
    for extra in (ROOT, GUARDS_SRC):
        out.append(Exposure(str(extra), str(extra), False, "<pysb>", True))
    return out


def expose(
    path: str | os.PathLike[str],
    *,
    rw: bool = False,
    target: str | None = None,
    source: str = "test.yaml:1",
) -> Exposure:
    real = os.path.realpath(path)
    return Exposure(real, target or real, rw, source, False)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    events: list[Event] = field(default_factory=list)

    def denials(self, guard: str | None = None) -> list[Event]:
        return [e for e in self.events if e.action == "deny" and guard in (None, e.guard)]

    def learned(self, guard: str | None = None) -> list[Event]:
        return [e for e in self.events if e.action == "learn" and guard in (None, e.guard)]


def run(
    code: str,
    *,
    imports: tuple[str, ...] | None = ("*",),
    exposures: list[Exposure] | tuple[Exposure, ...] = (),
    ignore: tuple[str, ...] = (),
    api: tuple[tuple[str, str], ...] = (),
    env: dict[str, str] | None = None,
    learn: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    families: tuple[str, ...] = FAMILIES,
    script: str | os.PathLike[str] | None = None,
    module: str | None = None,
    profile_files: tuple[str, ...] = (),
    python: str = sys.executable,
    timeout: float = 60,
    stdin: str | None = None,
    network: tuple[str, ...] = (),
) -> Result:
    """Run ``code`` (as ``-c``, or as ``script`` or ``-m module`` when given) under the
    guards (the network guard too when ``network`` rules are given)."""
    import shutil

    python = shutil.which(python) or python  # the child's PATH may differ
    cwd = os.path.realpath(cwd or os.getcwd())
    policy = Policy(
        exposures=(*implicit(python), *exposures),
        ignore=tuple(IgnoreRule(g, f"test.yaml:{i + 10}") for i, g in enumerate(ignore)),
        imports=imports,
        imports_source="test.yaml:2",
        api=tuple(ApiRule(a, t, f"test.yaml:{i + 20}") for i, (a, t) in enumerate(api)),
        env=dict(env or {}),
        learn=learn,
        cwd=cwd,
        profile_files=profile_files,
        network=tuple(parse_rule(r, f"test.yaml:{i + 30}") for i, r in enumerate(network)),
    )
    if network:
        families = (*families, "network")
    if module is not None:
        program = {"mode": "module", "module": module, "argv": ["-m"]}
    elif script is not None:
        program = {"mode": "script", "path": str(script), "argv": [str(script)]}
    else:
        program = {"mode": "code", "code": code, "argv": ["-c"]}
    with tempfile.TemporaryDirectory() as tmp:
        payload_path = Path(tmp, "payload.json")
        report_path = Path(tmp, "report.jsonl")
        report_fd = os.open(report_path, os.O_WRONLY | os.O_CREAT, 0o600)
        payload = {
            "policy": json.loads(policy.to_json()),
            "program": program,
            "guards": [f"pysb_guards.{f}.guard" for f in families],
            "report_fd": report_fd,
            "sys_path": [str(ROOT), str(GUARDS_SRC)],
        }
        payload_path.write_text(json.dumps(payload))
        payload_fd = os.open(payload_path, os.O_RDONLY)
        try:
            child_env = dict(env or {})
            if learn:
                child_env = {**os.environ, **child_env}
            child_env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
            proc = subprocess.run(
                [python, "-c", STUB.format(paths=[str(ROOT), str(GUARDS_SRC)]), str(payload_fd)],
                pass_fds=(payload_fd, report_fd),
                cwd=cwd,
                env=child_env,
                capture_output=True,
                text=True,
                timeout=timeout,
                input=stdin,
            )
        finally:
            os.close(payload_fd)
            os.close(report_fd)
        events = [Event.from_json(line) for line in report_path.read_text().splitlines() if line]
    return Result(proc.returncode, proc.stdout, proc.stderr, events)


def outcome(result: Result) -> Any:
    """The JSON the child printed last on stdout (tests print ``json.dumps(...)``)."""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines, f"no output; stderr:\n{result.stderr}"
    return json.loads(lines[-1])


PRELUDE = """
import sys as __sys
__res = {}
def t(name, fn):
    try:
        __res[name] = ("ok", repr(fn()))
    except BaseException as e:
        __res[name] = (type(e).__name__, str(e))
"""
EPILOGUE = "\n__sys.stdout.write('\\n' + repr(__res) + '\\n')\n"


def probe(body: str, **kwargs: Any) -> dict[str, tuple[str, str]]:
    """Run ``body`` (which calls ``t(name, lambda: ...)``) and return name -> (kind, text):
    kind is ``"ok"`` or the exception class name. Needs no import in the child."""
    import ast
    import textwrap

    result = run(PRELUDE + textwrap.dedent(body) + EPILOGUE, **kwargs)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return ast.literal_eval(lines[-1])
