"""``benchmarks/kernels/step_profile.py``: kernels charged to the step that launched them, by
category, our kernel under its real name (a rename once filed it under vLLM's LoRA); the GPU
copies of step annotations are not steps; host time of the LoRA ops per step; large mixed steps
(no CUDA graph) grouped apart; the host time of each step's outermost CPU events by name, and
the time between them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def step_profile() -> ModuleType:
    return load_script("benchmarks/kernels/step_profile.py")


def test_our_kernel_is_filed_under_its_own_name(step_profile: ModuleType) -> None:
    from hi_moe_lora.kernels.fused.kernel import fused_lora_kernel

    category = step_profile.kernel_category
    assert category(fused_lora_kernel.__name__, "kernel") == "lora_ours"
    assert category("_lora_shrink_kernel", "kernel") == "lora_vllm"
    assert category("_lora_expand_kernel", "kernel") == "lora_vllm"
    assert category("fused_moe_lora_kernel", "kernel") == "lora_vllm"
    assert category("nvjet_tst_128x64", "kernel") == "gemm"
    assert category("_gemm_lora_kernel", "kernel") == "gemm_lora"
    assert category("_gemm_shrink_kernel", "kernel") == "lora_ours"  # (not a GEMM)
    # (torch.compile names its fused kernels after the ops around them)
    assert category("triton_red_fused_fused_add_rms_norm_gemm_lora_linear_2", "kernel") == "other"
    assert category("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy") == "copy"


def _trace(path: Path, steps: tuple[tuple[int, int], ...] = ((0, 64), (256, 63), (0, 64))) -> None:
    """Steps (context, generation tokens; default decode, mixed, decode), each with a copy of
    its annotation on the GPU timeline that starts inside the next step's host time, and two
    of our op's host calls in every mixed step; a graph replay's kernels share their launch's
    id."""
    events: list[dict[str, object]] = []
    kernels = [("nvjet_gemm", 60.0), ("fused_lora_kernel", 10.0), ("_lora_shrink_kernel", 3.0)]
    for i, (ctx, gen) in enumerate(steps):
        t0 = 1000.0 * i
        name = f"execute_context_{1 if ctx else 0}({ctx})_generation_{gen}({gen})"
        events.append(
            {"name": name, "ph": "X", "ts": t0, "dur": 50.0, "cat": "user_annotation",
             "pid": 1, "tid": 1}
        )  # fmt: skip
        events.append(
            {"name": name, "ph": "X", "ts": t0 + 1005, "dur": 200.0,
             "cat": "gpu_user_annotation", "pid": 0, "tid": 7}
        )  # fmt: skip
        for call in range(2 if ctx else 0):
            events.append(
                {"name": "hi_moe_lora::lora_linear", "ph": "X", "ts": t0 + 5 + 20 * call,
                 "dur": 15.0, "cat": "cpu_op", "pid": 1, "tid": 1}
            )  # fmt: skip
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


def test_gpu_copies_of_annotations_are_not_steps(step_profile: ModuleType, tmp_path: Path) -> None:
    """The GPU copy of step i starts after step i + 1's host annotation; were it a step, it
    would take the kernels step i + 1 launches after that point (a bug of 2026-11-27)."""
    trace = tmp_path / "t.pt.trace.json.gz"
    _trace(trace, ((0, 64), (0, 64), (0, 64)))
    steps = step_profile.load_steps(trace)
    assert [s.cpu_start for s in steps] == [0.0, 1000.0, 2000.0]
    assert all(s.kernels == 3 for s in steps)


def test_host_time_of_lora_ops_and_large_mixed_steps(
    step_profile: ModuleType, tmp_path: Path
) -> None:
    trace = tmp_path / "t.pt.trace.json.gz"
    _trace(trace, ((0, 64), (256, 63), (960, 64), (0, 64)))
    steps = step_profile.load_steps(trace)
    assert [s.host for s in steps] == [50.0] * 4
    assert [s.lora_calls for s in steps] == [0, 2, 2, 0]
    assert steps[1].lora_host["lora_ours"] == 30.0
    summary = step_profile.summarize(steps, graph_max_tokens=512)
    assert list(summary) == ["mixed", "mixed-large"]
    assert summary["mixed"]["tokens"] == 319.0
    assert summary["mixed-large"]["tokens"] == 1024.0
    assert summary["mixed-large"]["lora_host"] == 30.0
    assert summary["mixed-large"]["lora_calls"] == 2.0
    assert summary["mixed-large"]["host"] == 50.0
    assert step_profile.summarize(steps, graph_max_tokens=2048).keys() == {"mixed"}


def test_idle_gaps_are_charged_to_the_kernels_around_them(step_profile: ModuleType) -> None:
    """Gaps between activities count, overlaps (two streams) do not, and a kernel ending
    inside a longer one leaves the longer one as the gap's left side."""
    step = step_profile.Step(0, 64, cpu_start=0.0)
    step.activities = [
        (0.0, 10.0, "nvjet_gemm"),
        (12.0, 20.0, "_gemm_lora_kernel"),  # 2 µs after the GEMM
        (14.0, 16.0, "side_stream_kernel"),  # inside the one before: no gap
        (25.0, 30.0, "flash_attn"),  # 5 µs after _gemm_lora_kernel
        (30.0, 31.0, "nvjet_gemm"),  # back to back
    ]
    assert step_profile.Step(0, 64, cpu_start=0.0).idle_gaps() == {}
    gaps = step.idle_gaps()
    assert gaps == {"nvjet_gemm -> _gemm_lora_kernel": 2.0, "_gemm_lora_kernel -> flash_attn": 5.0}


