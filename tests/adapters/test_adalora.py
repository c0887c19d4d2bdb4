"""AdaLoRA adapters converted into plain LoRA (``hi_moe_lora.adapters.adalora``).

The converted adapter, loaded by PEFT as a plain LoRA adapter, must give the same logits as the
AdaLoRA original loaded by PEFT (its own loader, rank pattern and scaling included), on the tiny
model in float32; broken AdaLoRA checkpoints are refused with their reason and left untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from hi_moe_lora.adapters import inspect_adapter
from hi_moe_lora.adapters.adalora import (
    ORIGINAL_DIR,
    RECORD_FILE,
    convert_adalora,
    is_adalora,
)
from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.tinymodel import TinyAdapterSpec, TinyFleet, build_adapter

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


@pytest.fixture(scope="module")
def adalora_dir(tiny_fleet: TinyFleet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("adalora") / "adapter"
    return build_adapter(
        tiny_fleet.model_dir, target, TinyAdapterSpec(rank=8, alpha=16, seed=5, adalora=True)
    )


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(source, target)
    return target


def _logits(model_dir: Path, adapter_dir: Path) -> torch.Tensor:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    ids = torch.tensor([[5, 17, 42, 99, 7, 300, 12, 64]])
    with torch.no_grad():
        logits: torch.Tensor = model(input_ids=ids).logits[0]
    return logits


def test_is_adalora_reads_the_peft_type(adalora_dir: Path, tmp_path: Path) -> None:
    assert is_adalora(adalora_dir)
    assert not is_adalora(tmp_path)  # no config
    (tmp_path / CONFIG).write_text(json.dumps({"peft_type": "LORA"}))
    assert not is_adalora(tmp_path)
    (tmp_path / CONFIG).write_text("{not json")
    assert not is_adalora(tmp_path)


def test_converted_adapter_gives_peft_adalora_logits(
    tiny_fleet: TinyFleet, adalora_dir: Path, tmp_path: Path
) -> None:
    converted = _copy(adalora_dir, tmp_path)
    result = convert_adalora(converted)

    want = _logits(tiny_fleet.model_dir, adalora_dir)
    got = _logits(tiny_fleet.model_dir, converted)
    base = _logits_of_base(tiny_fleet.model_dir)
    assert float((want - base).abs().max()) > 1e-2  # the adapter changes the logits
    assert float((got - want).abs().max()) <= 1e-4

    config = json.loads((converted / CONFIG).read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == (
        "LORA",
        result.rank,
        result.rank,
    )
    original = json.loads((adalora_dir / CONFIG).read_text())
    pattern = original["rank_pattern"]
    assert result.rank == max(sum(kept) for kept in pattern.values())
    assert sum(result.effective_ranks.values()) < len(pattern) * original["init_r"]  # pruned
    assert sorted(result.effective_ranks.values()) == sorted(sum(k) for k in pattern.values())
    assert result.max_relative_error <= 1e-5
    manifest = inspect_adapter(converted)
    assert (manifest.variant, manifest.rank) == ("lora", result.rank)
    # the original is kept beside the converted files, byte for byte, with the record
    for name in (CONFIG, WEIGHTS):
        assert (converted / ORIGINAL_DIR / name).read_bytes() == (adalora_dir / name).read_bytes()
    record = json.loads((converted / RECORD_FILE).read_text())
    assert record["rank"] == result.rank
    assert record["init_r"] == original["init_r"]


def _logits_of_base(model_dir: Path) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        logits: torch.Tensor = base(
            input_ids=torch.tensor([[5, 17, 42, 99, 7, 300, 12, 64]])
        ).logits[0]
    return logits


def test_zero_singular_values_left_in_a_checkpoint_are_dropped(
    adalora_dir: Path, tmp_path: Path
) -> None:
    """A checkpoint saved without a rank pattern keeps its pruned rows, with zero singular
    values: they are dropped from the converted rank."""
    source = _copy(adalora_dir, tmp_path)
    tensors = load_file(str(source / WEIGHTS))
    name = next(n for n in tensors if n.endswith("lora_E"))
    rows = tensors[name].shape[0]
    stem = name.removesuffix(".lora_E")
    tensors[name] = torch.cat([tensors[name], torch.zeros(2, 1)])
    tensors[f"{stem}.lora_A"] = torch.cat(
        [tensors[f"{stem}.lora_A"], torch.ones(2, tensors[f"{stem}.lora_A"].shape[1])]
    )
    tensors[f"{stem}.lora_B"] = torch.cat(
        [tensors[f"{stem}.lora_B"], torch.ones(tensors[f"{stem}.lora_B"].shape[0], 2)], dim=1
    )
    save_file(tensors, str(source / WEIGHTS))

    result = convert_adalora(source)

    assert result.pruned_rows == 2
    assert result.effective_ranks[stem] == rows


def _broken(adalora_dir: Path, tmp_path: Path, *, config: dict[str, object] | None = None,
            drop: str | None = None, zero_singular: bool = False) -> Path:  # fmt: skip
    source = _copy(adalora_dir, tmp_path)
    if config is not None:
        current = json.loads((source / CONFIG).read_text())
        (source / CONFIG).write_text(json.dumps(current | config))
    if drop is not None or zero_singular:
        tensors = load_file(str(source / WEIGHTS))
        if drop is not None:
            del tensors[next(n for n in tensors if n.endswith(drop))]
        if zero_singular:
            tensors = {
                n: torch.zeros_like(t) if n.endswith("lora_E") else t for n, t in tensors.items()
            }
        save_file(tensors, str(source / WEIGHTS))
    return source


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        ({"drop": "lora_E"}, "tensor_shape_mismatch", "lacks lora_E"),
        ({"zero_singular": True}, "unsupported_variant", "every singular value is zero"),
        ({"config": {"fan_in_fan_out": True}}, "unsupported_variant", "fan_in_fan_out"),
        ({"config": {"modules_to_save": ["lm_head"]}}, "unsupported_variant", "modules_to_save"),
        ({"config": {"init_r": 0}}, "malformed_config", "init_r"),
        ({"config": {"lora_alpha": "high"}}, "malformed_config", "lora_alpha"),
    ],
)
def test_broken_adalora_is_refused_and_left_as_it_was(
    adalora_dir: Path, tmp_path: Path, change: dict[str, object], code: str, words: str
) -> None:
    source = _broken(adalora_dir, tmp_path, **change)  # type: ignore[arg-type]
    before = {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()}

    with pytest.raises(AdapterValidationError) as caught:
        convert_adalora(source)

    assert caught.value.code == code
    assert words in caught.value.detail
    assert {p.name: p.read_bytes() for p in source.iterdir() if p.is_file()} == before
    assert not (source / ORIGINAL_DIR).exists()


def test_an_unknown_tensor_is_named(adalora_dir: Path, tmp_path: Path) -> None:
    source = _copy(adalora_dir, tmp_path)
    tensors = load_file(str(source / WEIGHTS))
    tensors["base_model.model.model.layers.0.mlp.up_proj.bias"] = torch.zeros(4)
    save_file(tensors, str(source / WEIGHTS))

    with pytest.raises(AdapterValidationError) as caught:
        convert_adalora(source)

    assert caught.value.code == "unknown_tensor"
    assert "up_proj.bias" in caught.value.detail
