"""The learning corpus (benchmarks/learning_corpus.py) in the test suite.

Each real program is learned once (``pysb run --learn``), its profile checked for tightness,
then run unchanged under every provider: a provider that is not available here is a skip
(a failure when ``PYSB_REQUIRE_PROVIDERS`` names it).
"""

from __future__ import annotations

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
    assert r.returncode == 0, f"{learned.program.name} under {provider}:\n{r.stderr}"
    assert learned.program.prints in r.stdout, r.stdout
