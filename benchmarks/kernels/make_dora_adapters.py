"""DoRA copies of the random adapters that `make-random-llama.py` writes (GPU kit benchmarks).

Each adapter ``SOURCE/a<i>`` becomes ``TARGET/a<i>``: the same A and B, ``use_dora`` in its
config, and a magnitude vector per module (the random model's row norms, about 0.02 * sqrt(in)
for its weights of std 0.02, times a factor in [0.8, 1.2): a scale that visibly changes the
output). Used by ``gpu_e2e.sh`` with ``ADAPTERS=TARGET`` to time DoRA against plain LoRA.
Usage: python benchmarks/kernels/make_dora_adapters.py SOURCE TARGET
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHT_STD = 0.02


def make_dora(source: Path, target: Path, seed: int) -> None:
    tensors = load_file(str(source / "adapter_model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    out = dict(tensors)
    for name, lora_a in tensors.items():
        if not name.endswith(".lora_A.weight"):
            continue
        stem = name.removesuffix(".lora_A.weight")
        rows = tensors[f"{stem}.lora_B.weight"].shape[0]
        norm = WEIGHT_STD * lora_a.shape[1] ** 0.5
        factor = 0.8 + 0.4 * torch.rand(rows, generator=generator)
        out[f"{stem}.lora_magnitude_vector"] = (norm * factor).to(lora_a.dtype)
    target.mkdir(parents=True, exist_ok=True)
    save_file(out, str(target / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = json.loads((source / "adapter_config.json").read_text())
    config["use_dora"] = True
    (target / "adapter_config.json").write_text(json.dumps(config))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    for index, adapter in enumerate(sorted(p for p in source.iterdir() if p.is_dir())):
        make_dora(adapter, target / adapter.name, seed=index)
    print(f"DoRA adapters in {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
