"""DoRA and AdaLoRA through the whole product on a GPU (issue 16, "done when").

Starts the embedded stack (control plane on SQLite + vLLM with our plugins) on ``--model``,
registers a DoRA adapter, an AdaLoRA adapter (made here from a plain LoRA adapter's A and B
with random singular values, a third of them pruned, as AdaLoRA's allocator leaves them) and a
plain LoRA adapter through the REST API (``ControlPlaneClient``), then asks each of them and the
base model through the stock ``openai`` client:

1. all at once (mixed in vLLM's batches, as specialists are served);
2. one at a time, and the DoRA and LoRA adapters once more straight from vLLM, loaded from their
   original files under other names (``/v1/load_lora_adapter``): the control plane's answer must
   equal vLLM's own, token for token (the same weights, one request in the batch).

Correctness of the numbers themselves is shown elsewhere (the CPU tests against PEFT, the
teacher-forced probe against the float64 reference in benchmarks/README.md); this shows the
path: registration (AdaLoRA converted and checked against PEFT's layer), the resolver, our
kernels, and the front door, on the GPU. Writes a JSON summary to ``--out``; exits 1 if an
answer is missing, an adapter's answers equal the base model's, or a sequential answer differs
from vLLM's own.

Usage (GPU kit, after make-random-llama.py and make_dora_adapters.py)::

    python3 benchmarks/kernels/gpu_rest_check.py --model /tmp/m8b --lora /tmp/m8b-adapters/a1 \\
        --dora /tmp/m8b-dora/a0 --out $OUT/rest_check.json
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.control_api import ControlPlaneClient
from hi_moe_lora.tinymodel import pin_base_model

logger = logging.getLogger(__name__)

PROMPTS = ("def fibonacci(n):", "SELECT id FROM users WHERE")
MAX_TOKENS = 24


def make_adalora(lora_dir: Path, target: Path, seed: int = 5) -> Path:
    """An AdaLoRA adapter (``peft_type: ADALORA``) from a LoRA adapter's A and B: singular
    values drawn in [0.5, 1.5), about a third of each module's set to zero (pruned)."""
    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((lora_dir / "adapter_config.json").read_text())
    tensors = load_file(str(lora_dir / "adapter_model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    rank = 0
    for name, tensor in tensors.items():
        out[name] = tensor
        if name.endswith(".lora_A.weight"):
            rank = tensor.shape[0]
            values = 0.5 + torch.rand(rank, 1, generator=generator)
            values[torch.rand(rank, 1, generator=generator) < 1 / 3] = 0.0
            out[name.replace(".lora_A.weight", ".lora_E.weight")] = values.to(tensor.dtype)
    target.mkdir(parents=True, exist_ok=True)
    save_file(out, str(target / "adapter_model.safetensors"), metadata={"format": "pt"})
    adalora = {
        "peft_type": "ADALORA",
        "task_type": "CAUSAL_LM",
        "init_r": rank,
        "target_r": max(1, rank // 2),
        "lora_alpha": config.get("lora_alpha", 2 * rank),
        "target_modules": config["target_modules"],
        "base_model_name_or_path": config.get("base_model_name_or_path"),
        "bias": "none",
    }
    (target / "adapter_config.json").write_text(json.dumps(adalora, indent=2))
    return target


def ask(client: openai.OpenAI, model: str, prompt: str) -> list[str]:
    """Greedy token ids (as ``token_id:N``) of ``model``'s answer to ``prompt``."""
    answer = client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=1,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
    )
    logprobs = answer.choices[0].logprobs
    return list(logprobs.tokens or []) if logprobs is not None else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--dora", type=Path, required=True)
    parser.add_argument("--lora", type=Path, required=True)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-lora-rank", type=int, default=16)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    work = Path(tempfile.mkdtemp(prefix="rest-check-"))
    sources = work / "sources"
    model = args.model.resolve()
    adapters = {
        "dora": shutil.copytree(args.dora, sources / "dora"),
        "lora": shutil.copytree(args.lora, sources / "lora"),
        "adalora": make_adalora(args.lora, sources / "adalora"),
    }
    for directory in adapters.values():
        pin_base_model(directory, str(model))
    stack = EmbeddedStack(
        workdir=work / "stack",
        model_dir=model,
        dtype=args.dtype,
        max_lora_rank=args.max_lora_rank,
        max_model_len=1024,
        source_roots=[sources],
        health_checks=False,
        warmup=False,
    )
    began = time.perf_counter()
    stack.start()
    summary: dict[str, Any] = {"start_s": round(time.perf_counter() - began, 1)}
    failures: list[str] = []
    try:
        control = ControlPlaneClient(stack.control_plane_url, timeout_s=600)
        registered = {}
        for key, directory in adapters.items():
            info = control.register(f"gpu-{key}", "1.0.0", str(directory))
            registered[key] = {"variant": info["variant"], "rank": info.get("rank")}
        summary["registered"] = registered
        models = {"base": str(model), **{key: f"gpu-{key}" for key in adapters}}
        front = openai.OpenAI(base_url=f"{stack.control_plane_url}/v1", api_key="unused")
        jobs = [(key, prompt) for key in models for prompt in PROMPTS]
        with ThreadPoolExecutor(len(jobs)) as pool:
            mixed = list(pool.map(lambda job: ask(front, models[job[0]], job[1]), jobs))
        one_by_one = [ask(front, models[key], prompt) for key, prompt in jobs]
        direct = openai.OpenAI(
            base_url=f"{stack.vllm_url}/v1", api_key=stack.vllm_api_key or "unused"
        )
        with httpx.Client(base_url=stack.vllm_url, headers=stack.vllm_headers) as vllm:
            for key in ("dora", "lora"):
                body = {"lora_name": f"direct-{key}", "lora_path": str(adapters[key])}
                response = vllm.post("/v1/load_lora_adapter", json=body, timeout=600)
                response.raise_for_status()
        own = {
            (key, prompt): ask(direct, f"direct-{key}", prompt)
            for key in ("dora", "lora")
            for prompt in PROMPTS
        }
        rows = []
        for (key, prompt), together, alone in zip(jobs, mixed, one_by_one, strict=True):
            base_alone = one_by_one[jobs.index(("base", prompt))]
            row = {
                "model": key,
                "prompt": prompt,
                "tokens": len(alone),
                "mixed_equals_alone": together == alone,
                "differs_from_base": key == "base" or alone != base_alone,
            }
            if (key, prompt) in own:
                row["equals_vllm_direct"] = alone == own[(key, prompt)]
                if not row["equals_vllm_direct"]:
                    failures.append(f"{key} {prompt!r}: control plane != vLLM direct")
            if len(alone) != MAX_TOKENS or len(together) != MAX_TOKENS:
                failures.append(f"{key} {prompt!r}: {len(alone)}/{len(together)} tokens")
            if not row["differs_from_base"]:
                failures.append(f"{key} {prompt!r}: same answer as the base model")
            rows.append(row)
        summary["answers"] = rows
    finally:
        stack.stop()
    summary["failures"] = failures
    args.out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
