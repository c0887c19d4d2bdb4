"""Our kernels' variants compiled before vLLM's capture: what is run, for which sizes and counts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch

punica_gpu = pytest.importorskip("vllm.lora.punica_wrapper.punica_gpu")

from vllm.config import LoRAConfig  # noqa: E402
from vllm.lora.layers import base_linear  # noqa: E402
from vllm.lora.ops.triton_ops.lora_kernel_metadata import LoRAKernelMeta  # noqa: E402
from vllm.model_executor.layers.linear import UnquantizedLinearMethod  # noqa: E402

from plugins import fused_gemm, kernel_warmup  # noqa: E402
from plugins.kernel_warmup import WarmUpPlan, active_counts, distinct_kinds, warm_up  # noqa: E402

SLOTS, RANK, K = 4, 16, 256
WIDTHS = (128, 64, 64)


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> str:
    """CUDA when present, else the CPU with the Triton interpreter (vLLM's CPU build lacks the
    GPU wrapper's metadata class: it is supplied from vLLM's module)."""
    if torch.cuda.is_available():
        return "cuda"
    monkeypatch.setattr(punica_gpu, "LoRAKernelMeta", LoRAKernelMeta, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return "cpu"


@pytest.fixture
def fused(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """LoRA layers' base GEMM through our wrapper, the small shape fused on every device."""
    import hi_moe_lora.kernels.gemm_lora as gemm_lora
    from hi_moe_lora.kernels.gemm_tiles import SeveralRoute, default_plan

    monkeypatch.setenv("HI_MOE_LORA_FUSED_GEMM", "on")
    monkeypatch.setattr(
        gemm_lora,
        "plan_for",
        lambda device, n, k: replace(default_plan(n, k), several=SeveralRoute.SPLIT),
    )
    fused_gemm.install()
    yield
    fused_gemm.uninstall()


def _layer(wrapper: Any, device: str, widths: tuple[int, ...] = WIDTHS, rank: int = RANK) -> Any:
    """A vLLM LoRA linear layer (qkv-like: ``widths`` slices of K inputs, LoRA stacks of
    ``rank``) served by ``wrapper``."""
    cls = base_linear.BaseLinearLayerWithLoRA
    layer = cls.__new__(cls)
    torch.nn.Module.__init__(layer)
    gen = torch.Generator().manual_seed(sum(widths))
    half = lambda t: t.to(device, torch.bfloat16)  # noqa: E731
    base = torch.nn.Module()
    base.weight = torch.nn.Parameter(
        half(torch.randn(sum(widths), K, generator=gen) / K**0.5), requires_grad=False
    )
    base.quant_method = UnquantizedLinearMethod()
    base.input_size_per_partition = K
    layer.base_layer = base
    layer.punica_wrapper = wrapper
    layer.output_slices = widths
    layer.lora_a_stacked = tuple(half(torch.zeros(SLOTS, 1, rank, K)) for _ in widths)
    layer.lora_b_stacked = tuple(half(torch.zeros(SLOTS, 1, n, rank)) for n in widths)
    layer._enable_aux_cuda_stream = False  # (vLLM's dual stream off, as by default)
    return layer


def _embedding(wrapper: Any) -> Any:
    """vLLM's embedding LoRA layer on ``wrapper``: LoRA stacks too, but no linear ``apply``
    (``torch.nn.Module.apply`` takes a function), so the warm-up must leave it out."""
    from vllm.lora.layers import VocabParallelEmbeddingWithLoRA

    layer = VocabParallelEmbeddingWithLoRA.__new__(VocabParallelEmbeddingWithLoRA)
    torch.nn.Module.__init__(layer)
    layer.punica_wrapper = wrapper
    layer.lora_a_stacked = torch.zeros(SLOTS, 64, RANK)
    layer.lora_b_stacked = torch.zeros(SLOTS, 1, K, RANK)
    return layer


def _wrapper(device: str, rank: int = RANK) -> Any:
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    config = LoRAConfig(max_loras=SLOTS, max_lora_rank=rank, specialize_active_lora=True)
    return HiMoePunicaWrapperGPU(128, 8, device, lora_config=config)


def test_the_counts_are_those_our_op_tells_apart_among_vllms() -> None:
    assert active_counts(16, specialized=True) == (0, 1, 2, 3)
    assert active_counts(1, specialized=True) == (0, 1, 2)  # (one adapter, base rows beside)
    assert active_counts(16, specialized=False) == (0, 17)  # (vLLM's one count for LoRA steps)


def test_one_layer_of_each_kind_runs(device: str, fused: None) -> None:
    wrapper = _wrapper(device)
    qkv, qkv_again, o = (
        _layer(wrapper, device),
        _layer(wrapper, device),
        _layer(wrapper, device, (256,)),
    )
    assert distinct_kinds([qkv, qkv_again, o]) == [qkv, o]
    assert distinct_kinds([qkv, _layer(_wrapper(device), device)]) != [qkv]  # (another wrapper)


