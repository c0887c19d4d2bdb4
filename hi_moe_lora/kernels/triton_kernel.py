"""The fused multi-LoRA Triton kernel: shrink and expand in one launch per wrapped linear.

One program takes work items (token tile, output tile group) from a device-side work list:
it gathers the tile's token rows of ``x``, reduces ``x @ A[slot].T`` over the input width into a
rank-sized float32 intermediate held in registers (only the adapter's real rank is read), scales
and rounds it to the weights' dtype, then multiplies by ``B[slot]`` for each of its output tiles
and adds the result into ``y``. All slices of a packed layer (qkv, gate_up) are output tiles of
the same launch. No memset, no float32 buffer in memory, no atomics.

The grid is a persistent one sized from static values only (the call's token count, the slot
count, the layer's widths); the number of tiles actually present this step is read from the work
list on the device, so a CUDA graph captured once stays valid for every step.

Written for both Triton 3.6 (GPU hosts) and 3.9 (the CPU interpreter of CI). The 3.9
interpreter miscomputes ``tl.dot`` on bfloat16 operands, so on CPU bfloat16 products are taken in
float32 after the same rounding points (``UPCAST_DOT``); the GPU path multiplies in bfloat16.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from .config import TileConfig, choose_config
from .reference import stacked_view
from .worklist import upper_bound_tiles

MAX_SLICES = 3


class FusedLoRAShapeError(ValueError):
    """The stacked weights or activations do not have the layout the kernel needs."""


def _fused_lora_kernel(
    x_ptr,
    y_ptr,
    a_ptr,
    b_ptr,
    tok_ptr,
    tiles_ptr,
    rank_ptr,
    a_off1,
    a_off2,
    b_off1,
    b_off2,
    n0,
    n1,
    n2,
    m_rows,
    k_dim,
    stride_xm,
    stride_xk,
    stride_ym,
    stride_yn,
    a_slot_stride,
    a_row_stride,
    b_row_stride,
    y_col_offset,
    scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    N_GROUP: tl.constexpr,
    ADD_INPUTS: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    num_tiles = tl.load(tiles_ptr)
    span = BLOCK_N * N_GROUP
    t0 = (n0 + span - 1) // span
    t1 = (n1 + span - 1) // span
    t2 = (n2 + span - 1) // span
    n_items = t0 + t1 + t2
    total = num_tiles * n_items
    offs_m = tl.arange(0, BLOCK_M)
    offs_r = tl.arange(0, BLOCK_R)
    offs_kb = tl.arange(0, BLOCK_K)
    offs_nb = tl.arange(0, BLOCK_N)
    for w in range(pid, total, nprog):
        mt = w // n_items
        item = w - mt * n_items
        slot = tl.load(tiles_ptr + 1 + 3 * mt)
        start = tl.load(tiles_ptr + 2 + 3 * mt)
        count = tl.load(tiles_ptr + 3 + 3 * mt)
        rank = tl.load(rank_ptr + slot)
        in1 = item >= t0
        in2 = item >= t0 + t1
        a_off = tl.where(in2, a_off2, tl.where(in1, a_off1, 0)).to(tl.int64)
        b_off = tl.where(in2, b_off2, tl.where(in1, b_off1, 0)).to(tl.int64)
        n_s = tl.where(in2, n2, tl.where(in1, n1, n0))
        col_base = tl.where(in2, n0 + n1, tl.where(in1, n0, 0))
        local = item - tl.where(in2, t0 + t1, tl.where(in1, t0, 0))

        m_mask = offs_m < count
        tok = tl.load(tok_ptr + start + offs_m, mask=m_mask, other=0)
        m_mask = m_mask & (tok < m_rows)
        tok64 = tok.to(tl.int64)
        r_mask = offs_r < rank

        a_base = a_ptr + a_off + slot.to(tl.int64) * a_slot_stride
        inter = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
        for k0 in range(0, k_dim, BLOCK_K):
            offs_k = k0 + offs_kb
            k_mask = offs_k < k_dim
            xt = tl.load(
                x_ptr + tok64[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                mask=m_mask[:, None] & k_mask[None, :],
                other=0.0,
            )
            at = tl.load(
                a_base + offs_r[None, :] * a_row_stride + offs_k[:, None],
                mask=r_mask[None, :] & k_mask[:, None],
                other=0.0,
            )
            if UPCAST_DOT:
                inter += tl.dot(xt.to(tl.float32), at.to(tl.float32))
            else:
                inter += tl.dot(xt.to(at.dtype), at)
        inter_lp = (inter * scale).to(b_ptr.dtype.element_ty)

        b_base = b_ptr + b_off + slot.to(tl.int64) * n_s * b_row_stride
        for g in range(N_GROUP):
            offs_n = local * span + g * BLOCK_N + offs_nb
            n_mask = offs_n < n_s
            bt = tl.load(
                b_base + offs_n[None, :] * b_row_stride + offs_r[:, None],
                mask=r_mask[:, None] & n_mask[None, :],
                other=0.0,
            )
            if UPCAST_DOT:
                out = tl.dot(inter_lp.to(tl.float32), bt.to(tl.float32))
            else:
                out = tl.dot(inter_lp, bt)
            y_ptrs = (
                y_ptr
                + tok64[:, None] * stride_ym
                + (y_col_offset + col_base + offs_n)[None, :] * stride_yn
            )
            y_mask = m_mask[:, None] & n_mask[None, :]
            if ADD_INPUTS:
                out += tl.load(y_ptrs, mask=y_mask, other=0.0).to(tl.float32)
            tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=y_mask)


@functools.cache
def _compiled_kernel() -> Any:
    return triton.jit(do_not_specialize=["a_off1", "a_off2", "b_off1", "b_off2"])(
        _fused_lora_kernel
    )


@functools.cache
def _interpreted_kernel() -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(_fused_lora_kernel)


@functools.cache
def _num_sms(device_index: int) -> int:
    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


def _check_layout(
    x: torch.Tensor, y: torch.Tensor, a: list[torch.Tensor], b: list[torch.Tensor]
) -> None:
    if not 1 <= len(a) <= MAX_SLICES or len(a) != len(b):
        raise FusedLoRAShapeError(f"need 1..{MAX_SLICES} slices with A and B, got {len(a)}")
    if x.dim() != 2 or y.dim() != 2:
        raise FusedLoRAShapeError("x and y must be 2-D (tokens, features)")
    if x.shape[0] != y.shape[0]:
        raise FusedLoRAShapeError(f"x has {x.shape[0]} rows, y has {y.shape[0]}")
    first = a[0]
    for a_s, b_s in zip(a, b, strict=True):
        if a_s.shape != first.shape or a_s.dtype != first.dtype or b_s.dtype != first.dtype:
            raise FusedLoRAShapeError("all slices' A must share shape and dtype with B")
        if not (a_s.is_contiguous() and b_s.is_contiguous()):
            raise FusedLoRAShapeError("stacked LoRA weights must be contiguous")
        if b_s.shape[0] != a_s.shape[0] or b_s.shape[2] != a_s.shape[1]:
            raise FusedLoRAShapeError(
                f"B {tuple(b_s.shape)} does not match A {tuple(a_s.shape)} (slots, rank)"
            )
    if first.shape[2] != x.shape[1]:
        raise FusedLoRAShapeError(f"A takes {first.shape[2]} inputs, x has {x.shape[1]}")


def launch_fused_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    token_indices: torch.Tensor,
    tiles_by_block_m: dict[int, torch.Tensor],
    slot_rank: torch.Tensor,
    scale: float,
    offset_start: int = 0,
    add_inputs: bool = True,
    config: TileConfig | None = None,
    max_programs: int | None = None,
) -> TileConfig:
    """Launch the kernel once for all slices; returns the tile configuration it used."""
    a = [stacked_view(t) for t in lora_a]
    b = [stacked_view(t) for t in lora_b]
    _check_layout(x, y, a, b)
    m = x.shape[0]
    widths = [t.shape[1] for t in b]
    if offset_start + sum(widths) > y.shape[1]:
        raise FusedLoRAShapeError(f"slices end at {offset_start + sum(widths)} > {y.shape[1]}")
    on_gpu = x.is_cuda
    num_sms = _num_sms(x.device.index or 0) if on_gpu else 4
    cfg = config or choose_config(m, x.shape[1], sum(widths), a[0].shape[1], num_sms)
    tiles = tiles_by_block_m[cfg.block_m]
    n_slots = a[0].shape[0]
    span = cfg.block_n * cfg.n_group
    n_items = sum(-(-w // span) for w in widths)
    work_ub = upper_bound_tiles(m, n_slots, cfg.block_m) * n_items
    cap = max_programs if max_programs is not None else (num_sms * 4 if on_gpu else 8)
    grid = (max(1, min(work_ub, cap)),)
    elem = a[0].element_size()
    base_a = a[0].data_ptr()
    base_b = b[0].data_ptr()
    a_offs = [(t.data_ptr() - base_a) // elem for t in a[1:]] + [0, 0]
    b_offs = [(t.data_ptr() - base_b) // elem for t in b[1:]] + [0, 0]
    ns = [*widths, 0, 0]
    kernel = _compiled_kernel() if on_gpu else _interpreted_kernel()
    kernel[grid](
        x,
        y,
        a[0],
        b[0],
        token_indices,
        tiles,
        slot_rank,
        a_offs[0],
        a_offs[1],
        b_offs[0],
        b_offs[1],
        ns[0],
        ns[1],
        ns[2],
        m,
        x.shape[1],
        x.stride(0),
        x.stride(1),
        y.stride(0),
        y.stride(1),
        a[0].stride(0),
        a[0].stride(1),
        b[0].stride(1),
        offset_start,
        float(scale),
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        BLOCK_R=cfg.block_r,
        N_GROUP=cfg.n_group,
        ADD_INPUTS=add_inputs,
        UPCAST_DOT=not on_gpu and a[0].dtype == torch.bfloat16,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return cfg
