"""DoRA adapters on the CPU build of vLLM through ``plugins.dora``.

The scale itself is checked in ``test_dora_scales.py``. Here a DoRA adapter, a plain LoRA
adapter, an AdaLoRA adapter (registered through the REST API, so served as the plain LoRA it was
converted into) and base-model requests run at once against the session's real vLLM CPU stack
(float32), and every answer must equal PEFT's (transformers + peft on the same tiny model, the
AdaLoRA original loaded by PEFT's AdaLoRA loader): the same greedy tokens and, token by token,
log-probabilities within 1e-3. Last, DoRA on a quantized base: a 4-bit AWQ copy of the tiny
model served by vLLM's own AWQ kernel (bfloat16), whose DoRA answers must match PEFT's on the
weights that kernel serves (the dequantized twin); a LoRA adapter then takes the DoRA adapter's
slot.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.tiny_awq import build_awq_pair
from hi_moe_lora.tinymodel import TinyAdapterSpec, TinyFleet, build_adapter, pin_base_model
from plugins.dora import MAGNITUDE_SUFFIX, adapter_uses_dora, split_magnitudes
from tests.conftest import VllmServer
from tests.openai.live import register
from tests.support.stacks import StackWithoutTier3
from tests.support.vllm_cpu import serves_awq

PROMPTS = ("def fibonacci(n):", "The integral of x squared")
MAX_TOKENS = 12
LOGPROB_TOLERANCE = 1e-3


def test_magnitudes_are_set_aside_by_module() -> None:
    tensors = {
        "base_model.model.layers.0.q_proj.lora_A.weight": torch.zeros(2, 2),
        f"base_model.model.layers.0.q_proj{MAGNITUDE_SUFFIX}": torch.ones(2),
        f"base_model.model.layers.0.k_proj{MAGNITUDE_SUFFIX}.weight": torch.ones(2),
    }
    lora, magnitudes = split_magnitudes(tensors)
    assert list(lora) == ["base_model.model.layers.0.q_proj.lora_A.weight"]
    assert sorted(magnitudes) == [
        "base_model.model.layers.0.k_proj",
        "base_model.model.layers.0.q_proj",
    ]


def test_adapter_uses_dora_reads_the_config(tmp_path: Path) -> None:
    assert not adapter_uses_dora(tmp_path)  # no config
    (tmp_path / "adapter_config.json").write_text(json.dumps({"use_dora": True}))
    assert adapter_uses_dora(tmp_path)
    (tmp_path / "adapter_config.json").write_text("{not json")
    assert not adapter_uses_dora(tmp_path)


# ------------------------------------------------------------------ on real vLLM


@dataclass(frozen=True)
class Answer:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


def _dora_adapter(model_dir: Path, target: Path, seed: int = 31, spread: float = 0.0) -> Path:
    """A PEFT DoRA adapter whose magnitudes differ clearly from the weight norms (a scale that
    is ignored, or taken as one, changes the answers): each multiplied by a random factor in
    [0.5, 1.5), or with ``spread`` > 1 in [1 / spread, spread) (log-uniform)."""
    build_adapter(model_dir, target, TinyAdapterSpec(rank=8, seed=seed, use_dora=True))
    from safetensors.torch import load_file, save_file

    weights = target / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    generator = torch.Generator().manual_seed(7)
    for name, tensor in tensors.items():
        if name.endswith(MAGNITUDE_SUFFIX):
            draw = torch.rand(tensor.shape, generator=generator)
            factor = 0.5 + draw if spread <= 1 else spread ** (2 * draw - 1)
            tensors[name] = (tensor * factor).contiguous()
    save_file(tensors, str(weights))
    return target


def _without_dora(source: Path, target: Path) -> Path:
    """``source``'s A and B as a plain LoRA adapter: DoRA with every scale taken as one."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target)
    config = json.loads((target / "adapter_config.json").read_text())
    (target / "adapter_config.json").write_text(json.dumps({**config, "use_dora": False}))
    weights = target / "adapter_model.safetensors"
    lora, _ = split_magnitudes(load_file(str(weights)))
    save_file(lora, str(weights))
    return target


def _served(client: httpx.Client, model: str, prompt: str) -> Answer:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "logprobs": 1,
        "ignore_eos": True,
        "return_tokens_as_token_ids": True,
    }
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    block = response.json()["choices"][0]["logprobs"]
    ids = tuple(int(t.removeprefix("token_id:")) for t in block["tokens"])
    return Answer(ids, tuple(block["token_logprobs"]))


