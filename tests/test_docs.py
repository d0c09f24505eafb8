"""The documentation keeps up with the code it describes."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from pysb_core import childhooks, hookspecs
from pysb_core.provider import Provider

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _hook_functions() -> list[Any]:
    """Every pluggy hookspec and every child-side function of the guard contract."""
    return [
        f
        for module in (hookspecs, childhooks)
        for n, f in inspect.getmembers(module, inspect.isfunction)
        if n.startswith("pysb_") and f.__module__ == module.__name__
    ]


def test_every_hook_is_documented_with_its_signature() -> None:
    page = (DOCS / "plugin-hooks.md").read_text()
    hooks = _hook_functions()
    assert len(hooks) >= 10
    for fn in hooks:
        sig = str(inspect.signature(fn)).replace("'", "")
        assert f"`{fn.__name__}{sig}`" in page, (
            f"{fn.__name__} is missing or outdated in docs/plugin-hooks.md"
        )


def test_every_hook_documents_each_parameter_and_its_result() -> None:
    for fn in _hook_functions():
        doc = inspect.getdoc(fn) or ""
        for name in inspect.signature(fn).parameters:
            assert f":param {name}:" in doc, f"{fn.__name__}: parameter {name} is undocumented"
        returns = inspect.signature(fn).return_annotation
        assert "Any" not in str(returns), f"{fn.__name__} returns Any"
        if returns not in ("None", None):
            assert ":return:" in doc, f"{fn.__name__}: its result is undocumented"


def test_the_child_side_functions_are_not_pluggy_hooks() -> None:
    """pluggy never calls them (the bootstrap does): they are no hookspec."""
    for name in childhooks.NAMES:
        assert not hasattr(hookspecs, name)
        assert getattr(childhooks, name).__dict__.get("pysb_spec") is None


def test_every_provider_method_is_documented() -> None:
    page = (DOCS / "writing-providers.md").read_text()
    public = [n for n, _ in inspect.getmembers(Provider) if not n.startswith("_")]
    for name in public:
        assert f"`{name}" in page, f"Provider.{name} is not documented in docs/writing-providers.md"


# ---------------------------------------------------------------------------------------
# Code blocks of the documentation run
# ---------------------------------------------------------------------------------------
#
# An HTML comment (invisible on GitHub and on the site) right before a fenced block says
# what to do with it:
#
#   <!-- doc-test: file NAME -->                  write the block as NAME
#   <!-- doc-test: run NAME [requires=PROVIDER] --> write it as NAME and run `python NAME`
#                                 [output]        ... and each `print(...)  # LINE` prints LINE
#   <!-- doc-test: console [requires=PROVIDER] --> run each `$ command` with bash; what
#                                                 follows it is its exact output
#   <!-- doc-test: skip REASON -->                a fragment, not meant to run
#
# The files and runs of one page share one project directory, in page order. Every
# ```python block must carry one of them, so a new example cannot be forgotten.

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402

from pysb_core.testing import BASE_ENV, require_provider  # noqa: E402

ROOT = DOCS.parent
PAGES = sorted([*DOCS.glob("*.md"), ROOT / "README.md"])
MARKER = re.compile(r"<!-- doc-test: (file|run|console|skip) ?(.*?) -->")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    action: str | None
    argument: str


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` with the doc-test marker right before it."""
    lines = page.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.fullmatch(previous.strip())
        out.append(
            Block(
                page,
                start + 1,
                fence.group(1),
                "\n".join(body) + "\n",
                marker.group(1) if marker else None,
                marker.group(2).strip() if marker else "",
            )
        )
        i += 1
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_is_run_or_says_why_not(page: Path) -> None:
    for block in blocks(page):
        if block.lang == "python":
            assert block.action, (
                f"{page.name}:{block.line}: put <!-- doc-test: file NAME -->, "
                "<!-- doc-test: run NAME --> or <!-- doc-test: skip REASON --> right before "
                "this python block (see tests/test_docs.py)"
            )
        if block.action == "skip":
            assert block.argument, f"{page.name}:{block.line}: say why the block does not run"


