"""Property test of the learning writer over many hand-written profile shapes.

For any mix of block lists, flow lists, empty/implicit-null keys, single scalars, absent
sections and trailing comments, merging learned rules must: keep every comment, give a
file that parses to the union of old and new values (old first, no duplicates), and be a
no-op the second time.
"""

from __future__ import annotations

import os
import tempfile

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pysb_core.profile.learning import LearnedProfile
from pysb_core.profile.writer import merge_learned

NAMES = ["json", "os", "re", "yaml", "numpy", "ctypes", "http", "email"]
RULES = [f"allow tcp host{i}.example 443 out" for i in range(5)]
DIRS = [f"/p/d{i}" for i in range(6)]
ENVS = ["HOME", "TERM", "LANG", "A_B", "X1"]
STYLES = ["absent", "block", "flow", "flow-empty", "null", "scalar", "tilde"]

values = {
    "imports": st.lists(st.sampled_from(NAMES), unique=True, max_size=4),
    "network": st.lists(st.sampled_from(RULES), unique=True, max_size=3),
    "expose-ro": st.lists(st.sampled_from(DIRS), unique=True, max_size=3),
}


def render_list(key: str, items: list[str], style: str, indent: str, comment: str) -> list[str]:
    c = f"  # {comment}" if comment else ""
    quoted = [f'"{v}"' if " " in v else v for v in items]
    if style == "absent":
        return []
    if style == "null" or (not items and style in ("block", "scalar")):
        return [f"{indent}{key}:{c}"]
    if style == "tilde":
        return [f"{indent}{key}: ~{c}"]
    if style == "flow-empty" or (style == "flow" and not items):
        return [f"{indent}{key}: []{c}"]
    if style == "flow":
        return [f"{indent}{key}: [{', '.join(quoted)}]{c}"]
    if style == "scalar" and len(items) == 1:
        return [f"{indent}{key}: {quoted[0]}{c}"]
    lines = [f"{indent}{key}:{c}"]
    for i, v in enumerate(quoted):
        lines.append(f"{indent}  - {v}" + (f"  # item {i} {comment}" if comment else ""))
    return lines


def existing_values(style: str, items: list[str]) -> list[str]:
    if style in ("absent", "null", "tilde", "flow-empty"):
        return []
    if style == "scalar" and len(items) != 1:
        return items if style == "block" or items else []
    return items


@st.composite
def profiles(draw):
    lines = ["# hand-written header", "version: 1  # v"]
    expected: dict[str, list[str]] = {}
    order = draw(st.permutations(["imports", "network", "files", "env"]))
    for section in order:
        comment = draw(st.sampled_from(["", "note", "keep me"]))
        style = draw(st.sampled_from(STYLES))
        if section == "files":
            items = draw(values["expose-ro"])
            if style == "absent":
                expected["expose-ro"] = []
                continue
            sub = render_list("expose-ro", items, style, "  ", comment)
            lines += ["files:  # files section", *sub] if sub else []
            expected["expose-ro"] = existing_values(style, items) if sub else []
        elif section == "env":
            names = draw(st.lists(st.sampled_from(ENVS), unique=True, max_size=3))
            flow = draw(st.booleans())
            if not names and draw(st.booleans()):
                expected["env"] = []
                continue
            if flow:
                lines.append("env: {" + ", ".join(f"{n}: v" for n in names) + "}  # env")
            else:
                lines.append("env:  # env")
                lines += [f"  {n}: v  # {n}" for n in names]
                if not names:
                    lines[-1] = "env: {}  # env"
            expected["env"] = names
        else:
            items = draw(values[section])
            lines += render_list(section, items, style, "", comment)
            expected[section] = existing_values(style, items)
    lines.append("# trailing comment")
    return "\n".join(lines) + "\n", expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=profiles(),
    new_imports=st.lists(st.sampled_from(NAMES), unique=True, max_size=4),
    new_rules=st.lists(st.sampled_from(RULES), unique=True, max_size=3),
    new_dirs=st.lists(st.sampled_from(DIRS), unique=True, max_size=3),
    new_env=st.lists(st.sampled_from(ENVS), unique=True, max_size=3),
)
def test_merge_properties(profile, new_imports, new_rules, new_dirs, new_env) -> None:
    text, expected = profile
    learned = LearnedProfile(cwd="/", environ={})
    for name in new_imports:
        learned.add("imports", None, name, group="standard library")
    for rule in new_rules:
        learned.add("network", None, rule, comment="# learned")
    for d in new_dirs:
        learned.add("files", "expose-ro", d, comment="read")
    for n in new_env:
        learned.add("env", None, (n, "${" + n + "}"))

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.yaml")
        with open(path, "w") as f:
            f.write(text)
        merge_learned(path, learned)
        with open(path) as f:
            merged = f.read()
        data = yaml.safe_load(merged) or {}

        for line in text.splitlines():  # every comment survives
            if "#" in line:
                assert line[line.index("#") :] in merged, (line, merged)

        def union(old: list[str], new: list[str]) -> list[str]:
            return old + [v for v in new if v not in old]

        got = data.get("imports") or []
        assert (got if isinstance(got, list) else [got]) == union(
            expected.get("imports", []), new_imports
        ), merged
        got = data.get("network") or []
        assert (got if isinstance(got, list) else [got]) == union(
            expected.get("network", []), new_rules
        ), merged
        files = data.get("files") or {}
        got = files.get("expose-ro") or []
        assert (got if isinstance(got, list) else [got]) == union(
            expected.get("expose-ro", []), new_dirs
        ), merged
        assert list((data.get("env") or {}).keys()) == union(expected.get("env", []), new_env)

        # learning the same again changes nothing
        summary = merge_learned(path, learned)
        with open(path) as f:
            assert f.read() == merged
        assert "nothing new" in summary or merged == text
