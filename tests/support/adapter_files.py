"""Real, small PEFT adapter directories for tests (stdlib only: struct + json).

``write_adapter`` writes ``adapter_config.json`` and an ``adapter_model.safetensors`` whose header
and data are laid out exactly as the safetensors format prescribes, with LoRA A/B tensors for
each target module of ``num_layers`` Llama layers.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEFAULT_BASE_MODEL = "/models/tiny-llama"


def safetensors_bytes(tensors: Mapping[str, tuple[int, ...]], *, seed: int = 0) -> bytes:
    """A safetensors file holding float32 tensors of the given shapes (random values)."""
    rng = random.Random(seed)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    chunks: list[bytes] = []
    offset = 0
    for name, shape in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        data = struct.pack(f"<{count}f", *(rng.uniform(-0.1, 0.1) for _ in range(count)))
        header[name] = {
            "dtype": "F32",
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    raw_header = json.dumps(header, separators=(",", ":")).encode()
    raw_header += b" " * (-len(raw_header) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(raw_header)) + raw_header + b"".join(chunks)


def lora_tensors(
    target_modules: Sequence[str],
    *,
    rank: int,
    hidden: int = 16,
    num_layers: int = 1,
    dora: bool = False,
    adalora: bool = False,
) -> dict[str, tuple[int, ...]]:
    """LoRA A/B shapes per target module (``dora``: and each module's magnitude vector;
    ``adalora``: AdaLoRA's A, E and B, named as PEFT saves them)."""
    tensors: dict[str, tuple[int, ...]] = {}
    for layer in range(num_layers):
        for module in target_modules:
            group = "mlp" if module.endswith(("gate_proj", "up_proj", "down_proj")) else "self_attn"
            prefix = f"base_model.model.model.layers.{layer}.{group}.{module}"
            if adalora:
                tensors[f"{prefix}.lora_A"] = (rank, hidden)
                tensors[f"{prefix}.lora_E"] = (rank, 1)
                tensors[f"{prefix}.lora_B"] = (hidden, rank)
                continue
            tensors[f"{prefix}.lora_A.weight"] = (rank, hidden)
            tensors[f"{prefix}.lora_B.weight"] = (hidden, rank)
            if dora:
                tensors[f"{prefix}.lora_magnitude_vector"] = (hidden,)
    return tensors


def adapter_config(
    *,
    rank: int = 8,
    alpha: float = 16,
    target_modules: Sequence[str] | str = ("q_proj", "v_proj"),
    base_model: str | None = DEFAULT_BASE_MODEL,
    use_dora: bool = False,
    peft_type: str = "LORA",
) -> dict[str, Any]:
    return {
        "peft_type": peft_type,
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "target_modules": target_modules
        if isinstance(target_modules, str)
        else list(target_modules),
        "base_model_name_or_path": base_model,
        "use_dora": use_dora,
        "bias": "none",
    }


def write_adapter(
    directory: Path,
    *,
    rank: int = 8,
    alpha: float = 16,
    target_modules: Sequence[str] = ("q_proj", "v_proj"),
    base_model: str | None = DEFAULT_BASE_MODEL,
    use_dora: bool = False,
    adalora: bool = False,
    seed: int = 0,
    config: Mapping[str, Any] | None = None,
) -> Path:
    """Write a valid PEFT LoRA adapter (``adalora``: an AdaLoRA one of ``init_r = rank``;
    ``config`` entries override the generated config)."""
    directory.mkdir(parents=True, exist_ok=True)
    body = adapter_config(
        rank=rank,
        alpha=alpha,
        target_modules=target_modules,
        base_model=base_model,
        use_dora=use_dora,
        peft_type="ADALORA" if adalora else "LORA",
    )
    if adalora:
        body["init_r"] = rank
    body.update(config or {})
    (directory / "adapter_config.json").write_text(json.dumps(body, indent=2))
    tensors = lora_tensors(target_modules, rank=rank, dora=use_dora, adalora=adalora)
    (directory / "adapter_model.safetensors").write_bytes(safetensors_bytes(tensors, seed=seed))
    return directory
