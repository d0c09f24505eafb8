"""The learning writer: text-preserving merge, no duplicates, atomic, .bak, re-loadable."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from pysb_core.errors import SandboxError
from pysb_core.profile import load_policy
from pysb_core.profile.learning import LearnedProfile
from pysb_core.profile.writer import merge_learned, scalar_text

HAND_WRITTEN = """\
# Project profile -- written by hand, keep these comments!
version: 1          # format version
env:
  TERM: ${TERM}     # the terminal
files:
  expose-ro: [., /usr/share/zoneinfo]   # flow list
  ignore:
    - .env          # secrets stay hidden
    - "*.pem"
imports:
  - json            # we parse json
  # more imports below

api: {allow: [threads]}   # flow mapping
# --- end of the hand-written part ---
"""


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for d in ("data", "out", "sub/deeper"):
        (tmp_path / d).mkdir(parents=True)
    return tmp_path


def env_for(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"), "TERM": "t"}


def learned(cwd: Path) -> LearnedProfile:
    p = LearnedProfile(cwd=str(cwd), environ={})
    p.add("files", "expose-ro", "./sub/deeper")  # covered by "." already in the file
    p.add("files", "expose-ro", "/usr/lib")
    p.add("files", "expose-rw", "./out")
    p.add("imports", None, "json", group="standard library")  # already there
    p.add("imports", None, "os", group="standard library")
    p.add("imports", None, "yaml", group="third party")
    p.add("imports", None, "ctypes", group="dangerous")
    p.add("network", None, "allow tcp example.com 443 out")
    p.add("api", "allow", "subprocess.run", comment="# process-exec: run git")
    p.add("api", "allow", "threads")  # already there
    p.add("env", None, ("HOME", "${HOME}"))
    p.add("env", None, ("TERM", "${TERM}"))  # already there
    return p


def comment_lines(text: str) -> list[str]:
    return [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]


def test_merge_keeps_comments_and_extends_flow_and_block_lists(cwd: Path) -> None:
    target = cwd / ".pysb.yaml"
    target.write_text(HAND_WRITTEN)
    summary = merge_learned(str(target), learned(cwd))
    text = target.read_text()
    for comment in comment_lines(HAND_WRITTEN):
        assert comment in text, comment
    # every original line is still there, in order
    original = HAND_WRITTEN.splitlines()
    lines = text.splitlines()
    positions = [lines.index(line) for line in original if "[" not in line]
    assert positions == sorted(positions)
    data = yaml.safe_load(text)
    assert data["files"]["expose-ro"] == [".", "/usr/share/zoneinfo", "/usr/lib"]
    assert data["files"]["expose-rw"] == ["./out"]
    assert data["imports"] == ["json", "os", "yaml", "ctypes"]
    assert data["api"] == {"allow": ["threads", "subprocess.run"]}
    assert data["env"] == {"TERM": "${TERM}", "HOME": "${HOME}"}
    assert data["network"] == ["allow tcp example.com 443 out"]
    # block list items keep the list's indentation and get their group comment
    assert "  # third party (check where it comes from)\n  - yaml\n" in text
    assert "    - .env          # secrets stay hidden\n" in text
    assert "previous version kept as .pysb.yaml.bak" in summary
    assert "imports: os, yaml, ctypes" in summary
    assert "./sub/deeper" not in summary and "threads" not in summary.split("api.allow:")[1]
    assert (cwd / ".pysb.yaml.bak").read_text() == HAND_WRITTEN


def test_relearning_adds_nothing(cwd: Path) -> None:
    target = cwd / ".pysb.yaml"
    target.write_text(HAND_WRITTEN)
    merge_learned(str(target), learned(cwd))
    after_first = target.read_text()
    bak_first = (cwd / ".pysb.yaml.bak").read_text()
    summary = merge_learned(str(target), learned(cwd))
    assert "nothing new learned" in summary
    assert target.read_text() == after_first
    assert (cwd / ".pysb.yaml.bak").read_text() == bak_first
    # one more rule: only it is added
    more = learned(cwd)
    more.add("imports", None, "re", group="standard library")
    summary = merge_learned(str(target), more)
    assert summary.count("\n") == 1 and "imports: re" in summary
    assert yaml.safe_load(target.read_text())["imports"] == ["json", "os", "re", "yaml", "ctypes"]
    assert (cwd / ".pysb.yaml.bak").read_text() == after_first


def test_result_reloads_with_the_loader(cwd: Path) -> None:
    pytest.importorskip("pysb_core.policy.netrules")
    target = cwd / ".pysb.yaml"
    target.write_text(HAND_WRITTEN)
    merge_learned(str(target), learned(cwd))
    env = env_for(cwd)
    policy = load_policy(str(target), cwd=str(cwd), environ=env)
    assert policy.imports == ("json", "os", "yaml", "ctypes")
    assert policy.env == {"TERM": "t", "HOME": str(cwd)}
    assert {(e.path, e.writable) for e in policy.exposures} >= {
        ("/usr/lib", False),
        (str(cwd / "out"), True),
    }
    assert [r.text for r in policy.network] == ["allow tcp example.com 443 out"]
    assert [(r.action, r.target) for r in policy.api] == [
        ("allow", "threads"),
        ("allow", "subprocess.run"),
    ]


def test_new_file_is_created_and_enforces(cwd: Path) -> None:
    target = cwd / "new" / "p.yaml"
    target.parent.mkdir()
    summary = merge_learned(str(target), learned(cwd))
    assert summary.startswith("wrote new/p.yaml: learned 12 rule(s)"), summary
    text = target.read_text()
    assert text.startswith("# pysb profile, written by a learning run")
    assert "  # standard library\n  - json\n  - os\n  # third party" in text
    assert "    - subprocess.run  # process-exec: run git\n" in text
    assert not (cwd / "new" / "p.yaml.bak").exists()
    policy = load_policy(str(target), cwd=str(cwd), environ=env_for(cwd))
    assert not policy.learn
    assert policy.imports == ("json", "os", "yaml", "ctypes")


def test_imports_join_their_group(cwd: Path) -> None:
    target = cwd / "p.yaml"
    merge_learned(str(target), learned(cwd))
    more = LearnedProfile()
    more.add("imports", None, "zlib", group="dangerous")
    more.add("imports", None, "abc", group="standard library")
    more.add("imports", None, "ungrouped")
    merge_learned(str(target), more)
    text = target.read_text()
    assert text.count("# dangerous") == 1 and text.count("# standard library") == 1
    assert "  - os\n  - abc\n  # third party" in text
    assert "  - ctypes\n  - zlib\n  - ungrouped\n" in text
    assert yaml.safe_load(text)["imports"] == [
        "json",
        "os",
        "abc",
        "yaml",
        "ctypes",
        "zlib",
        "ungrouped",
    ]


def test_nothing_learned_still_writes_a_profile(cwd: Path) -> None:
    target = cwd / ".pysb.yaml"
    summary = merge_learned(str(target), LearnedProfile())
    assert "nothing was learned" in summary
    assert target.exists()
    policy = load_policy(str(target), cwd=str(cwd), environ=env_for(cwd))
    assert not policy.learn and policy.imports is None and policy.exposures == ()


def test_no_temp_files_left_and_mode_kept(cwd: Path) -> None:
    target = cwd / ".pysb.yaml"
    target.write_text(HAND_WRITTEN)
    os.chmod(target, 0o600)
    merge_learned(str(target), learned(cwd))
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(os.listdir(cwd)) == [".pysb.yaml", ".pysb.yaml.bak", "data", "out", "sub"]


@pytest.mark.parametrize(
    ("original", "expected"),
    [
        ("imports: json\n", ["json", "os"]),
        ("imports: [json,]\n", ["json", "os"]),
        ("imports: []\n", ["os"]),
        ("imports: ~\n", ["os"]),
        ("imports:   # none yet\nversion: 1\n", ["os"]),
        ("imports:\n- json\nversion: 1\n", ["json", "os"]),
        ("imports: [\n  json,  # c\n  re\n]\n", ["json", "re", "os"]),
    ],
)
def test_list_shapes(cwd: Path, original: str, expected: list[str]) -> None:
    target = cwd / "p.yaml"
    target.write_text(original)
    p = LearnedProfile()
    p.add("imports", None, "os")
    merge_learned(str(target), p)
    text = target.read_text()
    assert yaml.safe_load(text)["imports"] == expected
    for comment in comment_lines(original):
        assert comment in text


def test_star_imports_take_nothing_more(cwd: Path) -> None:
    target = cwd / "p.yaml"
    target.write_text('imports: "*"\n')
    p = LearnedProfile()
    p.add("imports", None, "os")
    assert "nothing new" in merge_learned(str(target), p)
    assert target.read_text() == 'imports: "*"\n'


def test_nested_mapping_shapes(cwd: Path) -> None:
    target = cwd / "p.yaml"
    target.write_text("files: {expose-ro: [.]}\nenv: {}\nlimits:\n  memory: 1G\n")
    p = LearnedProfile()
    p.add("files", "expose-rw", "${TMPDIR:-/tmp}/x")
    p.add("files", "ignore", "*.pem")
    p.add("env", None, ("A", "1"))
    p.add("limits", "memory", "2G")  # a person's value wins
    p.add("limits", "processes", "64")
    p.add("provider", None, "landlock")
    merge_learned(str(target), p)
    data = yaml.safe_load(target.read_text())
    assert data["files"] == {
        "expose-ro": ["."],
        "expose-rw": ["${TMPDIR:-/tmp}/x"],
        "ignore": ["*.pem"],
    }
    assert data["env"] == {"A": "1"}
    assert data["limits"] == {"memory": "1G", "processes": "64"}
    assert data["provider"] == "landlock"


def test_provider_options_pairs(cwd: Path) -> None:
    target = cwd / "p.yaml"
    target.write_text("providers: {bwrap: {}}  # options\n")
    p = LearnedProfile()
    p.add("providers", "qemu", ("memory", "2048M"))
    p.add("providers", "bwrap", ("share-net", "false"))
    merge_learned(str(target), p)
    text = target.read_text()
    assert text.endswith("  # options\n")
    assert yaml.safe_load(text)["providers"] == {
        "bwrap": {"share-net": "false"},
        "qemu": {"memory": "2048M"},
    }


def test_env_glob_in_file_covers_learned_name(cwd: Path) -> None:
    target = cwd / "p.yaml"
    target.write_text('env:\n  "*_API_KEY": ${*_API_KEY}\n')
    p = LearnedProfile()
    p.add("env", None, ("OPENAI_API_KEY", "${OPENAI_API_KEY}"))
    assert "nothing new" in merge_learned(str(target), p)


def test_rw_covers_ro_and_denied_api_is_not_allowed(cwd: Path) -> None:
    target = cwd / "p.yaml"
    target.write_text(
        "files:\n  expose-rw: [./data/]\napi:\n  deny: [os.system]\n"
        "network: ['allow  tcp  example.com 443 out']\n"
    )
    p = LearnedProfile()
    p.add("files", "expose-ro", "./data")
    p.add("files", "expose-ro", "./data/inner")
    p.add("api", "allow", "os.system")
    p.add("network", None, "allow tcp example.com 443 out")
    assert "nothing new" in merge_learned(str(target), p)


def test_crlf_file(cwd: Path) -> None:
    target = cwd / "p.yaml"
    target.write_bytes(b"# win\r\nimports:\r\n  - json\r\n")
    p = LearnedProfile()
    p.add("imports", None, "os")
    p.add("network", None, "allow tcp example.com 443 out")
    merge_learned(str(target), p)
    raw = target.read_bytes()
    assert b"\n" not in raw.replace(b"\r\n", b"")
    assert yaml.safe_load(raw)["imports"] == ["json", "os"]


def test_invalid_existing_file_is_untouched_and_rules_go_beside(cwd: Path) -> None:
    target = cwd / "p.yaml"
    target.write_text("imports: [json\n")
    p = LearnedProfile()
    p.add("imports", None, "os")
    summary = merge_learned(str(target), p)
    assert summary.startswith("p.yaml:2: cannot merge learned rules: while parsing a flow")
    assert "cannot merge learned rules" in summary and "p.yaml.learned.yaml" in summary
    assert target.read_text() == "imports: [json\n"
    assert yaml.safe_load((cwd / "p.yaml.learned.yaml").read_text())["imports"] == ["os"]


def test_unmergeable_layout_falls_back_beside_the_file(cwd: Path) -> None:
    target = cwd / "p.yaml"
    original = "imports: {json: yes}  # not a list\n"
    target.write_text(original)
    p = LearnedProfile()
    p.add("imports", None, "os")
    summary = merge_learned(str(target), p)
    assert target.read_text() == original
    assert "p.yaml.learned.yaml" in summary


def test_unmergeable_text_falls_back_beside_the_file(cwd: Path) -> None:
    target = cwd / "p.yaml"
    original = "version: 1\n...\n# after the document end marker\n"
    target.write_text(original)
    p = LearnedProfile()
    p.add("imports", None, "os")
    summary = merge_learned(str(target), p)
    assert target.read_text() == original
    assert "p.yaml.learned.yaml" in summary
    assert yaml.safe_load((cwd / "p.yaml.learned.yaml").read_text())["imports"] == ["os"]


def test_missing_directory_is_created(cwd: Path) -> None:
    target = cwd / "a" / "b" / "p.yaml"
    merge_learned(str(target), LearnedProfile())
    assert target.exists()


def test_unwritable_target_is_a_clear_error(cwd: Path) -> None:
    (cwd / "isdir.yaml").mkdir()
    with pytest.raises(SandboxError, match=r"cannot write the learned profile isdir\.yaml"):
        merge_learned(str(cwd / "isdir.yaml"), LearnedProfile())


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "./data",
        "${TMPDIR:-/tmp}",
        "*_KEY",
        "true",
        "1",
        "null",
        "a: b",
        "#x",
        "x #y",
        "a,b",
        "- x",
        "[x]",
        " pad",
        "ü",
        "it's",
        'say "hi"',
        "~",
        "allow tcp 0.0.0.0/0 80,443 out",
    ],
)
def test_scalar_text_round_trips(value: str) -> None:
    assert yaml.safe_load(f"k: {scalar_text(value)}") == {"k": value}
    assert yaml.safe_load(f"k: [{scalar_text(value, flow=True)}]") == {"k": [value]}


def test_learned_profile_add() -> None:
    p = LearnedProfile(cwd="/w", environ={"HOME": "/h", "TMPDIR": "/t", "VIRTUAL_ENV": "/w/.v"})
    assert p.add("imports", None, "json")
    assert not p.add("imports", None, "json")
    assert len(p) == 1
    with pytest.raises(ValueError):
        p.add("env", None, ("A",))  # type: ignore[arg-type]
    assert p.path_form("/w/data") == "./data"
    assert p.path_form("/w") == "."
    assert p.path_form("/w/.v/lib") == "${VIRTUAL_ENV}/lib"
    assert p.path_form("/t/x") == "${TMPDIR:-/tmp}/x"
    assert p.path_form("/h/.cache") == "~/.cache"
    assert p.path_form("/etc/ssl") == "/etc/ssl"
