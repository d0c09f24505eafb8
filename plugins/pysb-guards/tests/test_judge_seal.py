"""No program code runs under a judge of the files, imports, api or env guards, and no frame
the program builds passes for one of the guards' own, on every interpreter: the corpus of
tests/security/judge_escapes.py in a real child interpreter with the guards installed."""

from __future__ import annotations

import sys
from pathlib import Path

import guarded
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "security"))
import judge_escapes


@pytest.mark.parametrize("label,code", judge_escapes.attack_params())
def test_no_program_code_under_a_judge(label: str, code: str, python: str, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    res = guarded.run(
        judge_escapes.program(label, code),
        imports=judge_escapes.IMPORTS,
        exposures=(guarded.expose(tmp_path), guarded.expose(tmp_path / "out", rw=True)),
        ignore=judge_escapes.IGNORE,
        api=tuple(("allow", a) for a in judge_escapes.API_ALLOW),
        cwd=tmp_path,
        python=python,
    )
    assert "held" in res.stdout, res.stdout + res.stderr
    assert "ESCAPED" not in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("label,code", judge_escapes.learning_params())
def test_no_program_code_under_a_recorder(
    label: str, code: str, python: str, tmp_path: Path
) -> None:
    (tmp_path / "out").mkdir()
    res = guarded.run(
        judge_escapes.program(label, code),
        imports=judge_escapes.IMPORTS,
        exposures=(guarded.expose(tmp_path), guarded.expose(tmp_path / "out", rw=True)),
        cwd=tmp_path,
        learn=True,
        python=python,
    )
    assert "held" in res.stdout, res.stdout + res.stderr
    assert "ESCAPED" not in res.stdout, res.stdout + res.stderr


# ---------------------------------------------------------------------------------------
# The guards' own frames are told by identity (in this process: no audit hook here)
# ---------------------------------------------------------------------------------------


def test_frames_are_handed_to_sealed_code_only() -> None:
    """The audit hook hands a frame with a sealed frame on its chain to sealed code only:
    not to the program, nor to a function the program made with the doors' globals."""
    import _thread
    import builtins
    import types

    from pysb_guards import _seal

    sealed_builtins = dict(builtins.__dict__)
    sealed_ns = {"__builtins__": sealed_builtins}
    dispatch = _seal._hook_factory(
        _seal.DOOR_NS, types.FunctionType, types.FrameType, sys._getframe,
        _thread.get_ident, sealed_builtins, [False], set(),
    )[0]  # fmt: skip

    def hook(event: str, args: tuple) -> object:  # the audit hook: dispatch's caller
        return dispatch(event, args)

    def ask(hook=hook, getframe=sys._getframe):  # asks for its caller's frame
        return hook("sys._getframe", (getframe(1),))

    def below(ask):  # a sealed frame: the one asked for
        return ask()

    sealed_below = types.FunctionType(below.__code__, sealed_ns, "below")
    forged = types.FunctionType(ask.__code__, _seal.DOOR_NS, "ask", ask.__defaults__)
    assert type(sealed_below(ask)) is PermissionError
    assert type(sealed_below(forged)) is PermissionError
    own = types.FunctionType(ask.__code__, sealed_ns, "ask", ask.__defaults__)
    assert sealed_below(own) is None
    assert below(ask) is None  # no sealed frame on the chain: anyone may have it


def test_guard_frames_are_told_by_identity() -> None:
    """Doors, faces and sealed code are recognised by the code they run (doors, faces) or
    by the id of their globals (sealed): globals a frame of the program's can share prove
    nothing. A copy of a face's code behaves as the face (its door and prepare are
    constants, it reads no global), so it may pass for one."""
    import types

    from pysb_guards import _seal

    b = _seal.builders()
    is_guard = b["IS_GUARD_FRAME"]

    def frame_of_caller() -> object:
        return sys._getframe(1)

    door = b["MAKE_DOOR"](frame_of_caller, None)
    face = b["MAKE_FACE"](door)
    door_frame = door()
    face_frame = door_frame.f_back  # the door's caller: this function's frame

    def through_face() -> object:
        return face().f_back

    assert is_guard(door_frame)
    assert not is_guard(face_frame)
    assert is_guard(through_face())
    assert face.__closure__ is None and door.__closure__ is None
    clone = types.FunctionType(face.__code__, {}, "clone")
    assert clone().f_back.f_globals is not _seal._FACE_NS  # other globals: not a face
    same = types.FunctionType(face.__code__, face.__globals__, "same")
    assert is_guard(same().f_back)  # the face's own code and globals: behaves as the face

    def program(getframe=sys._getframe) -> object:
        return getframe()

    defaults = program.__defaults__
    assert not is_guard(types.FunctionType(program.__code__, _seal.DOOR_NS, "p", defaults)())
    assert not is_guard(types.FunctionType(program.__code__, face.__globals__, "p", defaults)())
    ns = _seal.seal_group([program])
    assert is_guard(ns["program"]())
    assert not is_guard(program())