def _peft_answer(model: Any, tokenizer: Any, prompt: str) -> Answer:
    """Greedy tokens and their log-probabilities from transformers (+ peft), float32."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    out_ids: list[int] = []
    logprobs: list[float] = []
    with torch.no_grad():
        for _ in range(MAX_TOKENS):
            logits = model(input_ids=ids).logits[0, -1].to(torch.float64)
            scores = torch.log_softmax(logits, dim=-1)
            best = int(torch.argmax(scores))
            out_ids.append(best)
            logprobs.append(float(scores[best]))
            ids = torch.cat([ids, torch.tensor([[best]])], dim=1)
    return Answer(tuple(out_ids), tuple(logprobs))


def _same(got: Answer, want: Answer) -> str | None:
    if got.token_ids != want.token_ids:
        return f"tokens {got.token_ids} != {want.token_ids}"
    worst = max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs, strict=True))
    return None if worst <= LOGPROB_TOLERANCE else f"log-probabilities differ by {worst:.3g}"


@pytest.mark.vllm
def test_dora_adalora_lora_and_base_in_one_batch_equal_peft(
    vllm_server: VllmServer, tmp_path: Path, fresh_name: Callable[[str], str]
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = vllm_server.fleet.model_dir
    dora_dir = _dora_adapter(model_dir, tmp_path / "dora")
    lora_dir = vllm_server.adapters["python-lora"][0]
    adalora_dir = build_adapter(
        model_dir, tmp_path / "adalora", TinyAdapterSpec(rank=8, seed=37, adalora=True)
    )
    dora_name, lora_name = fresh_name("dora"), fresh_name("plain")
    adalora_name = fresh_name("adalora")
    info = register(vllm_server.control_plane_url, dora_name, "1.0.0", dora_dir)
    assert info["variant"] == "dora"
    register(vllm_server.control_plane_url, lora_name, "1.0.0", lora_dir)
    # converted into plain LoRA at registration; PEFT below loads the AdaLoRA original
    info = register(vllm_server.control_plane_url, adalora_name, "1.0.0", adalora_dir)
    assert info["variant"] == "adalora"

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    expected: dict[tuple[str, str], Answer] = {}
    for prompt in PROMPTS:
        expected[("base", prompt)] = _peft_answer(base, tokenizer, prompt)
    for key, adapter_dir in (("dora", dora_dir), ("lora", lora_dir), ("adalora", adalora_dir)):
        fresh = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        peft_model = PeftModel.from_pretrained(fresh, str(adapter_dir)).eval()
        for prompt in PROMPTS:
            expected[(key, prompt)] = _peft_answer(peft_model, tokenizer, prompt)
    assert expected[("dora", PROMPTS[0])] != expected[("lora", PROMPTS[0])]
    assert expected[("adalora", PROMPTS[0])] != expected[("base", PROMPTS[0])]

    models = {
        "base": vllm_server.base_model,
        "dora": dora_name,
        "lora": lora_name,
        "adalora": adalora_name,
    }
    jobs = [(key, prompt) for key in models for prompt in PROMPTS] * 2
    with (
        httpx.Client(base_url=vllm_server.control_plane_url, timeout=120) as client,
        ThreadPoolExecutor(len(jobs)) as pool,
    ):
        answers = list(pool.map(lambda job: _served(client, models[job[0]], job[1]), jobs))
    failures = [
        f"{key} {prompt!r}: {why}"
        for (key, prompt), got in zip(jobs, answers, strict=True)
        if (why := _same(got, expected[(key, prompt)])) is not None
    ]
    assert not failures, failures


@pytest.mark.vllm
def test_a_dora_adapter_on_the_embeddings_is_refused_clearly(
    vllm_server: VllmServer, tmp_path: Path, fresh_name: Callable[[str], str]
) -> None:
    model_dir = vllm_server.fleet.model_dir
    target = tmp_path / "dora-embed"
    build_adapter(model_dir, target, TinyAdapterSpec(rank=4, seed=3, use_dora=True))
    from safetensors.torch import load_file, save_file

    weights = target / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    tensors[f"base_model.model.model.embed_tokens{MAGNITUDE_SUFFIX}"] = torch.ones(64)
    save_file(tensors, str(weights))
    key = vllm_server.stack.vllm_api_key
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=vllm_server.url, timeout=120, headers=headers) as client:
        response = client.post(
            "/v1/load_lora_adapter",
            json={"lora_name": fresh_name("dora-embed"), "lora_path": str(target)},
        )
        # vLLM's runtime loading API answers a worker's refusal with 500 and its message
        assert response.status_code in (400, 500), response.text
        assert "DoRA on embed_tokens is not supported" in response.text
        # and vLLM still serves
        health = client.get("/health")
        assert health.status_code == 200


# ------------------------------------------------------------------ on a quantized (AWQ) base

#: bfloat16 serving against float32 PEFT: the base model alone differs by about 0.015 here,
#: plain LoRA adapters by 0.015-0.06 (the LoRA delta is rounded too). The DoRA adapter's
#: scales (magnitudes spread over [1/4, 4)) matter far more: taken as one, 0.8 (checked below).
AWQ_LOGPROB_TOLERANCE = 0.08
AWQ_PROMPTS = (
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1)",
    "The integral of x squared is x cubed over three. SELECT name FROM adapters",
)


@pytest.fixture(scope="module")
def awq_stack(
    tiny_fleet: TinyFleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EmbeddedStack, Path]]:
    """The embedded stack serving a 4-bit AWQ copy of the tiny model (bfloat16: vLLM's AWQ
    kernels take no float32), and the float32 twin holding the weights it serves."""
    if not serves_awq():
        pytest.skip("vLLM's CPU build serves AWQ on AVX-512 hosts only (no cpu_gemm_wna16 here)")
    root = tmp_path_factory.mktemp("awq")
    pair = build_awq_pair(tiny_fleet.model_dir, root / "models")
    # no model="auto" here: the control plane's tier 3 would only slow vLLM's start
    stack = StackWithoutTier3(
        workdir=root / "stack",
        model_dir=pair.awq_dir,
        dtype="bfloat16",
        max_lora_rank=16,
        max_loras=2,
        source_roots=[tmp_path_factory.getbasetemp()],  # the tests' own tmp_path too
        health_checks=False,
        warmup=False,
    )
    stack.start()
    try:
        yield stack, pair.dequantized_dir
    finally:
        stack.stop()


def _prompt_logprobs(client: httpx.Client, model: str, prompt: str) -> torch.Tensor:
    """vLLM's log-probability of each prompt token after the first (teacher-forced)."""
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "prompt_logprobs": 0}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    rows = response.json()["choices"][0]["prompt_logprobs"][1:]
    return torch.tensor([next(iter(row.values()))["logprob"] for row in rows], dtype=torch.float64)


