"""``${...}`` expansion: defaults, nesting, never twice, refused forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pysb_core.profile.variables import VariableError, expand, is_absent, lone_variable


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("plain", {}, "plain"),
        ("${A}", {"A": "1"}, "1"),
        ("x-${A}-y", {"A": "1"}, "x-1-y"),
        ("${A}", {}, ""),
        ("${A:-dflt}", {}, "dflt"),
        ("${A:-dflt}", {"A": ""}, "dflt"),
        ("${A:-dflt}", {"A": "set"}, "set"),
        ("${TMPDIR:-${TMP:-/tmp}}", {}, "/tmp"),
        ("${TMPDIR:-${TMP:-/tmp}}", {"TMP": "/t"}, "/t"),
        ("${TMPDIR:-${TMP:-/tmp}}/x", {"TMPDIR": "/td"}, "/td/x"),
        ("${A:-a${B}c}", {"B": "b"}, "abc"),
        ("${A:-}", {}, ""),
        ("cost $5 and $HOME", {"HOME": "/h"}, "cost $5 and $HOME"),
        ("${A}${B}", {"A": "1", "B": "2"}, "12"),
    ],
)
def test_expand(text: str, env: dict[str, str], expected: str) -> None:
    assert expand(text, env) == expected


def test_value_is_never_expanded_twice() -> None:
    env = {"A": "${B}", "B": "secret"}
    assert expand("${A}", env) == "${B}"
    assert expand("${X:-${A}}", env) == "${B}"


def test_profile_dir() -> None:
    assert expand("${PROFILE_DIR}/x", {}, "/etc/pysb") == "/etc/pysb/x"
    # PROFILE_DIR is the file's directory even when the host defines one
    assert expand("${PROFILE_DIR}", {"PROFILE_DIR": "/host"}, "/file") == "/file"


@pytest.mark.parametrize(
    "text",
    ["${A:B}", "${}", "${A-b}", "${A", "${A:-unterminated", "${1A}", "${*_KEY}", "${A B}"],
)
def test_invalid_forms(text: str) -> None:
    with pytest.raises(VariableError):
        expand(text, {"A": "1"})


def test_invalid_form_names_the_form() -> None:
    with pytest.raises(VariableError, match=r"\$\{A:B\}"):
        expand("x ${A:B} y", {})


def test_lone_variable_and_absence() -> None:
    assert lone_variable("${TERM}") == "TERM"
    assert lone_variable("${TERM:-x}") is None
    assert lone_variable("a${TERM}") is None
    assert is_absent("${TERM}", {})
    assert not is_absent("${TERM}", {"TERM": ""})
    assert not is_absent("${TERM:-}", {})
    assert not is_absent("${PROFILE_DIR}", {}, "/d")


_TEXT = st.text(alphabet="${}:-AB_x/ ", max_size=24)


@given(text=_TEXT, a=_TEXT, b=_TEXT)
def test_expand_is_total_and_single_pass(text: str, a: str, b: str) -> None:
    env = {"A": a, "B": b}
    try:
        out = expand(text, env)
    except VariableError:
        return
    # a text without variables is unchanged; host values are copied, never re-expanded
    if "${" not in text:
        assert out == text
    if text in ("${A}", "${B}"):
        assert out == env[text[2]]