def _stacks_apart(layer: Any, gap: int) -> Any:
    """``layer`` with its LoRA stacks moved into one buffer, ``gap`` elements between them."""
    stacks = [*layer.lora_a_stacked, *layer.lora_b_stacked]
    if stacks[0].device.type != "cpu":
        pytest.skip("views of one CPU buffer")
    flat = torch.zeros(sum(t.numel() + gap for t in stacks), dtype=stacks[0].dtype)
    views, at = [], 0
    for t in stacks:
        views.append(flat[at : at + t.numel()].view(t.shape))
        at += t.numel() + gap
    slices = len(layer.lora_a_stacked)
    layer.lora_a_stacked, layer.lora_b_stacked = tuple(views[:slices]), tuple(views[slices:])
    return layer


def test_layers_whose_stack_offsets_fall_in_another_integer_class_are_another_kind(
    device: str,
) -> None:
    """The fused GEMM is launched with the stacks' element offsets as integers, which Triton
    tells apart by class (i32 or i64, divisible by 16 or not): another class, another variant
    (the H200 capture's seven late variants, twenty-fourth window)."""
    from plugins.kernel_warmup import stack_offset_classes

    wrapper = _wrapper(device)
    aligned = _stacks_apart(_layer(wrapper, device), 32)
    aligned_too = _stacks_apart(_layer(wrapper, device), 64)
    unaligned = _stacks_apart(_layer(wrapper, device), 24)
    assert stack_offset_classes(aligned)[0] == "i32/16"  # (the base: offset 0)
    assert "i32" in stack_offset_classes(unaligned)  # (some offsets no longer divisible)
    assert distinct_kinds([aligned, aligned_too, unaligned]) == [aligned, unaligned]


