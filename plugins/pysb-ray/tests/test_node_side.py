"""What a node does with the ProfileSpec a task carries, in this process (no cluster)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from pysb_ray import warm
from pysb_ray.spec import ProfileSpec

from pysb_core import FileDeniedError, decode_answer


def test_the_node_needs_the_profile_content_not_its_file(tools: ModuleType, tmp_path: Path) -> None:
    """The driver's file does not exist here: the node writes the content it received and
    enforces it; ``${PROFILE_DIR}`` still means the driver's directory. The node relays
    each answer undecoded (bytes); the receiver decodes it."""
    text = Path(tools.PROFILE).read_text()
    assert "${PROFILE_DIR}" in text
    spec = ProfileSpec(
        text=text.replace("${PROFILE_DIR}/out", str(Path(tools.HERE) / "out")).replace(
            "${PROFILE_DIR}", tools.HERE
        ),
        origin=str(tmp_path / "gone" / "tools.pysb.yaml"),  # never created
        cwd=str(tmp_path),
        provider="landlock",
    )
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the sandbox")
    try:
        raw = warm.run(spec, tools.add, (20, 22), {})
        assert isinstance(raw, bytes) and decode_answer(raw) == 42
        first = decode_answer(warm.run(spec, tools.sandbox_pid, (), {}))
        assert decode_answer(warm.run(spec, tools.sandbox_pid, (), {})) == first  # warm
        with pytest.raises(FileDeniedError):
            decode_answer(warm.run(spec, tools.read, (str(secret),), {}))
        # another content is another sandbox, with its own rules
        other = ProfileSpec(
            text=spec.text + "env: {}\n", origin=spec.origin, cwd=spec.cwd, provider="landlock"
        )
        assert decode_answer(warm.run(other, tools.sandbox_pid, (), {})) != first
        directory = warm._current.directory if warm._current else ""
        assert Path(directory).is_dir()
    finally:
        warm.stop()
    assert not Path(directory).exists()  # its private copy of the profile is gone
    assert not (tmp_path / "gone").exists()
