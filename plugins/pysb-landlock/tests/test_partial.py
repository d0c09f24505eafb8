"""Partial mode under landlock: a ``@sandbox`` function runs in a worker that restricted
itself, while the caller keeps its privileges."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pysb_core.testing import BASE_ENV, require_provider

pytestmark = pytest.mark.provider("landlock")


def test_sandboxed_function_is_confined_caller_is_not(tmp_path):
    require_provider("landlock")
    project = tmp_path / "project"
    project.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    (project / ".pysb.yaml").write_text(
        # Python layer off: the refusal below can only come from the kernel.
        f"version: 1\npython-guards: false\nfiles:\n  expose-ro: [{project}]\n"
    )
    (project / "tools.py").write_text(
        textwrap.dedent(
            """
            import subprocess
            from pysb_core import sandbox

            @sandbox
            def cat(path):
                r = subprocess.run(["/bin/cat", path], capture_output=True, text=True)
                return r.returncode, r.stdout

            @sandbox
            def read(path):
                with open(path) as f:
                    return f.read()
            """
        )
    )
    (project / "app.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            from pysb_core import sandboxes
            from tools import read
            with sandboxes(provider="landlock", profile={str(project / ".pysb.yaml")!r}):
                print(read({str(project / "tools.py")!r}).count("@sandbox"))
                try:
                    print(read({str(secret)!r}))
                except PermissionError as e:
                    print("denied", "Permission denied" in str(e))
            print(open({str(secret)!r}).read())  # the caller is not sandboxed
            """
        )
    )
    r = subprocess.run(
        [sys.executable, "app.py"],
        cwd=project,
        env=BASE_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["2", "denied True", "TOP-SECRET"]
