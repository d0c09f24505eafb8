"""No module of more than ~400 lines without a reason written at its top (issue 29 #1).

A long module must say why its parts belong together: a paragraph starting
``Why one module:`` in its module docstring (docs/architecture.md, "Rooms and layers"). The
docstring is read with :mod:`ast`, never imported: sealed guard code and start-path modules
are checked without running them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Above this many lines a module needs its reason.
MAX_LINES = 400
MARK = "Why one module:"


def _modules() -> list[Path]:
    """Every module of pysb_core and of each plugin's ``src/`` (tests are not modules here)."""
    found = sorted((ROOT / "pysb_core").rglob("*.py"))
    found += sorted(ROOT.glob("plugins/*/src/**/*.py"))
    return [p for p in found if "tests" not in p.relative_to(ROOT).parts]


def _has_reason(source: str) -> bool:
    """Whether the module docstring holds a paragraph ``Why one module: <some text>``."""
    doc = ast.get_docstring(ast.parse(source))
    if not doc:
        return False
    paragraphs = (p.strip() for p in doc.split("\n\n"))
    return any(p.startswith(MARK) and len(p) > len(MARK) + 20 for p in paragraphs)


def unexplained(paths: list[Path]) -> list[str]:
    """``path (N lines)`` of each module over :data:`MAX_LINES` lines without its reason."""
    bad = []
    for path in paths:
        source = path.read_text(encoding="utf-8")
        lines = len(source.splitlines())
        if lines > MAX_LINES and not _has_reason(source):
            name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            bad.append(f"{name} ({lines} lines)")
    return bad


def test_every_long_module_says_why_it_is_one_module() -> None:
    modules = _modules()
    # the scan reaches the core and every plugin (an empty glob would pass vacuously)
    assert ROOT / "pysb_core" / "__init__.py" in modules
    for plugin in (ROOT / "plugins").iterdir():
        if (plugin / "src").is_dir():
            assert any(plugin in p.parents for p in modules), plugin
    bad = unexplained(modules)
    assert not bad, (
        f"modules over {MAX_LINES} lines need a paragraph starting {MARK!r} at the end of "
        "their module docstring saying why their parts belong together:\n" + "\n".join(bad)
    )


def test_the_check_sees_a_missing_or_empty_reason(tmp_path: Path) -> None:
    body = "x = 1\n" * (MAX_LINES + 1)
    cases = {
        "short.py": ('"""Short."""\n' + "x = 1\n" * 10, False),
        "no_doc.py": (body, True),
        "no_reason.py": ('"""Long, no reason."""\n' + body, True),
        "empty_reason.py": ('"""Long.\n\nWhy one module:\n"""\n' + body, True),
        "in_comment.py": ('"""Long."""\n# Why one module: said in a comment only\n' + body, True),
        "reason.py": (
            '"""Long.\n\nWhy one module: its parts share one state machine.\n"""\n' + body,
            False,
        ),
    }
    for name, (source, _) in cases.items():
        (tmp_path / name).write_text(source)
    found = unexplained([tmp_path / name for name in cases])
    flagged = {line.split(" ")[0].rsplit("/", 1)[-1] for line in found}
    assert flagged == {name for name, (_, bad) in cases.items() if bad}
