"""The base GEMM with one adapter's LoRA inside it: ``y = x W^T + delta`` in one launch.

Issue 20's 64-concurrent target leaves LoRA about 2 µs a projection; our launch after the base
GEMM costs 6-8 µs whatever its work, the chain of dependent round trips of a launch of its own
(benchmarks/README.md, tenth and eleventh windows). Here the LoRA of a step that serves one
adapter (its slot is the step's *fused slot*) rides in the base GEMM: the K loop multiplies the
``x`` tile it already holds by A's tile beside W's (the shrink costs A's bytes, not another
pass over ``x``), and the epilogue adds ``(x A^T · scale) B^T`` for its own output columns, for
the rows whose token belongs to that slot, before the one store. Every program computes its
rows' intermediate itself (A is small: 128 KiB a slice at rank 16 and K = 4,096, read from L2
by most programs).

A step of several adapters has no fused slot (-1): the kernel is then a plain GEMM (a second K
loop, without A's loads) and our launch after it serves every LoRA token, from the step's
*rest* work list (:class:`.worklist.WorkListBuffers`), which is the whole list then and empty in
a one-adapter step. Moving only the most frequent adapter into the GEMM did not pay: the launch
after it costs about what it costs for all of them (H200, 2026-11-28, 16 adapters: 3-6 µs a
projection slower than cuBLAS then our launch). Both values are per-step device data, so a
captured CUDA graph stays valid whatever the batch holds.

Layout: ``w`` is ``(n, k)`` (vLLM's ``weight``); the slices' A are ``(slots, 1, r, k)`` and
their B ``(slots, 1, n_i, r)``, all contiguous, of one dtype; the slices tile ``n`` in order,
each a whole number of column blocks (:func:`gemm_tile`). The intermediate is rounded to the
input dtype before the expand, as vLLM's kernels and ours do. DoRA (:class:`.layout.DoraEpilogue`):
the fused slot's rows are scaled by their magnitude ratios (``y = g (y + delta)``) when the slot
is live.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from .layout import DoraEpilogue
from .tensor_table import element_offsets

#: Token rows (least, most) of the calls that take the fused GEMM. Decode steps of up to 64
#: requests fit one row tile; below 33 rows the prototype's LoRA cost 4.5-20 µs inside the GEMM
#: against 1.3-5.4 at 64 (H200, ``benchmarks/kernels/bench_fused_gemm.py``, 2026-11-28).
FUSED_GEMM_ROWS = (33, 64)
#: Slices a call may have (qkv has three).
MAX_GEMM_SLICES = 3
#: The smallest row tile ``tl.dot`` takes, and the rank padding of the intermediate.
MIN_DOT = 16


class GemmLoRAShapeError(ValueError):
    """The call's tensors do not fit the fused GEMM's layout."""


@dataclass(frozen=True)
class GemmTile:
    """Columns per program, K step and pipeline depth of one launch."""

    block_n: int
    block_k: int
    stages: int


def gemm_tile(n: int, k: int) -> GemmTile:
    """The tile for an ``(n, k)`` weight at decode sizes (64 rows).

    From the prototype's sweep on an H200 (``benchmarks/kernels/bench_fused_gemm.py``,
    2026-11-28): 32 columns for square weights (o), 64 columns with a K step of 64 six deep for
    the widest (gate_up), 64 with a K step of 128 otherwise (qkv).
    """
    if n >= 4 * k:
        return GemmTile(64, 64, 6)
    if n <= k:
        return GemmTile(32, 128, 4)
    return GemmTile(64, 128, 4)


def _gemm_lora_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    w_ptr,
    lora_base_ptr,
    a_off0,
    a_off1,
    a_off2,
    b_off0,
    b_off1,
    b_off2,
    end0,
    end1,
    token_slot_ptr,
    fused_slot_ptr,
    y_ptr,
    dora_scales_ptr,
    dora_live_ptr,
    m,
    n,
    k,
    rank,
    scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    R_PAD: tl.constexpr,
    DORA: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """One program: ``BLOCK_N`` output columns (inside one slice) for all ``m`` rows."""
    n0 = tl.program_id(0) * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    ranks = tl.arange(0, R_PAD)
    row_ok = offs_m < m
    # The slice these columns fall in: its A and B (element offsets from the lowest-addressed
    # LoRA tensor) and its first column.
    first = tl.where(n0 >= end1, end1, tl.where(n0 >= end0, end0, 0))
    width = tl.where(n0 >= end1, n - end1, tl.where(n0 >= end0, end1 - end0, end0))
    a_off = tl.where(n0 >= end1, a_off2, tl.where(n0 >= end0, a_off1, a_off0))
    b_off = tl.where(n0 >= end1, b_off2, tl.where(n0 >= end0, b_off1, b_off0))
    slot = tl.load(fused_slot_ptr)
    slot_c = tl.maximum(slot, 0).to(tl.int64)
    a_ptrs = (
        lora_base_ptr + a_off + slot_c * rank * k + ranks[None, :] * k
        + tl.arange(0, BLOCK_K)[:, None]
    )  # fmt: skip
    b_ptrs = (
        lora_base_ptr + b_off + slot_c * width * rank
        + (offs_n - first)[None, :].to(tl.int64) * rank + ranks[:, None]
    )  # fmt: skip
    rank_ok = ranks < rank
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    x_ptrs = x_ptr + offs_m[:, None] * k + tl.arange(0, BLOCK_K)[None, :]
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * k + tl.arange(0, BLOCK_K)[:, None]
    if slot >= 0:  # (two K loops, each pipelined: no A traffic in a step without a fused slot)
        lora = tl.full((BLOCK_M, R_PAD), 0.0, tl.float32)
        for k0 in range(0, k, BLOCK_K):
            xt = tl.load(x_ptrs + k0, mask=row_ok[:, None], other=0.0)
            wt = tl.load(w_ptrs + k0)
            at = tl.load(a_ptrs + k0, mask=rank_ok[None, :], other=0.0)
            if UPCAST_DOT:
                xt = xt.to(tl.float32)
                wt = wt.to(tl.float32)
                at = at.to(tl.float32)
            acc = tl.dot(xt, wt, acc)
            lora = tl.dot(xt, at, lora)
        row_slot = tl.load(token_slot_ptr + offs_m, mask=row_ok, other=-1)
        mine = row_slot == slot
        inter = tl.where(mine[:, None], lora * scale, 0.0).to(x_ptr.dtype.element_ty)
        bt = tl.load(b_ptrs, mask=rank_ok[:, None], other=0.0)
        if UPCAST_DOT:
            inter = inter.to(tl.float32)
            bt = bt.to(tl.float32)
        acc = tl.dot(inter, bt, acc)
        if DORA:
            live = tl.load(dora_live_ptr + slot_c) != 0
            g = tl.load(dora_scales_ptr + slot_c * n + offs_n)
            acc = tl.where(mine[:, None] & live, acc * g[None, :], acc)
    else:
        for k0 in range(0, k, BLOCK_K):
            xt = tl.load(x_ptrs + k0, mask=row_ok[:, None], other=0.0)
            wt = tl.load(w_ptrs + k0)
            if UPCAST_DOT:
                xt = xt.to(tl.float32)
                wt = wt.to(tl.float32)
            acc = tl.dot(xt, wt, acc)
    tl.store(
        y_ptr + offs_m[:, None] * n + offs_n[None, :],
        acc.to(y_ptr.dtype.element_ty),
        mask=row_ok[:, None],
    )


@functools.cache
def _compiled() -> Any:
    return triton.jit(do_not_specialize=["m"])(_gemm_lora_kernel)


@functools.cache
def _interpreted() -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(_gemm_lora_kernel)


def _kernel_for(x: torch.Tensor) -> tuple[Any, bool]:
    """The compiled kernel for CUDA tensors, the interpreter's (dots in float32) otherwise."""
    if x.is_cuda and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return _compiled(), False
    return _interpreted(), True


