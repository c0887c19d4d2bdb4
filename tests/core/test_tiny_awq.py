"""The AWQ copy of the tiny model: quantization, AutoAWQ's packing, the dequantized twin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hi_moe_lora.tiny_awq import (
    AWQ_PACK_ORDER,
    build_awq_pair,
    dequantize,
    pack,
    quantize,
    unpack,
)
from hi_moe_lora.tinymodel import TinyFleet


def test_levels_stay_within_half_a_step_of_the_weight() -> None:
    weight = torch.randn(64, 96, generator=torch.Generator().manual_seed(0))
    levels, zeros, scales = quantize(weight, group_size=32)
    assert levels.shape == (96, 64)
    assert zeros.shape == scales.shape == (3, 64)
    assert int(levels.min()) >= 0
    assert int(levels.max()) <= 15
    step = scales.to(torch.float32).repeat_interleave(32, dim=0).T  # [out, in]
    error = (dequantize(levels, zeros, scales, 32) - weight).abs()
    assert bool((error <= step / 2 + 1e-6).all())


def test_packing_follows_autoawq_order_and_round_trips() -> None:
    values = torch.arange(16, dtype=torch.int32).remainder(16).reshape(2, 8)
    words = pack(values)
    assert words.dtype == torch.int32
    assert words.shape == (2, 1)
    # nibble i of a word holds output column AWQ_PACK_ORDER[i]
    first = int(words[0, 0]) & 0xFFFFFFFF
    assert [(first >> (4 * i)) & 15 for i in range(8)] == [
        int(values[0, c]) for c in AWQ_PACK_ORDER
    ]
    random = torch.randint(0, 16, (5, 32), dtype=torch.int32)
    assert torch.equal(unpack(pack(random)), random)


def test_a_shape_that_does_not_group_is_refused() -> None:
    with pytest.raises(ValueError, match="groups of 32"):
        quantize(torch.zeros(8, 48), group_size=32)


def test_the_pair_holds_a_vllm_awq_checkpoint_and_its_weights(
    tiny_fleet: TinyFleet, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    pair = build_awq_pair(tiny_fleet.model_dir, tmp_path)
    config = json.loads((pair.awq_dir / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "awq"
    assert (pair.awq_dir / "tokenizer.json").is_file()
    awq = load_file(str(pair.awq_dir / "model.safetensors"))
    twin = load_file(str(pair.dequantized_dir / "model.safetensors"))
    original = load_file(str(tiny_fleet.model_dir / "model.safetensors"))
    stem = "model.layers.0.self_attn.q_proj"
    assert f"{stem}.weight" not in awq
    assert awq[f"{stem}.qweight"].dtype == torch.int32
    served = dequantize(
        unpack(awq[f"{stem}.qweight"]), unpack(awq[f"{stem}.qzeros"]), awq[f"{stem}.scales"], 32
    )
    assert torch.equal(twin[f"{stem}.weight"], served)
    assert float((served - original[f"{stem}.weight"]).abs().max()) < 0.1
    # reused, not rebuilt
    stamp = (pair.awq_dir / "model.safetensors").stat().st_mtime_ns
    assert build_awq_pair(tiny_fleet.model_dir, tmp_path) == pair
    assert (pair.awq_dir / "model.safetensors").stat().st_mtime_ns == stamp
