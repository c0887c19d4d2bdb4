from __future__ import annotations

from dataclasses import replace

import pytest

from hi_moe_lora.adapters import AdapterManifest, AdapterValidationError, check_policy
from hi_moe_lora.adapters.policy import base_models_match

MANIFEST = AdapterManifest(
    rank=16,
    alpha=32.0,
    target_modules=("q_proj",),
    variant="lora",
    base_model="/models/tiny-llama",
    weight_file="adapter_model.safetensors",
    tensor_count=2,
    sha256="0" * 64,
)


@pytest.mark.parametrize(
    ("adapter", "served", "match"),
    [
        ("/models/tiny-llama", "/models/tiny-llama", True),
        ("/models/tiny-llama/", "/models/tiny-llama", True),
        ("/models//x/../tiny-llama", " /models/./tiny-llama ", True),
        ("meta-llama/Llama-3-8B", "meta-llama/Llama-3-8B/", True),
        # full identity: the last path component alone decides nothing
        ("evil-org/model", "/models/model", False),
        ("/tmp/x/tiny-llama", "/other/tiny-llama", False),
        ("meta-llama/Llama-3-8B", "/cache/Llama-3-8B/", False),
        ("evil-org/Llama-3-8B", "meta-llama/Llama-3-8B", False),
        ("meta-llama/Llama-3-8B", "meta-llama/Llama-3-70B", False),
        ("/models/tiny-llama", "/models/tiny-llama-2", False),
        ("", "/models/x", False),
        ("", "", False),
    ],
)
def test_base_model_matching(adapter: str, served: str, match: bool) -> None:
    assert base_models_match(adapter, served) is match


def test_accepts_an_adapter_within_policy() -> None:
    check_policy(MANIFEST, max_rank=16, base_model="/models/tiny-llama/")


@pytest.mark.parametrize(
    ("manifest", "code"),
    [
        (replace(MANIFEST, rank=32), "rank_too_high"),
        (replace(MANIFEST, base_model="/models/other"), "base_model_mismatch"),
        (replace(MANIFEST, base_model="evil-org/tiny-llama"), "base_model_mismatch"),
        (replace(MANIFEST, base_model=None), "base_model_mismatch"),
    ],
)
def test_rejects(manifest: AdapterManifest, code: str) -> None:
    with pytest.raises(AdapterValidationError) as caught:
        check_policy(manifest, max_rank=16, base_model="/models/tiny-llama")
    assert caught.value.code == code
    assert "/models" not in caught.value.detail  # no local path reaches a client
