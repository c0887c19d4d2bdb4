"""The fused GEMM's kernels (:mod:`.gemm_lora`) compiled ahead of time for a CUDA target, each
argument specialised as a served Llama-shaped call's is.

No GPU is needed (Triton's own ptxas), so tests catch on a CPU what only the compiler sees: the
constexpr paths a form compiles (a launch without the shrink once compiled the helpers' branch
and failed on a GPU host), the device functions the kernels call, and each kernel's shared memory,
which decides how many of its programs share an SM (the shrink beside the GEMM exists because one
launch's helper programs were allotted the GEMM's).
"""

from __future__ import annotations

from typing import Any, Literal

from .gemm_lora import (
    KERNEL_CALLEES,
    NO_EXPAND,
    NO_SHRINK_INSIDE,
    _gemm_lora_kernel,
    _shrink_helpers_kernel,
    expand_dots,
    row_tile,
)
from .gemm_shrink import SHRINK_BLOCK_K
from .gemm_tiles import GemmTile, SeveralRoute
from .kernel_flavour import _compiled, compile_ahead, served_divisible
from .worklist import HEADER_SIZE

#: Where a compiled GEMM's several-adapter LoRA comes from: none (a one-adapter or plain
#: launch), a shrink launched ahead, the shrink inside the launch, or its helpers beside it.
ExpandForm = Literal["none", "ahead", "inside", "beside"]

#: The form in which each route for several adapters launches the GEMM (``ours`` and ``fused``
#: expand nothing in the epilogue; the split forms differ in where the shrink runs).
ROUTE_FORMS: dict[SeveralRoute, ExpandForm] = {
    SeveralRoute.OURS: "none",
    SeveralRoute.FUSED: "none",
    SeveralRoute.SPLIT: "ahead",
    SeveralRoute.ONE_LAUNCH: "inside",
    SeveralRoute.SHRINK_BESIDE: "beside",
}

#: Pointer and integer types of the kernels' arguments as the served launches pass them (the
#: pointers a form does not read are ``y``'s, bf16); the rest are 32-bit integers.
_TYPES = {
    "x_ptr": "*bf16",
    "w_ptr": "*bf16",
    "lora_base_ptr": "*bf16",
    "y_ptr": "*bf16",
    "dora_scales_ptr": "*bf16",
    "dora_live_ptr": "*i32",
    "token_slot_ptr": "*i32",
    "fused_slot_ptr": "*i32",
    "partials_ptr": "*bf16",
    "arrivals_ptr": "*i32",
    "rest_ptr": "*i32",
    "shrunk_ptr": "*fp32",
    "shrink_tiles_ptr": "*i32",
    "shrink_partials_ptr": "*fp32",
    "shrink_arrivals_ptr": "*i32",
    "sync_ptr": "*i32",
    "scale": "fp32",
    **{f"{side}_off{i}": "i64" for side in "ab" for i in range(3)},
}
#: The shrink's constexprs in these compiles: three slices of rank 16, K = 4,096 in runs of 512.
_SHRINK = {
    "SHRINK_JOBS": 456,
    "SHRINK_TILE_M": 16,
    "SHRINK_BLOCK_K": SHRINK_BLOCK_K,
    "SHRINK_STEPS": 4,
    "SHRINK_RUNS": 8,
}


def _compile(function: Any, constexprs: dict[str, Any], arch: int, warps: int, stages: int) -> Any:
    kernel = _compiled(function, ("m",), KERNEL_CALLEES)
    options = {"num_warps": warps, "num_stages": stages}
    aligned = served_divisible(kernel, _TYPES, constexprs)
    return compile_ahead(kernel, _TYPES, constexprs, arch, options=options, divisible_by_16=aligned)


def compile_gemm_for_target(
    tile: GemmTile,
    form: ExpandForm,
    arch: int = 90,
    slot_rank: int = 16,
    may_fuse: bool = True,
    rows: int = 64,
) -> Any:
    """The fused GEMM's kernel for ``rows`` rows (its row tile: the next power of two, at least
    16) of a qkv-like call (three slices, slots of ``slot_rank``: above 16 the split form's
    expand has later rank parts) on ``tile``, its several-adapter LoRA in ``form``, compiled for
    ``sm_<arch>``; ``may_fuse=False``: as a step known to serve several adapters launches it
    (no K loop reading A)."""
    constexprs: dict[str, Any] = {
        "BLOCK_M": row_tile(rows),
        "BLOCK_N": tile.block_n,
        "BLOCK_K": tile.block_k,
        "R_PAD": slot_rank,
        "SPLIT_K": tile.split_k,
        "FUSED": may_fuse,
        "FUSED_RANK": True,
        "DORA": False,
        "HEADER": HEADER_SIZE,
        "UPCAST_DOT": False,
        "BESIDE_PROGRAMS": 0,
        **NO_EXPAND,
    }
    if form != "none":
        chunk, chunks = expand_dots(16, rows)  # (16 adapters)
        constexprs |= {
            "EXPAND": True, "CHUNK": chunk, "CHUNKS": chunks, "SLICES": 3, "REST_TILE_M": 64,
        }  # fmt: skip
        constexprs |= NO_SHRINK_INSIDE if form == "ahead" else _SHRINK
    if form == "beside":
        constexprs["BESIDE_PROGRAMS"] = 132
    return _compile(_gemm_lora_kernel, constexprs, arch, tile.warps, tile.stages)


def compile_helpers_for_target(arch: int = 90) -> Any:
    """The shrink's helpers' own launch (the shrink beside the GEMM), for the same call."""
    constexprs = {
        **_SHRINK,
        "HEADER": HEADER_SIZE,
        "R_PAD": 16,
        "SLICES": 3,
        "UPCAST_DOT": False,
        "BESIDE_PROGRAMS": 96,
    }
    return _compile(_shrink_helpers_kernel, constexprs, arch, warps=4, stages=1)