def _peft_prompt_logprobs(model: Any, tokenizer: Any, prompt: str) -> torch.Tensor:
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        scores = torch.log_softmax(model(input_ids=ids).logits[0].to(torch.float64), dim=-1)
    return scores[:-1].gather(1, ids[0, 1:, None])[:, 0]


@pytest.mark.vllm
def test_dora_on_an_awq_base_equals_peft_on_the_weights_it_serves(
    awq_stack: tuple[EmbeddedStack, Path], tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    stack, float_dir = awq_stack
    adapters = {
        "dora": _dora_adapter(float_dir, tmp_path / "dora", seed=43, spread=4.0),
        "lora": build_adapter(float_dir, tmp_path / "lora", TinyAdapterSpec(rank=8, seed=44)),
        # asked for last: vLLM (two slots) evicts the DoRA adapter for it, and the slot's
        # DoRA scales must not stay behind
        "lora2": build_adapter(float_dir, tmp_path / "lora2", TinyAdapterSpec(rank=8, seed=45)),
    }
    for key, directory in adapters.items():
        pin_base_model(directory, str(stack.model_dir))
        info = register(stack.control_plane_url, f"awq-{key}", "1.0.0", directory)
        assert info["variant"] == key.rstrip("2")

    tokenizer = AutoTokenizer.from_pretrained(str(float_dir))
    references: dict[str, list[torch.Tensor]] = {}
    for key in ("base", *adapters):
        model = AutoModelForCausalLM.from_pretrained(str(float_dir), dtype=torch.float32)
        if key != "base":
            model = PeftModel.from_pretrained(model, str(adapters[key]))
        references[key] = [_peft_prompt_logprobs(model.eval(), tokenizer, p) for p in AWQ_PROMPTS]
    # the test can fail: DoRA's scales, taken as one, move the answers far beyond the tolerance
    unscaled = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(float_dir), dtype=torch.float32),
        str(_without_dora(adapters["dora"], tmp_path / "unscaled")),
    ).eval()
    apart = max(
        float((_peft_prompt_logprobs(unscaled, tokenizer, prompt) - want).abs().max())
        for prompt, want in zip(AWQ_PROMPTS, references["dora"], strict=True)
    )
    assert apart > 5 * AWQ_LOGPROB_TOLERANCE, apart

    models = {"base": str(stack.model_dir), **{key: f"awq-{key}" for key in adapters}}
    with httpx.Client(base_url=stack.control_plane_url, timeout=120) as client:
        worst = {
            key: max(
                float((_prompt_logprobs(client, models[key], prompt) - want).abs().max())
                for prompt, want in zip(AWQ_PROMPTS, references[key], strict=True)
            )
            for key in models
        }
    assert all(error <= AWQ_LOGPROB_TOLERANCE for error in worst.values()), worst
