"""Stack walks work in a program run as ``pysb run -m MODULE`` or a script (issue 17): runpy's
``exec`` is the guarded builtin, whose door frame (its code is not readable) sat below
every frame of the program; ``traceback.extract_stack()`` and ``warnings`` stack levels
then raised ``AttributeError``."""

from __future__ import annotations

import json

from pysb_core.testing import Project

PROFILE = (
    "version: 1\nimports: [json, traceback, warnings, inspect, stackmod]\n"
    "files:\n  expose-ro: [.]\n"
)

MODULE = """
import inspect, json, traceback, warnings

def where():
    warnings.warn("deep", stacklevel=4)  # beyond the module's frame: points at the runner

stack = traceback.extract_stack()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    where()
print(json.dumps({
    "stack": [f.name for f in stack],
    "inspect": [f.function for f in inspect.stack()],
    "warned": len(caught),
}))
"""


def test_stack_walks_in_a_module_run(project: Project) -> None:
    project.profile(PROFILE)
    project.file("stackmod.py", MODULE)
    r = project.run("run", "--provider", "subprocess", "-m", "stackmod")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["stack"][-1] == "<module>", out
    assert out["inspect"][0] == "<module>", out
    assert out["warned"] == 1, out


def test_stack_walks_in_a_script_run(project: Project) -> None:
    """The same in a script: pysb's bootstrap runs it with the interpreter's own ``exec``."""
    project.profile(PROFILE)
    project.file("stackmod.py", MODULE)
    r = project.run("run", "--provider", "subprocess", "stackmod.py")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["stack"][-1] == "<module>" and out["warned"] == 1, out
