"""What the driver checks before any task leaves it (no cluster needed)."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pysb_ray
import pytest
from pysb_ray.decorator import check_importable
from pysb_ray.spec import load_spec

from pysb_core import ProfileError, SandboxError


def test_a_nested_function_is_refused_at_remote_time() -> None:
    def inner() -> int:
        return 1

    fn = pysb_ray.sandboxed(inner, profile="unused.yaml")
    with pytest.raises(SandboxError, match="top level of a module"):
        fn.remote()


def test_a_function_of_the_main_script_is_refused_with_the_fix() -> None:
    def scripted() -> int:
        return 1

    scripted.__module__ = "__main__"
    scripted.__qualname__ = "scripted"
    fn = pysb_ray.sandboxed(scripted)
    with pytest.raises(SandboxError, match=r"runs as __main__.*Move it into a module"):
        check_importable(fn)


def test_a_replaced_function_is_refused(tools: ModuleType) -> None:
    original = tools.add
    try:
        tools.add = pysb_ray.sandboxed(original.__pysb_wrapped__, profile=tools.PROFILE)
        with pytest.raises(SandboxError, match="does not name this sandboxed function"):
            check_importable(original)
    finally:
        tools.add = original


def test_the_profile_content_travels_with_profile_dir_bound_to_the_driver(
    tools: ModuleType,
) -> None:
    spec = load_spec(tools.PROFILE, "landlock")
    assert spec.text == Path(tools.PROFILE).read_text()
    here = os.path.dirname(tools.PROFILE)
    assert f'expose-ro: ["{here}"]' in spec.node_text()
    assert spec.node_text().count("\n") == spec.text.count("\n")  # lines keep their numbers
    assert load_spec(tools.PROFILE, "landlock") is spec  # checked once while unchanged
    assert load_spec(tools.PROFILE, "bwrap").key != spec.key


def test_a_profile_with_an_error_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pysb.yaml"
    bad.write_text("version: 1\nimports: [os]\nnetwork:\n  - allow tcp nowhere\n")
    with pytest.raises(ProfileError) as info:
        load_spec(bad, None)
    assert f"{bad}:4" in str(info.value)


def test_includes_are_refused_since_only_one_file_travels(tmp_path: Path) -> None:
    (tmp_path / "base.pysb.yaml").write_text("version: 1\nimports: [json]\n")
    main = tmp_path / "main.pysb.yaml"
    main.write_text("version: 1\ninclude: [base.pysb.yaml]\n")
    with pytest.raises(ProfileError, match=r"main\.pysb\.yaml:2: include: .*one profile file"):
        load_spec(main, None)


def test_no_profile_at_all_is_an_error_not_an_open_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYSB_PROFILE", raising=False)
    with pytest.raises(ProfileError, match="no profile for this sandboxed Ray function"):
        load_spec(None, None, near=str(tmp_path / "tools.py"))
    with pytest.raises(ProfileError, match="cannot be read"):
        load_spec(tmp_path / "missing.yaml", None)


def test_a_ray_sandboxed_function_is_also_a_local_partial_mode_function(
    tools: ModuleType, tmp_path: Path
) -> None:
    """The module imports ``pysb_ray`` inside the sandbox too: it must be allowed there
    without an ``imports`` line, as ``pysb_core`` is."""
    from pysb_core import FileDeniedError, sandboxes

    with sandboxes(profile=tools.PROFILE, provider="landlock"):
        assert tools.add(2, 3) == 5
        with pytest.raises(FileDeniedError):
            tools.read(str(tmp_path))


def test_a_learning_profile_is_refused_on_the_driver(tmp_path: Path) -> None:
    learning = tmp_path / "learning.pysb.yaml"
    learning.write_text("version: 1\nimports: [os]\nlearn: true\n")
    with pytest.raises(ProfileError, match=r"learning\.pysb\.yaml:3: learn: .*never runs learning"):
        load_spec(learning, None)


def test_a_denial_raised_through_ray_keeps_the_fields_its_builtin_base_holds() -> None:
    """Ray raises a task's exception on the driver as an instance of a class deriving
    from ``RayTaskError`` and the exception's own class, made as ``cls(cause)``: a refused
    ``open`` read None for ``errno`` and ``filename`` there (partial mode's own caller
    reads them); an import refusal lost ``name`` and ``msg``."""
    ray_exceptions = pytest.importorskip("ray.exceptions")
    from pysb_core import FileDeniedError, ImportDeniedError, WriteDeniedError

    refused = FileDeniedError("'/srv/x' is not exposed", target="/srv/x")
    refused.filename = "/srv/x"
    written = WriteDeniedError("read-only", target="/srv/y")
    written.filename, written.filename2 = "/srv/y", "/srv/z"
    imported = ImportDeniedError("import of 'numpy' refused", target="numpy")
    for cause, fields in (
        (refused, ("errno", "strerror", "filename", "target", "suggested_rule")),
        (written, ("errno", "strerror", "filename", "filename2")),
        (imported, ("name", "msg", "path", "target")),
    ):
        try:
            raise cause
        except Exception as caught:
            raised = ray_exceptions.RayTaskError("read", "Traceback ...", caught)
        error = raised.as_instanceof_cause()
        assert isinstance(error, type(cause)) and isinstance(error, ray_exceptions.RayTaskError)
        assert {f: getattr(error, f) for f in fields} == {f: getattr(cause, f) for f in fields}
    assert refused.errno == 2 and written.errno == 13  # and the denials themselves as before
