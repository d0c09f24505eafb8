"""The learning corpus (benchmarks/learning_corpus.py) in the test suite.

Each real program is learned once (``pysb run --learn``), its profile checked for tightness,
then run unchanged under every provider: a provider that is not available here is a skip
(a failure when ``PYSB_REQUIRE_PROVIDERS`` names it).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysb_core.testing import require_provider

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import learning_corpus as corpus

BY_NAME = {p.name: p for p in corpus.PROGRAMS}


@pytest.fixture(scope="module", params=sorted(BY_NAME))
def learned(request: pytest.FixtureRequest) -> Iterator[corpus.Learned]:
    """The program, learned once for every provider's run."""
    program = BY_NAME[request.param]
    root, env = corpus.make_project(program)
    try:
        with corpus._maybe_server(program) as url:
            if url:
                env["APP_URL"] = url
            yield corpus.learn(program, root, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_corpus_has_ten_shapes_or_more() -> None:
    assert len(corpus.PROGRAMS) >= 10
    assert len({p.shape for p in corpus.PROGRAMS}) == len(corpus.PROGRAMS)


def test_the_learned_profile_is_tight(learned: corpus.Learned) -> None:
    assert corpus.tightness(learned) == [], learned.profile
    assert "learned" in learned.learn_stderr


@pytest.mark.parametrize("provider", corpus.PROVIDERS)
def test_the_learned_profile_runs_unchanged(learned: corpus.Learned, provider: str) -> None:
    if provider != "subprocess":
        require_provider(provider)
    r = learned.run(provider)
    if provider == "firejail" and os.getuid() != 0 and learned.profile.get("network"):
        # firejail is set-uid root: only a root pysb can build the filtered namespace its
        # network rules need, so a normal user's run is refused, with pysb's reason and fix
        assert r.returncode == 125, r.stderr
        assert "needs root" in r.stderr and "bwrap or unshare" in r.stderr, r.stderr
        return
    assert r.returncode == 0, f"{learned.program.name} under {provider}:\n{r.stderr}"
    assert learned.program.prints in r.stdout, r.stdout


def test_the_table_marks_each_cell_and_replaces_itself(tmp_path: Path) -> None:
    result = {
        "providers": ["subprocess", "bwrap"],
        "programs": {
            "a": {
                "shape": "A",
                "tight": [],
                "cells": {"subprocess": {"status": "ok"}, "bwrap": {"status": "fails",
                                                                   "detail": "boom"}},
            },
            "b": {"shape": "B", "tight": ["expose-rw: . (never needed)"], "cells": {}},
        },
    }  # fmt: skip
    lines = corpus.markdown(result)
    assert "| a | A | yes | ✅ | ❌ |" in lines and "- a under bwrap: `boom`" in lines
    assert "| b | B | no: expose-rw: . (never needed) | — | — |" in lines
    doc = tmp_path / "learning.md"
    doc.write_text("# Learning\n\nintro\n")
    corpus.write_docs(doc, result)
    corpus.write_docs(doc, result)  # again: replaced, not appended
    text = doc.read_text()
    assert text.count(corpus.BEGIN) == 1 and text.startswith("# Learning\n\nintro\n")
