"""Tensor names and shapes, on their own and against a Llama-like base model's config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hi_moe_lora.adapters.architecture import (
    ModelConfigError,
    ModelShape,
    check_against_model,
    check_tensor_names,
    load_model_shape,
    model_shape_from_config,
)
from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.safetensors_header import TensorInfo
from tests.support.adapter_files import lora_tensors

#: the tiny fleet's model (hi_moe_lora.tinymodel): GQA, explicit head_dim
TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "vocab_size": 512,
}
TINY = model_shape_from_config(TINY_CONFIG)
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _infos(shapes: dict[str, tuple[int, ...]]) -> list[TensorInfo]:
    return [TensorInfo(name, "F32", shape, 0, 0) for name, shape in shapes.items()]


def _tiny_adapter(rank: int = 8) -> dict[str, tuple[int, ...]]:
    assert TINY is not None
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in range(2):
        for module in ALL:
            dims = TINY.linear(module)
            assert dims is not None
            group = "self_attn" if module in ALL[:4] else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{group}.{module}"
            shapes[f"{prefix}.lora_A.weight"] = (rank, dims[0])
            shapes[f"{prefix}.lora_B.weight"] = (dims[1], rank)
    return shapes


def _code(shapes: dict[str, tuple[int, ...]], targets: tuple[str, ...] = ALL) -> str:
    assert TINY is not None
    tensors = _infos(shapes)

    def both() -> None:
        check_tensor_names(tensors, target_modules=targets, is_regex=False, rank=8)
        check_against_model(tensors, target_modules=targets, is_regex=False, model=TINY)

    with pytest.raises(AdapterValidationError) as caught:
        both()
    return caught.value.code


def test_shape_of_the_tiny_model() -> None:
    assert ModelShape("llama", 128, 256, 2, 2, 1, 64, 512) == TINY
    assert TINY.linear("k_proj") == (128, 64)
    assert TINY.linear("o_proj") == (128, 128)
    assert TINY.linear("down_proj") == (256, 128)
    assert TINY.linear("c_attn") is None


def test_a_matching_adapter_passes() -> None:
    assert TINY is not None
    tensors = _infos(_tiny_adapter())
    check_tensor_names(tensors, target_modules=ALL, is_regex=False, rank=8)
    check_against_model(tensors, target_modules=ALL, is_regex=False, model=TINY)
    regex = (r"model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj",)
    check_tensor_names(tensors, target_modules=regex, is_regex=True, rank=8)
    check_against_model(tensors, target_modules=regex, is_regex=True, model=TINY)


def test_wrong_shapes() -> None:
    shapes = _tiny_adapter()
    shapes["base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"] = (128, 8)
    assert _code(shapes) == "tensor_shape_mismatch"  # k_proj is GQA: 1 kv head * 64
    # the generic default of tests/support (hidden 16) does not fit this model
    assert _code(lora_tensors(("q_proj", "v_proj"), rank=8)) == "tensor_shape_mismatch"


def test_rank_mismatch_between_a_and_b() -> None:
    shapes = _tiny_adapter()
    shapes["base_model.model.model.layers.0.mlp.up_proj.lora_B.weight"] = (256, 4)
    assert _code(shapes) == "tensor_shape_mismatch"


@pytest.mark.parametrize(
    "name",
    [
        "base_model.model.model.layers.0.self_attn.q_proj.weight",  # a base weight
        "base_model.model.model.layers.0.self_attn.q_proj.lora_C.weight",
        "model.layers.0.self_attn.q_proj.lora_A.weight",  # no PEFT prefix
        "__evil__",
    ],
)
def test_unknown_tensors(name: str) -> None:
    shapes = _tiny_adapter()
    shapes[name] = (8, 128)
    assert _code(shapes) == "unknown_tensor"


def test_tensors_of_a_module_target_modules_does_not_name() -> None:
    assert _code(_tiny_adapter(), targets=("q_proj", "k_proj")) == "unknown_tensor"


def test_modules_the_model_lacks() -> None:
    prefix = "base_model.model.model.layers.0.self_attn.c_attn"
    shapes = {f"{prefix}.lora_A.weight": (8, 128), f"{prefix}.lora_B.weight": (384, 8)}
    assert _code(shapes, targets=("c_attn",)) == "unknown_module"
    beyond = {  # layer 2 of a 2-layer model
        "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight": (8, 128),
        "base_model.model.model.layers.2.self_attn.q_proj.lora_B.weight": (128, 8),
    }
    assert _code(beyond, targets=("q_proj",)) == "unknown_module"
    wrong_block = {
        "base_model.model.model.layers.0.mlp.q_proj.lora_A.weight": (8, 128),
        "base_model.model.model.layers.0.mlp.q_proj.lora_B.weight": (128, 8),
    }
    assert _code(wrong_block, targets=("q_proj",)) == "unknown_module"


def test_load_model_shape(tmp_path: Path) -> None:
    assert load_model_shape("meta-llama/Llama-3-8B") is None  # a hub id: nothing local
    assert load_model_shape(str(tmp_path / "missing")) is None
    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))
    assert load_model_shape(str(tmp_path)) == TINY
    (tmp_path / "config.json").write_text(json.dumps({**TINY_CONFIG, "model_type": "gpt2"}))
    assert load_model_shape(str(tmp_path)) is None  # not Llama-like: adapter-level checks only
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(ModelConfigError):
        load_model_shape(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({**TINY_CONFIG, "hidden_size": "big"}))
    with pytest.raises(ModelConfigError):
        load_model_shape(str(tmp_path))


def _dora_code(shapes: dict[str, tuple[int, ...]], targets: tuple[str, ...] = ALL) -> str:
    with pytest.raises(AdapterValidationError) as caught:
        check_tensor_names(
            _infos(shapes), target_modules=targets, is_regex=False, rank=8, dora=True
        )
    return caught.value.code


def _with_magnitudes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    out = dict(shapes)
    for name, shape in shapes.items():
        if name.endswith(".lora_B.weight"):
            out[name.removesuffix(".lora_B.weight") + ".lora_magnitude_vector"] = (shape[0],)
    return out


def test_dora_needs_a_magnitude_per_module_and_only_with_use_dora() -> None:
    assert TINY is not None
    dora = _with_magnitudes(_tiny_adapter())
    tensors = _infos(dora)
    check_tensor_names(tensors, target_modules=ALL, is_regex=False, rank=8, dora=True)
    check_against_model(tensors, target_modules=ALL, is_regex=False, model=TINY)
    # magnitudes without use_dora, use_dora without magnitudes
    with pytest.raises(AdapterValidationError, match="does not say use_dora") as caught:
        check_tensor_names(tensors, target_modules=ALL, is_regex=False, rank=8)
    assert caught.value.code == "unsupported_variant"
    missing = dict(dora)
    del missing["base_model.model.model.layers.1.mlp.down_proj.lora_magnitude_vector"]
    assert _dora_code(missing) == "unsupported_variant"
    # a magnitude of the wrong length, against the model
    wrong = dict(dora)
    wrong["base_model.model.model.layers.0.self_attn.k_proj.lora_magnitude_vector"] = (128,)
    assert _code(wrong) in ("tensor_shape_mismatch", "unsupported_variant")


def test_dora_on_the_embeddings_or_lm_head_is_refused() -> None:
    embed = {
        "base_model.model.model.embed_tokens.lora_embedding_A": (8, 512),
        "base_model.model.model.embed_tokens.lora_embedding_B": (128, 8),
        "base_model.model.model.embed_tokens.lora_magnitude_vector": (128,),
    }
    assert _dora_code(embed, targets=("embed_tokens",)) == "unsupported_variant"
    head = {
        "base_model.model.lm_head.lora_A.weight": (8, 128),
        "base_model.model.lm_head.lora_B.weight": (512, 8),
        "base_model.model.lm_head.lora_magnitude_vector": (512,),
    }
    with pytest.raises(AdapterValidationError, match="DoRA on 'lm_head' is not supported"):
        check_tensor_names(
            _infos(head), target_modules=("lm_head",), is_regex=False, rank=8, dora=True
        )