def test_the_summary_reports_idle_time_inside_the_span(
    step_profile: ModuleType, tmp_path: Path
) -> None:
    trace = tmp_path / "t.pt.trace.json.gz"
    _trace(trace, ((0, 64), (0, 64), (0, 64)))  # kernels back to back: no idle time
    decode = step_profile.summarize(step_profile.load_steps(trace))["decode"]
    assert decode["idle"] == 0.0
    assert decode["top_gaps"] == []
    assert decode["span"] == decode["busy"]


def test_decode_ratios_put_each_load_against_the_base(step_profile: ModuleType) -> None:
    def decode(period: float, busy: float, idle: float) -> dict[str, object]:
        return {"decode": {"period": period, "busy": busy, "idle": idle}}

    summaries = {
        "s-base": decode(6000.0, 5800.0, 200.0),
        "s-one": decode(6400.0, 6100.0, 100.0),
        "s-one-prefill": {"mixed": {"period": 1.0}},  # (no decode steps: no line)
    }
    lines = step_profile.decode_ratios(summaries, "s-base")
    assert lines == [
        "s-one: decode step 6400 µs, 0.938 of s-base's; GPU busy 6100 µs, 0.951; "
        "idle 100 µs (base 200); LoRA 0 µs"
    ]
    with pytest.raises(ValueError, match="no decode steps"):
        step_profile.decode_ratios(summaries, "s-one-prefill")


def test_lora_time_is_the_steps_gemms_and_lora_kernels_over_the_bases_gemms(
    step_profile: ModuleType,
) -> None:
    base = {"gemm": 4036.0, "attention": 576.0}
    fused = {"gemm_lora": 4169.0, "gemm": 241.0, "attention": 573.0}
    unfused = {"gemm": 4036.0, "lora_ours": 888.0}
    assert step_profile.lora_time(fused, base) == 374.0
    assert step_profile.lora_time(unfused, base) == 888.0


def test_the_fused_gemm_op_counts_as_our_lora_op(step_profile: ModuleType) -> None:
    assert step_profile.HOST_LORA_OPS["hi_moe_lora::gemm_lora_linear"] == "lora_ours"


def test_host_time_goes_to_the_outermost_events_and_the_time_between(
    step_profile: ModuleType, tmp_path: Path
) -> None:
    """Per step: an op's inner ops and launches are its own; a launch outside any op is
    charged by its name; whatever no event covers is the time between events."""
    trace = tmp_path / "t.pt.trace.json.gz"
    _trace(trace, ((0, 64), (960, 64), (0, 64)))
    with gzip.open(trace, "rt") as handle:
        raw = json.load(handle)
    raw["traceEvents"] += [
        {"name": "aten::empty", "ph": "X", "ts": 1006.0, "dur": 2.0, "cat": "cpu_op",
         "pid": 1, "tid": 1},  # (inside the first of our op's calls: not charged apart)
        {"name": "cudaLaunchKernel", "ph": "X", "ts": 1045.0, "dur": 3.0,
         "cat": "cuda_runtime", "pid": 1, "tid": 1},
        {"name": "aten::mm", "ph": "X", "ts": 1030.0, "dur": 4.0, "cat": "cpu_op",
         "pid": 2, "tid": 2},  # (another thread)
    ]  # fmt: skip
    with gzip.open(trace, "wt") as handle:
        json.dump(raw, handle)
    steps = step_profile.load_steps(trace)
    ops = steps[1].host_ops
    assert ops["hi_moe_lora::lora_linear"] == [30.0, 2.0]
    assert ops["cudaLaunchKernel"] == [3.0, 1.0]
    assert "aten::empty" not in ops
    assert "aten::mm" not in ops
    assert ops[step_profile.BETWEEN_EVENTS] == [50.0 - 30.0 - 3.0, 0.0]
    summary = step_profile.summarize(steps, graph_max_tokens=512)
    top = summary["mixed-large"]["top_host"]
    assert top == [
        ("hi_moe_lora::lora_linear", 30.0, 2.0),
        (step_profile.BETWEEN_EVENTS, 17.0, 0.0),
        ("cudaLaunchKernel", 3.0, 1.0),
    ]
