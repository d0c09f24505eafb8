"""The program's import system behaves as CPython's (issue 28, items 4 and 5).

Item 4: pysb sets aside the modules it loaded at start-up and hands each back on the
program's first import of it (no second execution). That hand-out was forever: after
``del sys.modules['types']`` the next ``import types`` gave the old object again, a reload
did not run the module's code, and a reload of a module without ``__loader__`` left pysb's
internal ``_ReinsertLoader`` there (importlib's tests: ``'_ReinsertLoader' object has no
attribute 'path'``), and the first import raised an ``ImportWarning`` (a loader without
``exec_module``), an error in test suites. Now the hand-out is once, by a loader with
``exec_module``: then the name imports as in CPython.

Item 5: extension modules loaded only under their file's name, and a second instance of any
C module pysb had created was refused (a second ``errno``): importlib's own extension
loader tests failed with 44 errors. The file is still judged by its canonical origin; the
name only picks the init function, the module made carries that module's patches, and only
a C module holding a guard's face or patch refuses a second instance.

Real programs under ``pysb run`` (subprocess, landlock, bwrap; 3.11 to 3.13).
"""

from __future__ import annotations

import pytest

from pysb_core.testing import Project, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap"]

REIMPORT = """\
import warnings

warnings.simplefilter("error", ImportWarning)  # as test suites do
import importlib
import sys
import types

first = types
del sys.modules["types"]
import types as again

print("new object", again is not first)
print("loader", type(again.__loader__).__name__, type(again.__spec__.loader).__name__)
before = again.new_class
importlib.reload(again)
print("reload ran", again.new_class is not before)
del again.__loader__
reloaded = importlib.reload(again)
print("reloaded loader", type(reloaded.__loader__).__name__, hasattr(reloaded.__loader__, "path"))

import json

del sys.modules["json"]
import json as json2

print("json new object", json2 is not json, json2.loads("[1]") == [1])
"""

EXTENSIONS = """\
import _imp
import importlib.machinery as machinery
import importlib.util
import os
import sys

# a second instance of a built-in C module the program had (importlib's builtin tests)
import errno

spec = machinery.BuiltinImporter.find_spec("errno")
del sys.modules["errno"]
second = importlib.util.module_from_spec(spec)
spec.loader.exec_module(second)
print("errno second", second is not errno, second.ENOENT == errno.ENOENT)

# a library file under another name than its own (importlib's extension loader tests)
dynload = os.path.dirname(os.__file__) + "/lib-dynload"
path = next(
    os.path.join(dynload, n) for n in os.listdir(dynload) if n.startswith("_testmultiphase.")
)
for name in ("pkg._testmultiphase", "_testmultiphase_nonmodule"):
    loader = machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    print("loaded", name, type(module).__name__)

# still closed: a second posix (the file guard's faces are on the first)
try:
    _imp.create_builtin(machinery.ModuleSpec("posix", None, origin="built-in"))
    print("ESCAPED a second posix")
except ImportError as e:
    print("refused posix", type(e).__name__)
"""


def _has_testmultiphase(python: str) -> bool:
    import subprocess

    code = "import _testmultiphase"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_deleted_module_imports_anew_and_reloads(
    project: Project, provider: str, pysb_python: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.file("reimport.py", REIMPORT)
    project.profile("version: 1\nimports: [importlib, types, json]\napi: {allow: ['*']}\n")
    res = project.run("run", "--provider", provider, "reimport.py", python=pysb_python)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "new object True" in out, out
    assert "loader SourceFileLoader SourceFileLoader" in out, out
    assert "reload ran True" in out, out
    assert "reloaded loader SourceFileLoader True" in out, out
    assert "json new object True True" in out, out
    assert "_ReinsertLoader" not in out and "namespace(" not in out, out  # no loader of pysb's


@pytest.mark.parametrize("provider", PROVIDERS)
def test_extension_modules_load_as_importlib_loads_them(
    project: Project, provider: str, pysb_python: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    if not _has_testmultiphase(pysb_python):
        pytest.skip("this Python has no _testmultiphase")
    project.file("ext.py", EXTENSIONS)
    project.profile("version: 1\nimports: ['*']\napi: {allow: ['*']}\n")
    res = project.run("run", "--provider", provider, "ext.py", python=pysb_python)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "errno second True True" in out, out
    assert "loaded pkg._testmultiphase module" in out, out
    assert "loaded _testmultiphase_nonmodule" in out, out
    assert "refused posix ImportDeniedError" in out, out
    assert "ESCAPED" not in out, out
