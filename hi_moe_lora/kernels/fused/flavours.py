"""The fused kernel in its two flavours: compiled by Triton's JIT (GPU) or run by Triton's
interpreter (CPU, tests), and compiled ahead of time for a CUDA target without a GPU.

The kernel resolves its callees through its globals, and a compiled kernel needs JIT functions
there while the interpreter needs interpreted ones, so each flavour gets its own copy of the
device functions' globals (the source, and so the compiled code, is shared).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import triton

from hi_moe_lora.kernels.config import TileConfig
from hi_moe_lora.kernels.kernel_flavour import compile_ahead, served_divisible, with_globals

from . import expand, kernel, records, scratch, shrink


class KernelCompileError(RuntimeError):
    """The kernel's JIT function does not declare what the launcher passes as constexpr."""


#: Device functions the kernel calls, in the order they must be wrapped (callees first).
DEVICE_FUNCTIONS = (
    records.tile_record,
    scratch.mma,
    scratch.rank_tile_offsets,
    scratch.sum_partials,
    scratch.intermediate,
    shrink.shrink_step,
    shrink.shrink_partial,
    shrink.shrink_job,
    expand.b_tile,
    expand.output_tile,
    expand.store_output,
    expand.expand_job,
    kernel.run_job,
    records.zero_counters,
    records.jobs_of_width,
    records.split_if_fits,
)


def flavour(wrap: Callable[[Callable[..., Any]], Any]) -> Callable[..., Any]:
    """The kernel function with its device functions wrapped by ``wrap`` (JIT or interpreter).

    The kernel resolves its callees through its globals, and a compiled kernel needs JIT
    functions there while the interpreter needs interpreted ones, so each flavour gets its own
    copy of the device modules' globals (the source, and so the compiled code, is shared).
    """
    scope: dict[str, Any] = {}
    for module in (records, scratch, shrink, expand, kernel):
        scope.update(vars(module))
    for fn in DEVICE_FUNCTIONS:
        scope[fn.__name__] = wrap(with_globals(fn, scope))
    return with_globals(kernel.fused_lora_kernel, scope)


#: Arguments whose values change between calls of one layer: not specialised, so that they do
#: not multiply compiled variants.
VARYING_ARGS = ("m_rows", "pair_cap", "min_rank", "split_jobs")


@functools.cache
def compiled_kernel() -> Any:
    return triton.jit(do_not_specialize=list(VARYING_ARGS))(flavour(triton.jit))


@functools.cache
def interpreted_kernel() -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(flavour(InterpretedFunction))


def kernel_constexprs(
    cfg: TileConfig,
    num_slices: int,
    k_split: int,
    reductions: tuple[bool, bool],
    add_inputs: bool,
    dora: bool,
    upcast_dot: bool,
) -> dict[str, Any]:
    """The kernel's compile-time arguments for one launch configuration, by parameter name
    (the launcher's and the ahead-of-time compile's one list). ``reductions``: whether narrow
    and wide tiles reduce their partials in the expand jobs."""
    return {
        "NUM_SLICES": num_slices,
        "K_SPLIT": k_split,
        "K_ITERS": cfg.k_iters,
        "BLOCK_M": cfg.block_m,
        "BLOCK_N": cfg.block_n,
        "BLOCK_K": cfg.block_k,
        "BLOCK_R": cfg.block_r,
        "RANK_PAD": cfg.rank_pad,
        "WIDE_SPLIT": cfg.wide_split,
        "N_GROUP": cfg.n_group,
        "WIDE_K_STEPS": cfg.wide_k_steps,
        "REDUCE_IN_EXPAND": reductions[0],
        "WIDE_REDUCE_IN_EXPAND": reductions[1],
        "ADD_INPUTS": add_inputs,
        "DORA": dora,
        "UPCAST_DOT": upcast_dot,
    }


def compile_for_target(
    num_slices: int,
    cfg: TileConfig,
    reduce_in_expand: bool,
    arch: int = 90,
    dtype: str = "bf16",
    add_inputs: bool = True,
    k_split: int = 4,
    wide_reduce_in_expand: bool | None = None,
    dora: bool = False,
) -> Any:
    """Compile the kernel ahead of time for CUDA ``sm_<arch>`` (no GPU needed; tests, tuning).
    Wide tiles take ``reduce_in_expand`` too unless ``wide_reduce_in_expand`` says otherwise;
    ``dora`` compiles the DoRA epilogue in.

    The variant is specialised as Triton specialises a serving launch: ``x`` and ``y`` have unit
    column strides (constants), pointers are 16-byte aligned and the sizes and strides are
    multiples of 16 (as in every Llama-shaped layer), which is what lets the loads be vectorised.
    """
    kernel = compiled_kernel()
    wide_reduce = reduce_in_expand if wide_reduce_in_expand is None else wide_reduce_in_expand
    constexprs = kernel_constexprs(
        cfg, num_slices, k_split, (reduce_in_expand, wide_reduce), add_inputs, dora, False
    )
    declared = {param.name for param in kernel.params if param.is_constexpr}
    if declared != set(constexprs):
        raise KernelCompileError(f"constexpr parameters {sorted(declared)} != {sorted(constexprs)}")
    constexprs |= {"stride_xk": 1, "stride_yn": 1}
    pointers = {
        "tiles_ptr": "*i32",
        "ctr_ptr": "*i32",
        "part_ptr": "*fp32",
        "dora_ptr": "*fp32",
        "dora_on_ptr": "*i32",
    }
    names: list[str] = kernel.arg_names
    types = {
        name: pointers.get(name, f"*{dtype}") if name.endswith("_ptr") else "fp32"
        for name in names
        if name.endswith("_ptr") or name == "scale"
    }
    aligned = served_divisible(kernel, types, constexprs)
    options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    return compile_ahead(kernel, types, constexprs, arch, options=options, divisible_by_16=aligned)
