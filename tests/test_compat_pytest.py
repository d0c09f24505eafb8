"""pytest runs over refusals under pysb as under python (issue 28, item 7).

pytest builds its list of traceback entries from ``tb_next`` alone and only then reads
each entry's frame and code, so the splice of the guards' entries on ``tb_frame`` came too
late: it read the audit hook's door code and failed with INTERNALERROR (exit 3) instead of
reporting the test's failure. The guards' frames carry ``__tracebackhide__``, which pytest
asks first. Real pytest (assertion rewriting, its traceback styles, ``-l``, ``-vv``) runs
in the sandbox under subprocess, bwrap and landlock, on 3.11 to 3.13.
"""

from __future__ import annotations

import pytest

from pysb_core.testing import Project, require_provider

TESTS = """\
import os
import json


def helper(path):
    marker = "helper-local"
    return open(path).read()


def test_refused_open():
    helper("/etc/hostname")


def test_refused_call():
    os.system("true")


def test_refused_import():
    import sqlite3  # noqa: F401


def test_refusal_in_an_assertion():
    assert json.loads(helper("/etc/hostname")) == {}


def test_passes():
    assert os.path.join("a", "b") == "a/b"
"""

STYLES = [
    ["--tb=long", "-l"],
    ["--tb=short", "-l"],
    ["--tb=native"],
    ["--tb=line"],
    ["-vv", "-l"],
]


@pytest.mark.parametrize("provider", ["subprocess", "landlock", "bwrap"])
def test_pytest_reports_refusals_as_failures(
    project: Project, provider: str, pysb_python: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    project.file("test_refusals.py", TESTS)
    project.profile(
        "version: 1\nimports: [os, json, pytest, _pytest, pluggy, iniconfig, packaging,"
        " test_refusals]\n"
        "files: {expose-ro: [.]}\napi: {allow: [dynamic-code, introspection, threads]}\n"
        "env: {PYTEST_DISABLE_PLUGIN_AUTOLOAD: '1'}\n"  # pytest's own code only
    )
    for style in STYLES:
        res = project.run(
            "run", "--provider", provider, "-m", "pytest", "-p", "no:cacheprovider",
            "-p", "no:randomly", *style, "test_refusals.py", python=pysb_python,
        )  # fmt: skip
        out = res.stdout + res.stderr
        where = f"{style}:\n{out}"
        assert res.returncode == 1, where  # tests failed (INTERNALERROR is 3)
        assert "INTERNALERROR" not in out and "<pysb" not in out, where
        assert "4 failed, 1 passed" in out, where
        for refusal in ("FileDeniedError", "ApiDeniedError", "ImportDeniedError"):
            assert refusal in out, where
        if style[0] != "--tb=line":
            assert 'helper("/etc/hostname")' in out, where
        if "-l" in style:
            assert "helper-local" in out, where  # the helper's locals (showlocals)
