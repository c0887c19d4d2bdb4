"""Tier 3's bookkeeping: exemplar rows per domain and a task's similarity to each domain.

Owns :class:`ExemplarBank`: the exemplar sentences of every domain in play, encoded once per
fleet change through an :class:`~registry.dispatch.embeddings.Embedder`, and
:meth:`ExemplarBank.domain_scores`, which compares one task with all of them (one query
encoding, one matrix-vector product) and reduces the similarities to one score per domain:
the mean of the ``top_k`` most similar exemplars (one lucky exemplar counts less than
several close ones). Imports only the standard library; the model lives behind the protocol.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from registry.dispatch.embeddings import Embedder, EmbeddingIndex

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DomainSimilarity:
    """A domain's tier-3 score and its closest exemplar."""

    domain: str
    score: float
    nearest: str


class ExemplarBank:
    """Encoded exemplars, grouped by domain (rows of one domain are contiguous)."""

    def __init__(self, embedder: Embedder, rows: Sequence[tuple[str, str]], top_k: int) -> None:
        ordered = sorted(enumerate(rows), key=lambda item: (item[1][0], item[0]))
        self._texts = [text for _, (_, text) in ordered]
        self._spans: list[tuple[str, int, int]] = []
        for position, (_, (domain, _)) in enumerate(ordered):
            if self._spans and self._spans[-1][0] == domain:
                name, start, _ = self._spans[-1]
                self._spans[-1] = (name, start, position + 1)
            else:
                self._spans.append((domain, position, position + 1))
        self._top_k = max(1, top_k)
        started = time.perf_counter()
        self._index: EmbeddingIndex = embedder.index(self._texts)
        logger.info(
            "tier 3: %d exemplars of %d domains encoded in %.2f s (%s)",
            len(self._texts),
            len(self._spans),
            time.perf_counter() - started,
            embedder.name,
        )

    def __len__(self) -> int:
        return len(self._texts)

    def domain_scores(self, text: str) -> dict[str, DomainSimilarity]:
        """Per domain: the mean similarity of its ``top_k`` closest exemplars to ``text``."""
        values = self._index.similarities(text)
        scores: dict[str, DomainSimilarity] = {}
        for domain, start, end in self._spans:
            span = values[start:end]
            best = max(range(len(span)), key=span.__getitem__)
            top = sorted(span, reverse=True)[: self._top_k]
            scores[domain] = DomainSimilarity(
                domain, sum(top) / len(top), self._texts[start + best]
            )
        return scores
