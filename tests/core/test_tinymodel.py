from __future__ import annotations

import json
from pathlib import Path

import torch

from hi_moe_lora.tinymodel import (
    LLAMA_PROJECTIONS,
    TinyAdapterSpec,
    TinyFleet,
    build_adapter,
    build_fleet,
)


def _logits(model_dir: Path, adapter_dir: Path | None, text: str) -> torch.Tensor:
    from peft import PeftModel
    from transformers import AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, str(adapter_dir))
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        logits: torch.Tensor = model(ids).logits
    return logits


def test_fleet_has_model_tokenizer_and_demo_adapters(tiny_fleet: TinyFleet) -> None:
    assert (tiny_fleet.model_dir / "model.safetensors").is_file()
    tokenizer_config = json.loads((tiny_fleet.model_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == "</s>"
    assert set(tiny_fleet.adapters) == {
        "python-lora-1.0.0",
        "python-lora-1.1.0",
        "math-lora-1.0.0",
        "docs-lora-1.0.0",
        "sql-lora-1.0.0",
    }
    config_path = tiny_fleet.adapters["python-lora-1.1.0"] / "adapter_config.json"
    config = json.loads(config_path.read_text())
    assert config["r"] == 16
    assert config["lora_alpha"] == 32
    assert config["peft_type"] == "LORA"
    assert set(config["target_modules"]) == set(LLAMA_PROJECTIONS)
    assert config["base_model_name_or_path"] == str(tiny_fleet.model_dir)


def test_chat_template_renders_a_generation_prompt(tiny_fleet: TinyFleet) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_fleet.model_dir))
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|user|>\nhello\n<|assistant|>\n"


def test_each_adapter_changes_the_model_output(tiny_fleet: TinyFleet) -> None:
    text = "def fibonacci(n):"
    base = _logits(tiny_fleet.model_dir, None, text)
    outputs = [
        _logits(tiny_fleet.model_dir, tiny_fleet.adapters[key], text)
        for key in ("python-lora-1.0.0", "python-lora-1.1.0")
    ]
    for adapted in outputs:
        assert not torch.allclose(adapted, base, atol=1e-3)
        assert not torch.equal(adapted.argmax(-1), base.argmax(-1))
    assert not torch.allclose(outputs[0], outputs[1], atol=1e-3)


def test_build_fleet_reuses_what_exists(tiny_fleet: TinyFleet) -> None:
    root = tiny_fleet.model_dir.parent
    stamp = (tiny_fleet.model_dir / "model.safetensors").stat().st_mtime_ns
    again = build_fleet(root)
    assert again.adapters == tiny_fleet.adapters
    assert (tiny_fleet.model_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_dora_adapter_carries_magnitude_vectors(tiny_fleet: TinyFleet, tmp_path: Path) -> None:
    from safetensors import safe_open

    target = build_adapter(
        tiny_fleet.model_dir,
        tmp_path / "dora",
        TinyAdapterSpec(rank=4, seed=5, target_modules=("q_proj",), use_dora=True),
    )
    assert json.loads((target / "adapter_config.json").read_text())["use_dora"] is True
    with safe_open(str(target / "adapter_model.safetensors"), "pt") as weights:
        names = list(weights.keys())
    assert any("lora_magnitude_vector" in name for name in names)
    assert all("q_proj" in name for name in names)