def fusable(
    x: torch.Tensor, w: torch.Tensor, lora_b: Sequence[torch.Tensor], max_rows: int
) -> bool:
    """Whether a call of this shape takes :func:`launch_gemm_lora` (else: the base GEMM, then
    our launch for every LoRA token). Not where the input is wider than the output (down): there
    the op was 2.6-13 µs slower than cuBLAS then our launch (H200, 2026-11-28)."""
    if x.dim() != 2 or not 1 <= x.shape[0] <= max_rows or not 1 <= len(lora_b) <= MAX_GEMM_SLICES:
        return False
    if x.dtype not in (torch.float16, torch.bfloat16) or w.dtype != x.dtype:
        return False
    n, k = w.shape
    widths = [b.shape[2] for b in lora_b]
    return x.shape[1] == k <= n and _whole_tiles(widths, n, k, gemm_tile(n, k))


def _whole_tiles(widths: Sequence[int], n: int, k: int, tile: GemmTile) -> bool:
    """Whether slices of these widths cover ``n`` columns in whole column blocks of ``tile``,
    and ``k`` is a whole number of its K steps."""
    return (
        sum(widths) == n and all(wd % tile.block_n == 0 for wd in widths) and k % tile.block_k == 0
    )


def launch_gemm_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    token_slot: torch.Tensor,
    fused_slot: torch.Tensor,
    scale: float,
    dora: DoraEpilogue | None = None,
    tile: GemmTile | None = None,
) -> None:
    """``y = x W^T``, plus ``scale (x A_s^T) B_s^T`` on the rows whose ``token_slot`` is
    ``fused_slot[0]`` (``s``; none when it is negative), per slice."""
    m, k = x.shape
    n = w.shape[0]
    if not 1 <= len(lora_a) == len(lora_b) <= MAX_GEMM_SLICES:
        raise GemmLoRAShapeError(f"{len(lora_a)} A and {len(lora_b)} B slices")
    rank = lora_a[0].shape[2]
    widths = [b.shape[2] for b in lora_b]
    for a, b in zip(lora_a, lora_b, strict=True):
        fits = a.shape[2:] == (rank, k) and b.shape[3] == rank
        if not (fits and a.is_contiguous() and b.is_contiguous()):
            raise GemmLoRAShapeError(
                f"A {tuple(a.shape)} and B {tuple(b.shape)} do not fit rank {rank}, K {k}"
            )
    tile = tile or gemm_tile(n, k)
    if not _whole_tiles(widths, n, k, tile):
        raise GemmLoRAShapeError(
            f"slices {widths} of {n} columns, K {k}: not whole tiles of {tile}"
        )
    if not (x.is_contiguous() and w.is_contiguous() and y.is_contiguous()):
        raise GemmLoRAShapeError("x, W and y must be contiguous")
    table = element_offsets([*lora_a, *lora_b])
    if table is None:
        raise GemmLoRAShapeError("A and B must share a dtype and a device")
    base, offsets = table
    slices = len(widths)
    a_offs = [offsets[min(i, slices - 1)] for i in range(MAX_GEMM_SLICES)]
    b_offs = [offsets[slices + min(i, slices - 1)] for i in range(MAX_GEMM_SLICES)]
    ends = [sum(widths[: i + 1]) if i + 1 < slices else n for i in range(2)]
    kernel, upcast = _kernel_for(x)
    dora_scales = dora.scales if dora is not None else y
    dora_live = dora.live if dora is not None else token_slot
    block_m = max(MIN_DOT, triton.next_power_of_2(m))
    kernel[(n // tile.block_n,)](
        x, w, base, *a_offs, *b_offs, *ends, token_slot, fused_slot, y, dora_scales, dora_live,
        m, n, k, rank, scale,
        BLOCK_M=block_m, BLOCK_N=tile.block_n, BLOCK_K=tile.block_k,
        R_PAD=max(MIN_DOT, triton.next_power_of_2(rank)), DORA=dora is not None,
        UPCAST_DOT=upcast, num_warps=4, num_stages=tile.stages,
    )  # fmt: skip
