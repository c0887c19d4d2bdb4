"""``benchmarks/kernels/step_profile.py``: kernels charged to the step that launched them, by
category, our kernel under its real name (a rename once filed it under vLLM's LoRA)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels" / "step_profile.py"


@pytest.fixture(scope="module")
def step_profile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("step_profile", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["step_profile"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_our_kernel_is_filed_under_its_own_name(step_profile: ModuleType) -> None:
    from hi_moe_lora.kernels.fused.kernel import fused_lora_kernel

    category = step_profile.kernel_category
    assert category(fused_lora_kernel.__name__, "kernel") == "lora_ours"
    assert category("_lora_shrink_kernel", "kernel") == "lora_vllm"
    assert category("_lora_expand_kernel", "kernel") == "lora_vllm"
    assert category("fused_moe_lora_kernel", "kernel") == "lora_vllm"
    assert category("nvjet_tst_128x64", "kernel") == "gemm"
    assert category("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy") == "copy"


def _trace(path: Path) -> None:
    """Three steps: decode, mixed, decode; a graph replay's kernels share their launch's id."""
    events: list[dict[str, object]] = []
    kernels = [("nvjet_gemm", 60.0), ("fused_lora_kernel", 10.0), ("_lora_shrink_kernel", 3.0)]
    for i, (ctx, gen) in enumerate([(0, 64), (256, 63), (0, 64)]):
        t0 = 1000.0 * i
        name = f"execute_context_{1 if ctx else 0}({ctx})_generation_{gen}({gen})"
        events.append({"name": name, "ph": "X", "ts": t0, "dur": 50.0, "cat": "user_annotation"})
        events.append(
            {"name": "cudaGraphLaunch", "ph": "X", "ts": t0 + 10, "cat": "cuda_runtime",
             "args": {"correlation": i}}
        )  # fmt: skip
        ts = t0 + 100
        for kname, dur in kernels:
            scale = 4.0 if ctx else 1.0
            events.append(
                {"name": kname, "ph": "X", "ts": ts, "dur": dur * scale, "cat": "kernel",
                 "args": {"correlation": i}}
            )  # fmt: skip
            ts += dur * scale
    with gzip.open(path, "wt") as handle:
        json.dump({"traceEvents": events}, handle)


def test_kernels_are_charged_to_their_step_by_category(
    step_profile: ModuleType, tmp_path: Path
) -> None:
    trace = tmp_path / "t.pt.trace.json.gz"
    _trace(trace)
    steps = step_profile.load_steps(trace)
    assert [(s.context_tokens, s.generation_tokens) for s in steps] == [(0, 64), (256, 63), (0, 64)]
    mixed = steps[1]
    assert mixed.busy["lora_ours"] == 40.0
    assert mixed.busy["lora_vllm"] == 12.0
    assert mixed.busy["gemm"] == 240.0
    assert mixed.kernels == 3
    summary = step_profile.summarize(steps)  # first and last steps dropped: the mixed one stays
    assert list(summary) == ["mixed"]
    assert summary["mixed"]["period"] == 1000.0
    assert summary["mixed"]["lora_ours"] == 40.0