RUNNABLE = [p for p in PAGES if any(b.action in ("run", "console") for b in blocks(p))]


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: p.name)
def test_the_examples_of_the_page_run(page: Path, tmp_path: Path) -> None:
    ran = 0
    for block in blocks(page):
        if block.action not in ("file", "run", "console"):
            continue
        words = block.argument.split()
        name = words[0] if block.action != "console" else ""
        for option in words[1:] if name else words:
            key, _, value = option.partition("=")
            if key == "requires":
                require_provider(value)
        if block.action == "console":
            _run_console(block, tmp_path)
            ran += 1
            continue
        (tmp_path / name).write_text(block.code)
        if block.action == "file":
            continue
        # RAY_ADDRESS=local: a Ray example starts its own cluster, as on a user's machine,
        # instead of joining one another test run left alive (ray.init() otherwise
        # connects to the newest cluster in /tmp/ray, and refuses num_cpus= then).
        env = {**BASE_ENV, "PYTHONPATH": str(tmp_path), "RAY_ADDRESS": "local"}
        r = subprocess.run(
            [sys.executable, name],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        where = f"{page.name}:{block.line}"
        assert r.returncode == 0, f"{where}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        assert "Traceback" not in r.stderr, f"{where}: {r.stderr}"
        if "output" in words[1:]:
            # `print(...)  # LINE`: the page says what it prints; LINE must be printed
            printed = r.stdout.splitlines()
            for said in re.findall(r"^\s*print\(.*\)\s+# (.+)$", block.code, re.MULTILINE):
                assert said in printed, f"{where}: the page says it prints {said!r}:\n{r.stdout}"
        ran += 1
    assert ran


def _run_console(block: Block, cwd: Path) -> None:
    """Each ``$ command`` of the block, run with bash; its output must be the lines that
    follow it in the block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    assert steps, f"{block.page.name}:{block.line}: a console block without a $ command"
    env = {**BASE_ENV, "PATH": f"{Path(sys.executable).parent}:{BASE_ENV['PATH']}"}
    for command, expected in steps:
        r = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        where = f"{block.page.name}:{block.line}: $ {command}"
        assert r.returncode == 0, f"{where}: exit {r.returncode}\n{r.stdout}{r.stderr}"
        assert (r.stdout + r.stderr).splitlines() == expected, f"{where}\n{r.stdout}{r.stderr}"


def test_the_readme_example_fails_clearly_when_pasted_into_one_script(tmp_path: Path) -> None:
    """What the README warns about: a @sandbox function of the __main__ script."""
    readme = {b.argument.split()[0]: b for b in blocks(ROOT / "README.md") if b.action}
    tools, app = readme["tools.py"].code, readme["app.py"].code
    one = tools + re.sub(r"\btools\.(?!pysb)", "", app.replace("import tools\n", ""))
    (tmp_path / "one.py").write_text(one)
    (tmp_path / "tools.pysb.yaml").write_text(readme["tools.pysb.yaml"].code)
    r = subprocess.run(
        [sys.executable, "one.py"],
        cwd=tmp_path,
        env=dict(BASE_ENV),
        capture_output=True,
        text=True,
        timeout=180,
    )
    if "bwrap" in r.stderr and "unavailable" in r.stderr:
        pytest.skip("bwrap unavailable here")
    assert r.returncode != 0
    assert "SandboxError" in r.stderr and "__main__" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------
# The site: mkdocs-material, built with --strict
# ---------------------------------------------------------------------------------------


def _hooks():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_pages(item) for item in nav)) if nav else set()
    if isinstance(nav, dict):
        return set().union(*(_nav_pages(v) for v in nav.values()))
    return set()


def test_every_page_of_docs_is_in_the_nav() -> None:
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = _nav_pages(config["nav"])
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages - listed == set(), "add these pages to mkdocs.yml's nav"
    assert listed - pages == {"index.md"}, "nav names pages that do not exist"


def test_the_hook_reference_is_current() -> None:
    assert (DOCS / "plugin-hooks.md").read_text() == _hooks().hooks_page(), (
        "run python3 scripts/gen_hook_docs.py"
    )


def test_network_cell_follows_the_capabilities() -> None:
    cell = _hooks().network_cell
    assert cell({"tcp-host", "udp-host", "tcp-port"}).startswith("hosts, ports")
    assert cell({"tcp-port", "files"}).startswith("TCP ports only")
    assert cell({"env", "limits"}).startswith("nothing")


def test_requirements_table_has_a_row_per_provider_of_pysb_providers_json() -> None:
    hooks = _hooks()
    providers = hooks.providers_json()
    table = hooks.requirements_table(providers, {})
    rows = [line for line in table.splitlines() if line.startswith("| [`")]
    assert [re.match(r"\| \[`([^`]+)`", r).group(1) for r in rows] == [  # type: ignore[union-attr]
        p["name"] for p in providers
    ]
    for row, info in zip(rows, providers, strict=True):
        assert f"`{info['distribution']}`" in row
        assert ("unavailable" in row) == (not info["available"])
        # the root column: only firejail's network rules need a root pysb
        root = row.split(" | ")[3]
        assert ("network rules" in root) == (info["name"] == "firejail"), row
        assert root.startswith("for network rules") or root == "no", row


def test_home_page_links_to_pages_not_to_the_published_site() -> None:
    hooks = _hooks()
    page = hooks.home_page(f"see [x]({hooks.SITE_URL}profile/) and [y]({hooks.SITE_URL}cli/#a)")
    assert page == "see [x](profile.md) and [y](cli.md#a)"


@pytest.mark.slow
def test_the_site_builds_with_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        env={**BASE_ENV, "NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for page in DOCS.glob("*.md"):
        assert (site / page.stem / "index.html").is_file(), page.name
    home = (site / "index.html").read_text()
    assert "Shell completion" in home and 'href="profile/"' in home
    providers = (site / "providers" / "index.html").read_text()
    assert "Packages, privileges and network" in providers
    hooks = (site / "plugin-hooks" / "index.html").read_text()
    from pysb_core import hookspecs

    for name in dir(hookspecs):
        if name.startswith("pysb_"):
            assert name in hooks
