"""The lean BERT forward equals the full model."""

from __future__ import annotations

from types import SimpleNamespace

from registry.dispatch.bert import lean_encoder
from registry.dispatch.embeddings import Embedder, MiniLMEmbedder


def test_other_architectures_are_declined() -> None:
    assert lean_encoder(object()) is None
    config = SimpleNamespace(model_type="roberta", hidden_act="gelu")
    assert lean_encoder(SimpleNamespace(config=config)) is None


def test_lean_forward_matches_the_model(minilm: Embedder) -> None:
    assert isinstance(minilm, MiniLMEmbedder)
    import torch

    model = minilm._model
    tokenizer = minilm._tokenizer
    encode = lean_encoder(model)
    assert encode is not None
    for text in ("x", "why does my CUDA kernel hang on the second launch? " * 3):
        batch = tokenizer([text], return_tensors="pt")
        with torch.inference_mode():
            hidden = model(**batch).last_hidden_state[0]
            expected = torch.nn.functional.normalize(hidden.mean(dim=0), dim=0)
            got = encode(batch["input_ids"][0])
        assert float((got - expected).abs().max()) < 1e-5
