"""More random LoRA adapters for the Llama-3-8B-shaped random model (GPU kit benchmarks).

`make-random-llama.py` writes the model and its first adapters; the many-adapter rows of issue 20
(``--max-loras 64`` / ``128``) and the slot-churn run need more. This writes ``TARGET/a<i>`` for
every ``i`` below ``COUNT`` that is missing: random rank-``RANK`` A and B (std 0.01, as the kit's
own) on all seven projections of every layer, each adapter from its own seed, so every adapter
holds distinct weights. Drawn on the GPU when there is one (about 0.3 s an adapter, most of it
the write).
Usage: python benchmarks/kernels/make_lora_adapters.py MODEL TARGET COUNT [RANK]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

LAYERS, HIDDEN, KV_WIDTH, INTERMEDIATE = 32, 4096, 1024, 14336
#: projection -> (in, out) of the Llama-3-8B shape
PROJECTIONS = {
    "q_proj": (HIDDEN, HIDDEN),
    "k_proj": (HIDDEN, KV_WIDTH),
    "v_proj": (HIDDEN, KV_WIDTH),
    "o_proj": (HIDDEN, HIDDEN),
    "gate_proj": (HIDDEN, INTERMEDIATE),
    "up_proj": (HIDDEN, INTERMEDIATE),
    "down_proj": (INTERMEDIATE, HIDDEN),
}
STD = 0.01


def make_adapter(model: Path, target: Path, rank: int, seed: int) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator(device=device).manual_seed(10_000 + seed)

    def draw(*shape: int) -> torch.Tensor:
        values = torch.randn(*shape, device=device, generator=generator, dtype=torch.bfloat16)
        return (values * STD).cpu()

    tensors: dict[str, torch.Tensor] = {}
    for layer in range(LAYERS):
        for projection, (fan_in, fan_out) in PROJECTIONS.items():
            block = "mlp" if projection in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            stem = f"base_model.model.model.layers.{layer}.{block}.{projection}"
            tensors[f"{stem}.lora_A.weight"] = draw(rank, fan_in)
            tensors[f"{stem}.lora_B.weight"] = draw(fan_out, rank)
    target.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(target / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 2 * rank,
        "target_modules": list(PROJECTIONS),
        "base_model_name_or_path": str(model),
        "bias": "none",
        "task_type": "CAUSAL_LM",
    }
    (target / "adapter_config.json").write_text(json.dumps(config))


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__)
        return 2
    model, target, count = Path(argv[0]), Path(argv[1]), int(argv[2])
    rank = int(argv[3]) if len(argv) == 4 else 16
    began, written = time.perf_counter(), 0
    for index in range(count):
        directory = target / f"a{index}"
        if (directory / "adapter_model.safetensors").exists():
            continue
        make_adapter(model, directory, rank, seed=index)
        written += 1
        print(f"\r{written} adapters written", end="", flush=True)
    print(f"\n{count} adapters in {target} ({written} new, {time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
