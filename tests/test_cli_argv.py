"""CPython-compatible splitting of ``pysb run``'s arguments (unit tests of the parser)."""

from __future__ import annotations

import pytest

from pysb_core.cli.argv import UsageError, split_run_args


def test_code_stops_parsing_and_keeps_program_args_untouched() -> None:
    a = split_run_args(["-c", "import sys; print(sys.argv)", "a", "-c", "b"])
    assert (a.mode, a.target, a.args) == ("code", "import sys; print(sys.argv)", ["a", "-c", "b"])


def test_grouped_flags_then_module() -> None:
    a = split_run_args(["-Im", "json.tool", "f.json", "--provider", "x"])
    assert a.python_opts == ["-I"]
    assert (a.mode, a.target, a.args) == ("module", "json.tool", ["f.json", "--provider", "x"])


def test_glued_values() -> None:
    a = split_run_args(["-Werror", "-Xdev", "-OO", "-cprint(1)"])
    assert a.python_opts == ["-W", "error", "-X", "dev", "-O", "-O"]
    assert (a.mode, a.target) == ("code", "print(1)")


def test_separate_values_and_pysb_options_before_program() -> None:
    a = split_run_args(
        ["--provider", "bwrap", "-W", "ignore", "--net=allow tcp * 443 out", "app.py", "-v"]
    )
    assert a.get("provider") == "bwrap"
    assert a.many("net") == ["allow tcp * 443 out"]
    assert a.python_opts == ["-W", "ignore"]
    assert (a.mode, a.target, a.args) == ("script", "app.py", ["-v"])


def test_dash_and_double_dash() -> None:
    assert split_run_args(["-", "x"]).mode == "stdin"
    a = split_run_args(["--", "-weird.py", "y"])
    assert (a.mode, a.target, a.args) == ("script", "-weird.py", ["y"])
    assert split_run_args([]).mode == "auto"


def test_learn_takes_an_optional_value() -> None:
    assert split_run_args(["--learn", "-c", "pass"]).get("learn") is True
    assert split_run_args(["--learn=p.yaml", "-c", "pass"]).get("learn") == "p.yaml"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--provder", "x"], "did you mean --provider"),
        (["-c"], "Argument expected for the -c option"),
        (["-Z"], "Unknown option: -Z"),
        (["--no-python-guards=1"], "does not take a value"),
    ],
)
def test_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        split_run_args(argv)


def test_dash_h_before_the_program_is_pysbs_help() -> None:
    assert split_run_args(["-h"]).get("help") is True
    assert split_run_args(["-Ih"]).get("help") is True
    # after the program it is the program's
    a = split_run_args(["app.py", "-h"])
    assert (a.get("help"), a.args) == (None, ["-h"])


@pytest.mark.parametrize("option", ["-h", "--help", "--help-all", "-V", "--version"])
def test_cpython_informational_options_after_double_dash(option: str) -> None:
    a = split_run_args(["--", option])
    assert (a.mode, a.target) == ("python-info", option)