def test_the_warm_up_runs_every_size_and_count_and_restores_vllms_flags(
    device: str, fused: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper = _wrapper(device)
    meta = wrapper.token_mapping_meta
    meta.no_lora_flag_cpu.fill_(True)
    meta.num_active_loras_cpu.fill_(5)
    seen: list[tuple[int, int, bool]] = []
    real = wrapper.base_and_lora_linear

    def recorded(layer: Any, x: torch.Tensor, bias: Any) -> Any:
        seen.append((x.shape[0], int(meta.num_active_loras_cpu), bool(meta.no_lora_flag_cpu)))
        return real(layer, x, bias)

    monkeypatch.setattr(wrapper, "base_and_lora_linear", recorded)
    plan = WarmUpPlan(sizes=(1, 8, 40, 64), active_counts=(0, 1, 2, 3))
    layers = [_layer(wrapper, device), _embedding(wrapper), _layer(wrapper, device, (256,))]

    variants = warm_up(layers, plan, threads=2)

    expected = {(m, c, c == 0) for m in plan.sizes for c in plan.active_counts}
    assert len(seen) == 2 * len(expected)
    assert set(seen) == expected
    assert bool(meta.no_lora_flag_cpu.item())
    assert int(meta.num_active_loras_cpu.item()) == 5
    if device == "cpu":
        assert not variants  # (the interpreter compiles nothing)


def test_after_the_warm_up_a_late_variant_counts_in_vllms_metrics(device: str, fused: None) -> None:
    """The warm-up leaves Triton's JIT cache watched; a variant of ours compiled after it adds
    one to ``hi_moe_lora_kernel_late_compiles_total`` in the process's registry."""
    from prometheus_client import REGISTRY
    from triton import knobs
    from triton.runtime.jit import JitFunctionInfo

    from hi_moe_lora.kernels.late_compiles import LateCompileWatch
    from plugins.metrics import KERNEL_LATE_COMPILES

    saved = knobs.runtime.jit_cache_hook
    try:
        warm_up([_layer(_wrapper(device), device)], WarmUpPlan((8,), (0, 1)), threads=1)
        hook = knobs.runtime.jit_cache_hook
        assert isinstance(hook, LateCompileWatch)
        before = REGISTRY.get_sample_value(KERNEL_LATE_COMPILES) or 0.0
        hook(
            key="k",
            repr="r",
            fn=JitFunctionInfo("hi_moe_lora.kernels.gemm_lora", "_gemm_lora_kernel", None),
            compile={},
            is_manual_warmup=False,
            already_compiled=False,
        )  # (what Triton calls before compiling a variant no launch compiled yet)
        assert REGISTRY.get_sample_value(KERNEL_LATE_COMPILES) == before + 1
    finally:
        knobs.runtime.jit_cache_hook = saved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiles for the GPU at hand")
def test_after_the_warm_up_the_layers_calls_compile_nothing(fused: None) -> None:
    """Every size and count the warm-up ran then launches without a new variant."""
    from hi_moe_lora.kernels.gemm_lora import KERNEL_CALLEES, _gemm_lora_kernel
    from hi_moe_lora.kernels.gemm_shrink import _gemm_shrink_kernel, shrink_program
    from hi_moe_lora.kernels.kernel_flavour import _compiled
    from hi_moe_lora.kernels.launch_plan import variant_cache

    kernels = [
        _compiled(_gemm_lora_kernel, ("m",), KERNEL_CALLEES),
        _compiled(_gemm_shrink_kernel, ("m",), (shrink_program,)),
    ]
    wrapper = _wrapper("cuda")
    layer = _layer(wrapper, "cuda", (192, 96, 96))  # (a shape no other test compiles)
    plan = WarmUpPlan(sizes=(8, 40, 64), active_counts=(0, 1, 2, 3))
    warm_up([layer], plan, threads=4)
    compiled = [len(variant_cache(kernel) or {}) for kernel in kernels]
    meta = wrapper.token_mapping_meta
    x = torch.randn(64, K, dtype=torch.bfloat16, device="cuda")
    for count in plan.active_counts:
        meta.no_lora_flag_cpu.fill_(count == 0)
        meta.num_active_loras_cpu.fill_(count)
        for rows in plan.sizes:
            layer.apply(x[:rows])
    torch.cuda.synchronize()
    assert [len(variant_cache(kernel) or {}) for kernel in kernels] == compiled


def test_the_warm_up_asks_for_the_slot_refresh_kernels(
    device: str, fused: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the layers, the kernels that refresh a slot when an adapter enters it (rank scan,
    narrow copies: max rank 64 has copies) are compiled too, and no slot's rank moves."""
    from hi_moe_lora.kernels import narrow_copy, rank_scan
    from tests.support.triton_launches import record_launches

    monkeypatch.setenv("HI_MOE_LORA_SLOT_REFRESH", "1")  # (the CPU's default is per tensor)
    wrapper = _wrapper(device, rank=64)
    scans = record_launches(monkeypatch, rank_scan)
    copies = record_launches(monkeypatch, narrow_copy)
    warm_up([_layer(wrapper, device, rank=64)], WarmUpPlan((8,), (0, 1)), threads=1)
    assert (len(scans), len(copies)) == (1, 1)
    assert wrapper._hm_ranks.host == [64] * SLOTS


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiles for the GPU at hand")
def test_after_the_warm_up_an_adapter_entering_a_slot_compiles_nothing(fused: None) -> None:
    """The refresh of a new adapter's slot (rank scan and narrow copies, one launch each)
    finds its variants compiled by the warm-up: the H200 capture's stand-in adapters compiled
    them before (twenty-fourth window)."""
    from hi_moe_lora.kernels import narrow_copy, rank_scan
    from hi_moe_lora.kernels.launch_plan import variant_cache

    wrapper = _wrapper("cuda", rank=64)
    layer = _layer(wrapper, "cuda", rank=64)
    warm_up([layer], WarmUpPlan((8,), (0, 1)), threads=2)
    kernels = [rank_scan._compiled(), narrow_copy._compiled()]
    compiled = [len(variant_cache(kernel) or {}) for kernel in kernels]
    assert all(compiled)
    for a in layer.lora_a_stacked:
        a[2, 0, :16] = 1.0  # a rank-16 adapter in slot 2
    for b in layer.lora_b_stacked:
        b[2, 0, :, :16] = 1.0
    assert wrapper._hm_ranks.refresh([None, None, 7, None])[2] == 16
    torch.cuda.synchronize()
    assert [len(variant_cache(kernel) or {}) for kernel in kernels] == compiled


def test_install_is_idempotent_and_zero_threads_installs_nothing() -> None:
    from vllm.lora.model_manager import LoRAModelManager

    original = LoRAModelManager.__dict__["_create_lora_modules"]
    assert not kernel_warmup.install(0)
    assert LoRAModelManager.__dict__["_create_lora_modules"] is original
    try:
        assert kernel_warmup.install(4)
        assert kernel_warmup.install(4)
        assert LoRAModelManager.__dict__["_create_lora_modules"] is not original
    finally:
        kernel_warmup.uninstall()
    assert LoRAModelManager.__dict__["_create_lora_modules"] is original


def test_the_plan_follows_vllms_capture_sizes_and_lora_counts(tiny_fleet: Any) -> None:
    from vllm.config import CompilationConfig, ModelConfig, VllmConfig
    from vllm.config.compilation import CUDAGraphMode

    config = VllmConfig(
        model_config=ModelConfig(model=str(tiny_fleet.model_dir)),
        lora_config=LoRAConfig(max_loras=8, specialize_active_lora=True),
        compilation_config=CompilationConfig(cudagraph_capture_sizes=[4, 1, 2, 8]),
    )
    config.compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE  # (the CPU has none)
    config.compilation_config.cudagraph_capture_sizes = [4, 1, 2, 8]
    assert kernel_warmup.plan_for(config) == WarmUpPlan(
        sizes=(1, 2, 4, 8), active_counts=(0, 1, 2, 3), dtype=config.model_config.dtype
    )
    config.compilation_config.cudagraph_mode = CUDAGraphMode.NONE
    assert kernel_warmup.plan_for(config) is None
