"""Our kernels' variants compiled on a pool of threads before vLLM captures its CUDA graphs.

Triton compiles a variant when a launch first needs it, so vLLM's capture compiles ours one
after another: one per tile, form and count of active adapters our op tells apart, dozens for a
Llama under ``--specialize-active-lora``, 16-55 s each at ``--max-lora-rank 64`` on an H200
host (a start of about 9-11 minutes; benchmarks/README.md, twenty-third window).

Installed with our CUDA wrapper (:func:`plugins.punica.register`), :func:`install` wraps vLLM's
``LoRAModelManager._create_lora_modules`` (after DoRA's scale tables, which change the kernels'
variants). Once the LoRA layers exist, :func:`warm_up` runs one layer of each kind and shape through
vLLM's own ``apply`` on zeros, for every CUDA-graph size and every count of active adapters vLLM may
capture, inside :func:`hi_moe_lora.kernels.warm_compile.compiling`: our launches compile their
variants on the pool instead of running, and the capture then finds them in Triton's caches; then
each wrapper's slot-refresh kernels (rank scan, narrow copies), which vLLM's capture otherwise
compiled when it loaded its stand-in adapters. Only the step flags vLLM reads on the CPU (no LoRA;
active adapters) are set for each case and restored after; everything else is the layers' and
wrapper's own state. A variant the warm-up misses is compiled by the capture, as without it, and
logged (:mod:`hi_moe_lora.kernels.late_compiles`). On an H200 at max rank 64 the warm-up compiled 60
variants on 16 threads in 52 s and the server was up in 313 s; three starts without it were still
capturing when their 10-minute calls ended (9-11 minutes by their pace). The capture then paused
41 s for seven variants more, whose layers' stack offsets fell in other integer classes, now kinds
of their own (benchmarks/README.md, twenty-fourth window); with those kinds and the slot-refresh
kernels, five H200 servers compiled none after the warm-up (twenty-fifth window).

``HI_MOE_LORA_COMPILE_THREADS`` (:mod:`plugins.settings`) sets the threads: ``auto`` (the
default) or a count; ``0`` turns it off. A failure is logged and leaves the compiles to the
capture.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from plugins.method_patch import unwrap_method, wrap_method

logger = logging.getLogger(__name__)

#: Where the original ``_create_lora_modules`` is kept on the patched class.
_MARK = "_hi_moe_lora_create_lora_modules"


@dataclass(frozen=True)
class WarmUpPlan:
    """What :func:`warm_up` runs each layer kind through: token rows (vLLM's CUDA-graph sizes)
    and counts of active adapters (0: a step without LoRA), on inputs of the model's dtype
    (None: each layer's LoRA stacks' dtype)."""

    sizes: tuple[int, ...]
    active_counts: tuple[int, ...]
    dtype: torch.dtype | None = None


def install(threads: int) -> bool:
    """Wrap ``LoRAModelManager._create_lora_modules`` so that each new manager's layers warm
    up on ``threads`` threads (idempotent; True once installed, False for 0 threads)."""
    if threads <= 0:
        logger.debug("hi-moe-lora: kernel warm-up off; vLLM's capture compiles each variant")
        return False
    from vllm.lora.model_manager import LoRAModelManager

    def warming(original: Callable[..., Any]) -> Callable[..., Any]:
        def create_lora_modules(self: Any) -> Any:
            result = original(self)
            try:
                warm_up(self.modules.values(), plan_from_vllm(), threads)
            except Exception:
                logger.exception(
                    "hi-moe-lora kernel warm-up failed; vLLM's capture compiles the variants"
                )
            return result

        return create_lora_modules

    wrap_method(LoRAModelManager, "_create_lora_modules", _MARK, warming)
    return True


def uninstall() -> None:
    """Restore vLLM's own ``_create_lora_modules`` (tests, switching back)."""
    from vllm.lora.model_manager import LoRAModelManager

    unwrap_method(LoRAModelManager, "_create_lora_modules", _MARK)


def plan_from_vllm() -> WarmUpPlan | None:
    """The sizes and counts of the engine being built (vLLM's current config, which its
    workers set while they load the model); None without CUDA graphs or a config."""
    from vllm.config import get_current_vllm_config_or_none

    config = get_current_vllm_config_or_none()
    return plan_for(config) if config is not None else None


def plan_for(config: Any) -> WarmUpPlan | None:
    """The sizes and counts vLLM captures under ``config`` (a ``VllmConfig``); None without
    LoRA or CUDA graphs."""
    if config.lora_config is None:
        return None
    compilation = config.compilation_config
    mode = getattr(compilation, "cudagraph_mode", None)
    eager = config.model_config is not None and config.model_config.enforce_eager
    if eager or mode is None or getattr(mode, "name", "NONE") == "NONE":
        return None
    lora = config.lora_config
    dtype = getattr(config.model_config, "dtype", None)
    return WarmUpPlan(
        sizes=tuple(sorted(set(compilation.cudagraph_capture_sizes or ()))),
        active_counts=active_counts(
            int(lora.max_loras),
            bool(getattr(lora, "specialize_active_lora", False))
            and bool(getattr(compilation, "cudagraph_specialize_lora", True)),
        ),
        dtype=dtype if isinstance(dtype, torch.dtype) else None,
    )


def active_counts(max_loras: int, specialized: bool) -> tuple[int, ...]:
    """The counts of active adapters our op tells apart among those vLLM captures: none, and
    with ``--specialize-active-lora`` one, two (one adapter and base rows, or two adapters)
    and three or more (vLLM counts the base rows' id too; :mod:`hi_moe_lora.kernels.gemm_op`);
    without it, vLLM's one count for every LoRA step (``max_loras + 1``)."""
    if not specialized:
        return (0, max_loras + 1)
    return tuple(sorted({0} | {min(c, max_loras + 1) for c in (1, 2, 3)}))


def warm_up(layers: Iterable[Any], plan: WarmUpPlan | None, threads: int) -> int | None:
    """Run one layer of each kind among ``layers``' linear LoRA layers served by our CUDA
    wrapper through ``plan`` with its launches compiling, on ``threads`` threads; the variants
    handed to the pool (None where nothing ran or they compiled one by one)."""
    from vllm.lora.layers.base_linear import BaseLinearLayerWithLoRA

    from hi_moe_lora.kernels.late_compiles import recording_warm_up
    from hi_moe_lora.kernels.warm_compile import compiling
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    if plan is None or not plan.sizes:
        return None
    kinds = distinct_kinds(
        layer
        for layer in layers
        if isinstance(layer, BaseLinearLayerWithLoRA)  # (not the embeddings' or logits' LoRA)
        and isinstance(getattr(layer, "punica_wrapper", None), HiMoePunicaWrapperGPU)
    )
    if not kinds:
        return None
    wrappers = {id(layer.punica_wrapper): layer.punica_wrapper for layer in kinds}
    inputs = _zero_inputs(kinds, max(plan.sizes), plan.dtype)
    with (
        torch.no_grad(),
        _step_flags(wrappers.values()) as set_flags,
        recording_warm_up() as late,  # (each variant compiled after it is then logged)
        compiling(threads) as batch,
    ):
        if late is not None:
            late.listen(_count_late_compile)
        for layer, x in inputs:
            bias = _bias(layer)
            for count in plan.active_counts:
                set_flags(count)
                for rows in plan.sizes:
                    layer.apply(x[:rows], bias)
        for wrapper in wrappers.values():  # (its ops have now seen the layers' stacks)
            wrapper.compile_slot_refresh()
    logger.info(
        "hi-moe-lora: %s kernel variants for %d layer kinds x %d CUDA-graph sizes x %d counts of "
        "active adapters compiled on %d threads in %.1f s",
        "the" if batch.variants is None else batch.variants,
        len(kinds),
        len(plan.sizes),
        len(plan.active_counts),
        batch.threads,
        batch.seconds,
    )
    return batch.variants


def _count_late_compile(kernel: str) -> None:
    """A variant compiled after the warm-up, in ``hi_moe_lora_kernel_late_compiles_total``."""
    from plugins.metrics import plugin_metrics

    plugin_metrics().count_late_compile()


def distinct_kinds(layers: Iterable[Any]) -> list[Any]:
    """One layer of each kind: its class, its base's quantization, input size, output slices,
    LoRA stacks' shapes and dtype, DoRA table and bias, its wrapper, and the classes of the
    stacks' offsets the fused GEMM passes as integers (:func:`stack_offset_classes`; layers
    alike in all of these launch the same variants)."""
    from plugins.dora import SCALE_TABLE

    seen: dict[tuple[Any, ...], Any] = {}
    for layer in layers:
        base = layer.base_layer
        key = (
            type(layer),
            type(getattr(base, "quant_method", None)),
            _input_size(layer),
            tuple(getattr(layer, "output_slices", ())),
            tuple(tuple(a.shape) for a in layer.lora_a_stacked),
            tuple(tuple(b.shape) for b in layer.lora_b_stacked),
            layer.lora_a_stacked[0].dtype,
            getattr(layer, SCALE_TABLE, None) is not None,
            _bias(layer) is not None,
            id(layer.punica_wrapper),
            stack_offset_classes(layer),
        )
        seen.setdefault(key, layer)
    return list(seen.values())


def stack_offset_classes(layer: Any) -> tuple[str, ...]:
    """Triton's class (:func:`hi_moe_lora.kernels.warm_compile.integer_class`) of each of the
    layer's LoRA stacks' element offsets from the lowest-addressed one, the integers the fused
    GEMM and its shrink are launched with: stacks allocated 2**31 elements or more apart take
    ``i64`` offsets and another variant than stacks close together (the H200 capture of the
    twenty-fourth window compiled seven such variants after the warm-up)."""
    from hi_moe_lora.kernels.tensor_table import element_offsets
    from hi_moe_lora.kernels.warm_compile import integer_class

    table = element_offsets([*layer.lora_a_stacked, *layer.lora_b_stacked])
    return () if table is None else tuple(integer_class(offset) for offset in table[1])


def _input_size(layer: Any) -> int:
    base = layer.base_layer
    return int(getattr(base, "input_size_per_partition", getattr(base, "input_size", 0)))


def _zero_inputs(
    layers: list[Any], rows: int, dtype: torch.dtype | None
) -> list[tuple[Any, torch.Tensor]]:
    """Each layer with a zero input of ``rows`` rows, of ``dtype`` (None: its LoRA stacks'),
    one tensor shared by the layers of one input size, dtype and device."""
    shared: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}
    pairs = []
    for layer in layers:
        a = layer.lora_a_stacked[0]
        key = (_input_size(layer), dtype or a.dtype, a.device)
        if key not in shared:
            shared[key] = torch.zeros(rows, key[0], dtype=key[1], device=key[2])
        pairs.append((layer, shared[key]))
    return pairs


