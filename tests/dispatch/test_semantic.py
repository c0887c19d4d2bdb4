"""Tier 3's bookkeeping on a deterministic stand-in model."""

from __future__ import annotations

import pytest

from registry.dispatch.semantic import ExemplarBank
from tests.dispatch.conftest import WordsEmbedder

ROWS = (
    ("cooking", "boil the pasta in salted water"),
    ("gpu", "launch the kernel on the device"),
    ("cooking", "bake the bread in a hot oven"),
    ("gpu", "copy the buffer to the device memory"),
    ("gpu", "warp shuffle reduction on the device"),
)


def test_scores_per_domain_are_top_k_means() -> None:
    embedder = WordsEmbedder()
    bank = ExemplarBank(embedder, ROWS, top_k=2)
    assert len(bank) == 5
    scores = bank.domain_scores("copy memory to the device")
    assert scores["gpu"].score > scores["cooking"].score
    assert scores["gpu"].nearest == "copy the buffer to the device memory"
    top1 = ExemplarBank(WordsEmbedder(), ROWS, top_k=1).domain_scores("copy memory to the device")
    assert top1["gpu"].score >= scores["gpu"].score


def test_exemplars_are_encoded_once_at_construction() -> None:
    embedder = WordsEmbedder()
    bank = ExemplarBank(embedder, ROWS, top_k=3)
    assert len(embedder.indexed) == 1
    bank.domain_scores("x")
    bank.domain_scores("y")
    assert len(embedder.indexed) == 1
    assert embedder.queries == 2


def test_top_k_larger_than_a_domain() -> None:
    bank = ExemplarBank(WordsEmbedder(), (("only", "one sentence here"),), top_k=5)
    assert bank.domain_scores("one sentence here")["only"].score == pytest.approx(1.0)