def _bias(layer: Any) -> torch.Tensor | None:
    """The bias vLLM's forward hands ``apply``: a column-parallel layer's own, unless its base
    adds it later; none for row-parallel layers (added after their all-reduce)."""
    if any(cls.__name__.startswith("RowParallel") for cls in type(layer).__mro__):
        return None
    base = layer.base_layer
    if getattr(base, "skip_bias_add", False):
        return None
    bias = getattr(base, "bias", None)
    return bias if isinstance(bias, torch.Tensor) else None


@contextmanager
def _step_flags(wrappers: Iterable[Any]) -> Iterator[Any]:
    """A setter of the wrappers' CPU step flags (no LoRA; active adapters) for a count of
    active adapters; the flags' values are restored when the block ends."""
    metas = [wrapper.token_mapping_meta for wrapper in wrappers]
    saved = [(meta.no_lora_flag_cpu.clone(), meta.num_active_loras_cpu.clone()) for meta in metas]

    def set_flags(count: int) -> None:
        for meta in metas:
            meta.no_lora_flag_cpu.fill_(count == 0)
            meta.num_active_loras_cpu.fill_(count)

    try:
        yield set_flags
    finally:
        for meta, (no_lora, active) in zip(metas, saved, strict=True):
            meta.no_lora_flag_cpu.copy_(no_lora)
            meta.num_active_loras_cpu.copy_(active)
