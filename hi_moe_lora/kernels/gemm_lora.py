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

A step of several adapters has no fused slot (-1): its K loop is then a plain GEMM's (a second K
loop, without A's loads). Their LoRA takes the *split form* (:class:`GemmExpand`): a short
launch ahead shrinks every token of the step's *rest* work list (:mod:`.gemm_shrink`; the whole
list then, none in a one-adapter step) and this kernel's epilogue adds each token's expand by
its own adapter's B, eight adapters a ``tl.dot``, masked to their rows, each adapter at its own
rank (in parts of 16 ranks: a rank-16 adapter in rank-64 slots takes one part, as in rank-16
slots). That replaces our launch after the GEMM, which cost 12-20 µs a projection at 16 adapters
(H200, 2026-11-28; moving only the most frequent adapter into the GEMM did not pay then: the
launch after it cost about what it cost for all of them). The fused slot and the rest list are
per-step device data, so a captured CUDA graph stays valid whatever the batch holds. In one
launch (:class:`GemmExpand`'s ``inside``), the shrink's jobs run inside this kernel instead:
helper programs after the GEMM's take them from the start, the GEMM's programs take what is left
after their K loop, and each epilogue waits for its slice's sums (:func:`_gemm_lora_kernel` says
why it cannot deadlock). With ``beside``, the helpers run in a launch of their own on a side
stream instead (:func:`_shrink_helpers_kernel`), whose programs are small enough to share SMs
with the GEMM's.

The same kernel with ``FUSED`` off is a plain GEMM (:func:`launch_plain_gemm`), for the calls
where it beats cuBLAS, or, with the split form, the GEMM of a step known to serve several
adapters (no K loop that reads A: fewer registers). A tile may split K
(:class:`.gemm_tiles.GemmTile`): each run's program adds its share of the LoRA (``x A^T B^T`` is
linear in K's runs), stores its fp32 partial, and the last program of its column block to arrive
sums the partials in run order, so the result does not depend on which arrives last. Which tile,
and whether the LoRA rides inside at all, comes from the measured table of :mod:`.gemm_tiles`.

Layout: ``w`` is ``(n, k)`` (vLLM's ``weight``); the slices' A are ``(slots, 1, r, k)`` and
their B ``(slots, 1, n_i, r)``, all contiguous, of one dtype; the slices tile ``n`` in order,
each a whole number of column blocks. Unsplit, the intermediate is rounded to the input dtype
before the expand, as vLLM's kernels and ours do; split, each run's share stays in fp32 (the
expand's dot then takes it at tf32 on the GPU, finer than the input dtype). DoRA
(:class:`.layout.DoraEpilogue`): the fused slot's rows, and in the split form each rest row by
its own slot's row of the table, are scaled by their magnitude ratios (``y = g (y + delta)``,
per column, so per run too) when the slot is live. (vLLM's LoRA layers all carry a DoRA table,
of ones until a DoRA adapter is activated, so a served split form runs this too.)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import triton
import triton.language as tl

from .gemm_shrink import (
    RANK_PART,
    SHRINK_BLOCK_K,
    ShrinkLaunch,
    rank_padding,
    shrink_program,
    take_shrink_jobs,
)
from .gemm_tiles import (
    MAX_PLAN_ROWS,
    GemmPlan,
    GemmTile,
    at_slot_rank,
    measured_slot_rank,
    plan_for,
)
from .kernel_flavour import kernel_for
from .layout import DoraEpilogue
from .tensor_table import element_offsets
from .warm_compile import launch
from .worklist import HEADER_SIZE

#: Token rows (least, most) of the calls that take the fused GEMM. Decode steps of up to 64
#: requests fit one row tile; below 33 rows the prototype's LoRA cost 4.5-20 µs inside the GEMM
#: against 1.3-5.4 at 64 (H200, ``benchmarks/kernels/bench_fused_gemm.py``, 2026-11-28), and a
#: one-adapter step's still adds up to 50 µs a call at 32 rows against our launch's 7-9
#: (2026-11-29). A plan's ``few_rows`` lets steps of several adapters below the least take a
#: split form.
FUSED_GEMM_ROWS = (33, MAX_PLAN_ROWS)
#: Slices a call may have (qkv has three).
MAX_GEMM_SLICES = 3
#: The smallest row tile ``tl.dot`` takes, and the rank padding of the intermediate.
MIN_DOT = 16


class GemmLoRAShapeError(ValueError):
    """The call's tensors do not fit the fused GEMM's layout."""


#: The one-launch split form's counters (``sync``, int32, zero between launches): shrink jobs
#: taken, programs finished, then each slice's finished shrink sums.
SYNC_JOBS = tl.constexpr(0)
SYNC_FINISHED = tl.constexpr(1)
SYNC_DONE = tl.constexpr(2)
SYNC_COUNTERS = tl.constexpr(2 + MAX_GEMM_SLICES)


def _finish_launch(sync_ptr, BESIDE_PROGRAMS: tl.constexpr):  # type: ignore[no-untyped-def]
    """Count this program finished; the last of the programs that share the ``sync`` counters
    (this launch's, and the ``BESIDE_PROGRAMS`` of a launch beside it that shares them) zeroes
    them (a CUDA graph replays the launches as they left them)."""
    finished = tl.atomic_add(sync_ptr + SYNC_FINISHED, 1, sem="acq_rel", scope="gpu")
    if finished == tl.num_programs(0) + BESIDE_PROGRAMS - 1:
        for counter in tl.static_range(SYNC_COUNTERS):
            tl.atomic_xchg(sync_ptr + counter, 0, sem="relaxed", scope="gpu")


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
    partials_ptr,
    arrivals_ptr,
    rest_ptr,
    shrunk_ptr,
    shrink_tiles_ptr,
    shrink_partials_ptr,
    shrink_arrivals_ptr,
    sync_ptr,
    m,
    n,
    k,
    rank,
    scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    R_PAD: tl.constexpr,
    SPLIT_K: tl.constexpr,
    FUSED: tl.constexpr,
    FUSED_RANK: tl.constexpr,
    DORA: tl.constexpr,
    EXPAND: tl.constexpr,
    CHUNK: tl.constexpr,
    CHUNKS: tl.constexpr,
    SLICES: tl.constexpr,
    REST_TILE_M: tl.constexpr,
    HEADER: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    SHRINK_JOBS: tl.constexpr,
    SHRINK_TILE_M: tl.constexpr,
    SHRINK_BLOCK_K: tl.constexpr,
    SHRINK_STEPS: tl.constexpr,
    SHRINK_RUNS: tl.constexpr,
    BESIDE_PROGRAMS: tl.constexpr,
):
    """One GEMM program: ``BLOCK_N`` output columns (inside one slice) for all ``m`` rows, over
    one of ``SPLIT_K`` equal runs of K, from the grid's two axes. With a shrink inside
    (``SHRINK_JOBS`` above 0: the split form in one launch), one axis of GEMM programs and, after
    them, helper programs that take the shrink's jobs by ticket from the start
    (:func:`.gemm_shrink.take_shrink_jobs`), on the SMs the GEMM leaves free, under its K loop.
    A GEMM program's epilogue waits until its slice's sums are all counted, taking any job still
    untaken while it waits: it waits only while every job is taken, each by a program running it
    that waits on nothing, so the launch cannot deadlock whatever the GPU schedules (helpers that
    start late find no job and return). The epilogue's loads that depend on nothing the launch
    writes (B, the list's owners, the rows' slots) are issued before the K loop or the wait,
    so the wait and the loads after it are the only round trips left after the K loop. The
    helpers may instead run in a launch of their own beside this one
    (:func:`_shrink_helpers_kernel`, on a side stream: a smaller program, so several fit an SM
    beside a GEMM program); this launch then holds the GEMM's programs only
    (``BESIDE_PROGRAMS``: the helpers', 0 in one launch), and the same argument holds. The
    last program of both launches to finish zeroes the counters."""
    if SHRINK_JOBS == 0:
        column_block, k_index = tl.program_id(0), tl.program_id(1)
    else:
        blocks = n // BLOCK_N
        column_block, k_index = tl.program_id(0) % blocks, tl.program_id(0) // blocks
        if k_index >= SPLIT_K:  # (a helper)
            take_shrink_jobs(
                x_ptr, lora_base_ptr, a_off0, a_off1, a_off2, shrink_tiles_ptr,
                shrink_partials_ptr, shrink_arrivals_ptr, shrunk_ptr, sync_ptr + SYNC_JOBS,
                sync_ptr + SYNC_DONE, m, k, rank, SHRINK_JOBS, SHRINK_TILE_M, HEADER,
                SHRINK_BLOCK_K, SHRINK_STEPS, SHRINK_RUNS, R_PAD, SLICES, UPCAST_DOT,
            )  # fmt: skip
            _finish_launch(sync_ptr, BESIDE_PROGRAMS)
            return
    n0 = column_block * BLOCK_N
    k_run = k // SPLIT_K
    k_first = k_index * k_run
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
    own_rank = rank  # (the fused slot's adapter's rank: the slots' unless the step says it)
    if FUSED:  # (constexpr branches)
        slot = tl.load(fused_slot_ptr)
        if FUSED_RANK:  # (beside the slot, one round trip: A and B read up to it only)
            own_rank = tl.minimum(tl.load(fused_slot_ptr + 1), rank)
    else:  # (the plain GEMM: no slot to read)
        slot = column_block * 0 - 1
    slot_c = tl.maximum(slot, 0).to(tl.int64)
    a_ptrs = (
        lora_base_ptr + a_off + slot_c * rank * k + ranks[None, :] * k
        + k_first + tl.arange(0, BLOCK_K)[:, None]
    )  # fmt: skip
    b_ptrs = (
        lora_base_ptr + b_off + slot_c * width * rank
        + (offs_n - first)[None, :].to(tl.int64) * rank + ranks[:, None]
    )  # fmt: skip
    rank_ok = ranks < own_rank
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    if EXPAND:  # (the split form's small loads before the K loop, off the epilogue's chain)
        rest = tl.load(rest_ptr)
        wide = tl.load(rest_ptr + 1)  # (the rest's tiles of adapters wider than a rank part)
        rest_slot = tl.load(token_slot_ptr + offs_m, mask=row_ok, other=-1)
        piece = tl.where(n0 >= end1, 2, tl.where(n0 >= end0, 1, 0))
        part_ranks = tl.arange(0, RANK_PART)
        shrunk_ptrs = (
            shrunk_ptr + (offs_m[:, None] * SLICES + piece) * R_PAD + part_ranks[None, :]
        )  # fmt: skip
        shrunk_ok = ((rest_slot >= 0) & (offs_m < m * (rest > 0)))[:, None]  # (none if empty)
        if SHRINK_JOBS == 0:
            shrunk = tl.load(shrunk_ptrs, mask=shrunk_ok, other=0.0)
        else:  # (the sums the epilogue waits for)
            owed = tl.load(shrink_tiles_ptr)
        # The first dot's owners (the first CHUNK tiles of the list: a step of up to CHUNK
        # adapters takes no other): their B loads after the K loop then depend on nothing.
        stacked = tl.arange(0, CHUNK * RANK_PART)
        first_owner = tl.load(
            rest_ptr + HEADER + (stacked // RANK_PART) * (3 + REST_TILE_M),
            mask=stacked // RANK_PART < rest,
            other=-1,
        )
    x_ptrs = x_ptr + offs_m[:, None] * k + k_first + tl.arange(0, BLOCK_K)[None, :]
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * k + k_first + tl.arange(0, BLOCK_K)[:, None]
    if slot >= 0:  # (two K loops, each pipelined: no A traffic in a step without a fused slot)
        # The epilogue's loads ahead of the K loop, so they wait on nothing after it: the rows'
        # slots, B where the slots are rank 16 (a few registers a thread; wider slots' B would
        # crowd the K loop's), DoRA's scales.
        row_slot = tl.load(token_slot_ptr + offs_m, mask=row_ok, other=-1)
        if R_PAD <= RANK_PART:
            bt = tl.load(b_ptrs, mask=rank_ok[:, None], other=0.0)
        if DORA:
            live = tl.load(dora_live_ptr + slot_c) != 0
            g = tl.load(dora_scales_ptr + slot_c * n + offs_n)
        lora = tl.full((BLOCK_M, R_PAD), 0.0, tl.float32)
        for k0 in range(0, k_run, BLOCK_K):
            xt = tl.load(x_ptrs + k0, mask=row_ok[:, None], other=0.0)
            wt = tl.load(w_ptrs + k0)
            at = tl.load(a_ptrs + k0, mask=rank_ok[None, :], other=0.0)
            if UPCAST_DOT:
                xt = xt.to(tl.float32)
                wt = wt.to(tl.float32)
                at = at.to(tl.float32)
            acc = tl.dot(xt, wt, acc)
            lora = tl.dot(xt, at, lora)
        mine = row_slot == slot
        if R_PAD > RANK_PART:
            bt = tl.load(b_ptrs, mask=rank_ok[:, None], other=0.0)
        if SPLIT_K == 1:  # (the whole intermediate: rounded to the input dtype, as vLLM does)
            inter = tl.where(mine[:, None], lora * scale, 0.0).to(x_ptr.dtype.element_ty)
            if UPCAST_DOT:
                inter = inter.to(tl.float32)
                bt = bt.to(tl.float32)
            acc = tl.dot(inter, bt, acc)
        else:  # (a K run's share of it: kept in fp32, so the shares add up to the whole)
            inter = tl.where(mine[:, None], lora * scale, 0.0)
            acc = tl.dot(inter, bt.to(tl.float32), acc)
        if DORA:
            acc = tl.where(mine[:, None] & live, acc * g[None, :], acc)
    else:
        for k0 in range(0, k_run, BLOCK_K):
            xt = tl.load(x_ptrs + k0, mask=row_ok[:, None], other=0.0)
            wt = tl.load(w_ptrs + k0)
            if UPCAST_DOT:
                xt = xt.to(tl.float32)
                wt = wt.to(tl.float32)
            acc = tl.dot(xt, wt, acc)
    if EXPAND:
        # The split form: the rest list's adapters, shrunk ahead (:mod:`.gemm_shrink`), expanded
        # here for these columns; K's first run adds it (the runs' sum is linear). The list's
        # tiles of ``REST_TILE_M`` >= m rows hold one adapter each, so a token's slot tells whose
        # rows are whose. ``CHUNK`` adapters a dot: their B stacked along its K (adapter by
        # adapter, rank by rank), each row's intermediate repeated beside itself and kept only
        # under its own adapter's ranks, so the loads of a chunk depend on nothing but its
        # owners (one gather), not on the adapter before. The ranks go in parts of
        # ``RANK_PART``, each adapter at its own rank (its tile record's): every adapter takes
        # the first part; only the wide tiles (listed first) take the later parts, and a part
        # with no wide tile is skipped, so a rank-16 adapter in wider slots takes one part, as
        # in rank-16 slots.
        if (rest > 0) & (k_index == 0):
            stacked_rank = stacked % RANK_PART
            b_cols = b_off + (offs_n - first)[None, :].to(tl.int64) * rank
            # The first dot's B, loaded before the wait below, so the two overlap.
            first_bt = tl.load(
                lora_base_ptr + b_cols + tl.maximum(first_owner, 0)[:, None].to(tl.int64)
                * width * rank + stacked_rank[:, None],
                mask=((first_owner >= 0) & (stacked_rank < rank))[:, None],
                other=0.0,
            )  # fmt: skip
            if SHRINK_JOBS > 0:
                # Wait until this slice's sums are all counted, taking any job still untaken
                # meanwhile (the helpers take them from the start, under the K loop: usually
                # none is left, and the wait is one round trip): a program waits only while
                # every job is taken, each by a program that runs it waiting on nothing.
                seen = tl.atomic_add(sync_ptr + SYNC_DONE + piece, 0, sem="acquire", scope="gpu")
                while seen < owed:
                    take_shrink_jobs(
                        x_ptr, lora_base_ptr, a_off0, a_off1, a_off2, shrink_tiles_ptr,
                        shrink_partials_ptr, shrink_arrivals_ptr, shrunk_ptr,
                        sync_ptr + SYNC_JOBS, sync_ptr + SYNC_DONE, m, k, rank, SHRINK_JOBS,
                        SHRINK_TILE_M, HEADER, SHRINK_BLOCK_K, SHRINK_STEPS, SHRINK_RUNS, R_PAD,
                        SLICES, UPCAST_DOT,
                    )  # fmt: skip
                    seen = tl.atomic_add(
                        sync_ptr + SYNC_DONE + piece, 0, sem="acquire", scope="gpu"
                    )
                shrunk = tl.load(shrunk_ptrs, mask=shrunk_ok, other=0.0, cache_modifier=".cg")
            for part in tl.static_range(R_PAD // RANK_PART):
                if part == 0:  # (every tile of the list)
                    tiles_here = rest
                else:  # (the wide tiles; none: the part is skipped)
                    tiles_here = wide
                    shrunk = tl.load(
                        shrunk_ptrs + part * RANK_PART, mask=shrunk_ok, other=0.0,
                        cache_modifier=".cg",
                    )  # fmt: skip
                if tiles_here > 0:
                    inter = (shrunk * scale).to(x_ptr.dtype.element_ty)  # (rounded, as vLLM)
                    repeated = tl.reshape(
                        tl.broadcast_to(inter[:, None, :], (BLOCK_M, CHUNK, RANK_PART)),
                        (BLOCK_M, CHUNK * RANK_PART),
                    )
                    at_rank = part * RANK_PART + stacked_rank
                    for chunk in tl.static_range(CHUNKS):
                        if part == 0 and chunk == 0:  # (loaded ahead)
                            owner = first_owner
                            live = owner >= 0
                            bt = first_bt
                        else:
                            which = chunk * CHUNK + stacked // RANK_PART
                            owner = tl.load(
                                rest_ptr + HEADER + which * (3 + REST_TILE_M),
                                mask=which < tiles_here,
                                other=-1,
                            )
                            live = owner >= 0
                            bt = tl.load(
                                lora_base_ptr + b_cols
                                + owner[:, None].to(tl.int64) * width * rank + at_rank[:, None],
                                mask=(live & (at_rank < rank))[:, None],
                                other=0.0,
                            )  # fmt: skip
                        theirs = (rest_slot[:, None] == owner[None, :]) & live[None, :]
                        lhs = tl.where(theirs, repeated, 0.0)
                        if UPCAST_DOT:
                            lhs = lhs.to(tl.float32)
                            bt = bt.to(tl.float32)
                        acc = tl.dot(lhs, bt, acc)
        if DORA:  # noqa: SIM102  (a constexpr branch; every run's share, the ratio is per column)
            if rest > 0:
                known = rest_slot >= 0
                slot_of_row = tl.maximum(rest_slot, 0).to(tl.int64)
                live_row = known & (tl.load(dora_live_ptr + slot_of_row, mask=known, other=0) != 0)
                g_rows = tl.load(
                    dora_scales_ptr + slot_of_row[:, None] * n + offs_n[None, :],
                    mask=live_row[:, None],
                    other=1.0,
                )
                acc = tl.where(live_row[:, None], acc * g_rows, acc)
    y_ptrs = y_ptr + offs_m[:, None] * n + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:
        # Store this run's partial; the last program of the column block to arrive adds the
        # partials in run order (the same sum whichever arrives last) and resets its counter
        # for the next call (a CUDA graph replays with the counters as it left them).
        at = offs_m[:, None] * n + offs_n[None, :]
        tl.store(partials_ptr + k_index * m * n + at, acc, mask=row_ok[:, None])
        tl.debug_barrier()  # (every thread's partial stored before the arrival is counted)
        arrived = tl.atomic_add(arrivals_ptr + column_block, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
            for run in tl.static_range(SPLIT_K):
                total += tl.load(
                    partials_ptr + run * m * n + at,
                    mask=row_ok[:, None],
                    other=0.0,
                    cache_modifier=".cg",
                )
            tl.store(y_ptrs, total.to(y_ptr.dtype.element_ty), mask=row_ok[:, None])
            tl.atomic_xchg(arrivals_ptr + column_block, 0, sem="relaxed", scope="gpu")
    if SHRINK_JOBS > 0:
        _finish_launch(sync_ptr, BESIDE_PROGRAMS)


def _shrink_helpers_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    lora_base_ptr,
    a_off0,
    a_off1,
    a_off2,
    shrink_tiles_ptr,
    shrink_partials_ptr,
    shrink_arrivals_ptr,
    shrunk_ptr,
    sync_ptr,
    m,
    k,
    rank,
    SHRINK_JOBS: tl.constexpr,
    SHRINK_TILE_M: tl.constexpr,
    HEADER: tl.constexpr,
    SHRINK_BLOCK_K: tl.constexpr,
    SHRINK_STEPS: tl.constexpr,
    SHRINK_RUNS: tl.constexpr,
    R_PAD: tl.constexpr,
    SLICES: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    BESIDE_PROGRAMS: tl.constexpr,
):
    """The one-launch form's helpers in a launch of their own, beside the GEMM's (the shrink
    beside): each takes the shrink's jobs by ticket until none is left, then counts itself
    finished among both launches' programs (the GEMM's: ``BESIDE_PROGRAMS``)."""
    take_shrink_jobs(
        x_ptr, lora_base_ptr, a_off0, a_off1, a_off2, shrink_tiles_ptr, shrink_partials_ptr,
        shrink_arrivals_ptr, shrunk_ptr, sync_ptr + SYNC_JOBS, sync_ptr + SYNC_DONE, m, k, rank,
        SHRINK_JOBS, SHRINK_TILE_M, HEADER, SHRINK_BLOCK_K, SHRINK_STEPS, SHRINK_RUNS, R_PAD,
        SLICES, UPCAST_DOT,
    )  # fmt: skip
    _finish_launch(sync_ptr, BESIDE_PROGRAMS)


#: The device functions :func:`_gemm_lora_kernel` and :func:`_shrink_helpers_kernel` call,
#: callees first.
KERNEL_CALLEES = (shrink_program, take_shrink_jobs, _finish_launch)


#: Helper programs an SM when they run beside the GEMM in a launch of their own (small enough
#: that several share an SM; in one launch a helper takes a GEMM program's room, so one an SM).
#: ``bench_fused_gemm.py --beside-helpers-per-sm`` at 16 adapters (H200, 2026-11-29, LoRA's µs
#: over cuBLAS, qkv / down / o): 1: 18.5 / 14.9 / 14.6; 2: 14.8 / 11.3 / 10.8; 4: 12.7 / 9.1 /
#: 10.1; 8: 13.7 / 8.5 / 10.7.
BESIDE_HELPERS_PER_SM = 4


def _helpers(device: torch.device, per_sm: int = 1) -> int:
    """Helper programs of a launch that holds the shrink: ``per_sm`` an SM (those the GEMM
    leaves room for take the jobs; any more find none and return), two in the interpreter."""
    if device.type != "cuda":
        return 2
    index = device.index if device.index is not None else torch.cuda.current_device()
    return per_sm * _sm_count(index)


@functools.cache
def _sm_count(index: int) -> int:
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


def _device_name(device: torch.device) -> str:
    """The GPU's name as the tile table keys it; ``cpu`` (no table) for the interpreter."""
    if device.type != "cuda":
        return device.type
    return _cuda_name(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _cuda_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def fusable(
    x: torch.Tensor, w: torch.Tensor, lora_b: Sequence[torch.Tensor], max_rows: int
) -> GemmPlan | None:
    """How a call of this shape runs (:class:`.gemm_tiles.GemmPlan`): None where the fused GEMM
    cannot take it at all (then: cuBLAS, and our launch for every LoRA token). The plan is
    the measured one at the slots' rank (:func:`.gemm_tiles.at_slot_rank`: B is
    ``(slots, 1, n_i, rank)``)."""
    if x.dim() != 2 or not 1 <= x.shape[0] <= max_rows or not 1 <= len(lora_b) <= MAX_GEMM_SLICES:
        return None
    if x.dtype not in (torch.float16, torch.bfloat16) or w.dtype != x.dtype:
        return None
    n, k = w.shape
    if x.shape[1] != k:
        return None
    plan = at_slot_rank(
        plan_for(_device_name(x.device), n, k), lora_b[0].shape[3], measured_slot_rank()
    )
    widths = [b.shape[2] for b in lora_b]
    if not _whole_tiles(widths, n, k, plan.lora_tile):
        return None
    if plan.plain_tile is not None and not _whole_tiles([n], n, k, plan.plain_tile):
        return replace(plan, plain_tile=None)
    return plan


def _whole_tiles(widths: Sequence[int], n: int, k: int, tile: GemmTile) -> bool:
    """Whether slices of these widths cover ``n`` columns in whole column blocks of ``tile``,
    and each of its K runs is a whole number of its K steps."""
    return (
        sum(widths) == n
        and all(wd % tile.block_n == 0 for wd in widths)
        and k % (tile.block_k * tile.split_k) == 0
    )


#: Stacked ranks a dot of the split form's epilogue takes (several adapters' B at once).
EXPAND_DOT_K = 128


def row_tile(m: int) -> int:
    """The kernel's ``BLOCK_M`` for a call of ``m`` rows: the next power of two, at least
    ``tl.dot``'s 16."""
    return max(MIN_DOT, int(triton.next_power_of_2(m)))


def expand_dots(adapters: int, m: int) -> tuple[int, int]:
    """``CHUNK`` (adapters a dot of the split form's epilogue: a rank part each, 128 stacked
    ranks) and ``CHUNKS`` (dots to cover the most adapters ``m`` rows can hold)."""
    chunk = EXPAND_DOT_K // RANK_PART.value
    return chunk, -(-min(adapters, m) // chunk)


@dataclass(frozen=True)
class GemmExpand:
    """The split form's inputs to the GEMM's epilogue: the step's rest list of ``tile_m``-row
    tiles (one adapter a tile, for calls of at most ``tile_m`` rows), its shrink's intermediate
    (:func:`.gemm_shrink.launch_gemm_shrink`, unscaled) and the most adapters a step holds
    (the slots). ``inside``: the shrink runs in the GEMM's own launch instead (its tensors,
    :func:`.gemm_shrink.prepare_shrink`; ``shrunk`` is then its ``out``), with ``sync``: the
    launch's :data:`SYNC_COUNTERS` zeroed counters (:func:`counter_regions`). ``beside``: the
    shrink's helper programs run in a launch of their own on a side stream, beside the GEMM's
    (which still takes what they leave), instead of after the GEMM's programs in its launch."""

    rest_tiles: torch.Tensor
    tile_m: int
    shrunk: torch.Tensor
    adapters: int
    inside: ShrinkLaunch | None = None
    sync: torch.Tensor | None = None
    beside: bool = False

    def check(self, m: int, slices: int, rank: int) -> None:
        """Refuse an intermediate of another shape, or a call too tall for one tile an adapter."""
        if m > self.tile_m:
            raise GemmLoRAShapeError(f"{m} rows: the split form takes at most {self.tile_m}")
        if self.shrunk.shape != (m, slices, rank_padding(rank)):
            raise GemmLoRAShapeError(
                f"intermediate {tuple(self.shrunk.shape)} for {m} rows, {slices} slices, "
                f"rank {rank}"
            )
        if self.inside is not None and (
            self.sync is None or self.sync.numel() < SYNC_COUNTERS.value
        ):
            raise GemmLoRAShapeError(f"a shrink inside needs {SYNC_COUNTERS.value} counters")
        if self.beside and self.inside is None:
            raise GemmLoRAShapeError("a shrink beside the GEMM needs its jobs (inside)")

    def launch_args(self, m: int) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
        """The kernel's pointers (rest list, intermediate, the shrink's list, partials and
        counters, the launch's counters), its constexprs for this call (``CHUNK`` adapters a dot
        of the epilogue, a rank part each: 128 stacked ranks; ``CHUNKS`` such dots to cover the
        most adapters ``m`` rows can hold, a part; the shrink's, where it runs inside)."""
        chunk, chunks = expand_dots(self.adapters, m)
        constexprs = {
            "EXPAND": True,
            "CHUNK": chunk,
            "CHUNKS": chunks,
            "SLICES": self.shrunk.shape[1],
            "REST_TILE_M": self.tile_m,
        }
        if self.inside is None or self.sync is None:
            pointers = (self.rest_tiles, self.shrunk, *(self.rest_tiles,) * 4)
            return pointers, constexprs | NO_SHRINK_INSIDE
        inside = self.inside
        pointers = (
            self.rest_tiles, self.shrunk, inside.tiles, inside.partials, inside.arrivals,
            self.sync,
        )  # fmt: skip
        return pointers, constexprs | _shrink_constexprs(inside)


def _shrink_constexprs(inside: ShrinkLaunch) -> dict[str, int]:
    """The constexprs of the shrink's jobs (the GEMM's launch and the helpers' own take them)."""
    return {
        "SHRINK_JOBS": inside.jobs,
        "SHRINK_TILE_M": inside.tile_m,
        "SHRINK_BLOCK_K": SHRINK_BLOCK_K,
        "SHRINK_STEPS": inside.steps,
        "SHRINK_RUNS": inside.runs,
    }


#: The shrink's constexprs in a launch without it inside.
NO_SHRINK_INSIDE = {
    "SHRINK_JOBS": 0,
    "SHRINK_TILE_M": 1,
    "SHRINK_BLOCK_K": 1,
    "SHRINK_STEPS": 1,
    "SHRINK_RUNS": 1,
}
#: The split form's constexprs in a launch without it.
NO_EXPAND = {
    "EXPAND": False,
    "CHUNK": 1,
    "CHUNKS": 1,
    "SLICES": 1,
    "REST_TILE_M": 1,
} | NO_SHRINK_INSIDE


def counter_regions(arrivals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`.worklist.arrival_counters` cut in three for a launch that holds the shrink too (its
    jobs run beside the GEMM's, so they cannot share counters): the GEMM's K splits, the
    shrink's arrivals, the launch's :data:`SYNC_COUNTERS`."""
    half = arrivals.numel() // 2
    sync = SYNC_COUNTERS.value
    return arrivals[:half], arrivals[half:-sync], arrivals[-sync:]


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
    arrivals: torch.Tensor | None = None,
    expand: GemmExpand | None = None,
    may_fuse: bool = True,
) -> None:
    """``y = x W^T``, plus ``scale (x A_s^T) B_s^T`` on the rows whose ``token_slot`` is
    ``fused_slot[0]`` (``s``; none when it is negative), per slice; a ``fused_slot[1]`` is
    ``s``'s adapter's own rank (the work list writes it), past which A and B are not read
    (vLLM holds zeros there). ``tile``: the plan's (by default the table's for this GPU and
    shape); ``arrivals``: :func:`.worklist.arrival_counters`, needed when the tile splits K;
    ``expand``: the rest list's adapters, shrunk ahead (split form).
    ``may_fuse=False``: the step is known to have no fused slot (a step of several adapters
    under ``--specialize-active-lora``), so the kernel is compiled without the K loop that reads
    A (fewer registers: the split forms' GEMM spills less, most at wide slot ranks)."""
    k = x.shape[1]
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
    tile = tile or plan_for(_device_name(x.device), n, k).lora_tile
    table = element_offsets([*lora_a, *lora_b])
    if table is None:
        raise GemmLoRAShapeError("A and B must share a dtype and a device")
    base, offsets = table
    slices = len(widths)
    a_offs = [offsets[min(i, slices - 1)] for i in range(MAX_GEMM_SLICES)]
    b_offs = [offsets[slices + min(i, slices - 1)] for i in range(MAX_GEMM_SLICES)]
    ends = [sum(widths[: i + 1]) if i + 1 < slices else n for i in range(2)]
    dora_scales = dora.scales if dora is not None else y
    dora_live = dora.live if dora is not None else token_slot
    if expand is not None:
        expand.check(x.shape[0], slices, rank)
    _launch(
        y, x, w, widths, tile, arrivals,
        (base, *a_offs, *b_offs, *ends, token_slot, fused_slot),
        (dora_scales, dora_live), rank, scale, fused=may_fuse, dora=dora is not None,
        expand=expand, fused_rank=fused_slot.numel() > 1,
    )  # fmt: skip


def launch_plain_gemm(
    y: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    tile: GemmTile,
    arrivals: torch.Tensor | None = None,
) -> None:
    """``y = x W^T`` by the same kernel with no LoRA in it (the plan's ``plain_tile``)."""
    n = w.shape[0]
    no_lora = (y, 0, 0, 0, 0, 0, 0, n, n, y, y)  # (pointers the kernel does not read)
    _launch(y, x, w, [n], tile, arrivals, no_lora, (y, y), 1, 1.0, fused=False, dora=False)


def _launch(
    y: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    widths: Sequence[int],
    tile: GemmTile,
    arrivals: torch.Tensor | None,
    lora_args: tuple[Any, ...],
    dora_args: tuple[torch.Tensor, torch.Tensor],
    rank: int,
    scale: float,
    fused: bool,
    dora: bool,
    expand: GemmExpand | None = None,
    fused_rank: bool = False,
) -> None:
    m, k = x.shape
    n = w.shape[0]
    if not _whole_tiles(widths, n, k, tile):
        raise GemmLoRAShapeError(
            f"slices {list(widths)} of {n} columns, K {k}: not whole tiles of {tile}"
        )
    if not (x.is_contiguous() and w.is_contiguous() and y.is_contiguous()):
        raise GemmLoRAShapeError("x, W and y must be contiguous")
    column_blocks = n // tile.block_n
    partials = y
    if tile.split_k > 1:
        if arrivals is None or arrivals.numel() < column_blocks or arrivals.device != y.device:
            raise GemmLoRAShapeError(
                f"a tile that splits K needs {column_blocks} arrival counters on {y.device}"
            )
        partials = torch.empty((tile.split_k, m, n), dtype=torch.float32, device=y.device)
    kernel, upcast = kernel_for(_gemm_lora_kernel, x, ("m",), KERNEL_CALLEES)
    expand_ptrs: tuple[torch.Tensor, ...] = (y,) * 6  # (pointers the kernel does not read)
    expand_constexprs, grid = NO_EXPAND, (column_blocks, tile.split_k)
    helpers = beside = 0
    if expand is not None:
        expand_ptrs, expand_constexprs = expand.launch_args(m)
        if expand.inside is not None:  # (one axis: the GEMM's programs, then any helpers)
            helpers = _helpers(x.device, BESIDE_HELPERS_PER_SM if expand.beside else 1)
            beside = helpers if expand.beside else 0
            grid = (column_blocks * tile.split_k + helpers - beside, 1)
    with _beside(x.device, expand is not None and expand.beside) as on_side:
        if on_side is not None and expand is not None:
            with on_side:
                _launch_helpers(x, lora_args, expand, rank, helpers, grid[0], upcast)
        launch(
            kernel, grid,
            x, w, *lora_args, y, *dora_args, partials, arrivals if arrivals is not None else y,
            *expand_ptrs, m, n, k, rank, scale,
            BLOCK_M=row_tile(m), BLOCK_N=tile.block_n,
            BLOCK_K=tile.block_k, R_PAD=rank_padding(rank), SPLIT_K=tile.split_k, FUSED=fused,
            FUSED_RANK=fused_rank, DORA=dora, **expand_constexprs, HEADER=HEADER_SIZE,
            UPCAST_DOT=upcast, BESIDE_PROGRAMS=beside, num_warps=tile.warps,
            num_stages=tile.stages,
        )  # fmt: skip


@contextlib.contextmanager
def _beside(
    device: torch.device, wanted: bool
) -> Iterator[contextlib.AbstractContextManager[Any] | None]:
    """Where the shrink's helpers launch beside the GEMM: the context to launch them in, a side
    stream forked from the current one (so it follows what came before), joined back when the
    block ends (so what follows waits for both launches); inside a CUDA graph's capture this is
    the graph's fork and join. ``None`` where not wanted; on the CPU no stream, as the
    interpreter runs each launch to its end (the helpers then take every job first)."""
    if not wanted:
        yield None
        return
    if device.type != "cuda":
        yield contextlib.nullcontext()
        return
    main = torch.cuda.current_stream(device)
    side = _side_stream(device.index if device.index is not None else torch.cuda.current_device())
    side.wait_stream(main)
    yield torch.cuda.stream(side)
    main.wait_stream(side)


@functools.cache
def _side_stream(index: int) -> torch.cuda.Stream:
    return torch.cuda.Stream(index)  # type: ignore[no-untyped-call]


def _launch_helpers(
    x: torch.Tensor,
    lora_args: tuple[Any, ...],
    expand: GemmExpand,
    rank: int,
    helpers: int,
    gemm_programs: int,
    upcast: bool,
) -> None:
    """The shrink's helpers, ``helpers`` programs (:func:`_shrink_helpers_kernel`) on the
    current stream: ``expand``'s jobs and counters, shared with the GEMM's launch of
    ``gemm_programs`` programs."""
    inside, sync = expand.inside, expand.sync
    # (GemmExpand.check refused a shrink beside without its jobs and counters)
    assert inside is not None
    assert sync is not None
    kernel, _ = kernel_for(_shrink_helpers_kernel, x, ("m",), KERNEL_CALLEES)
    m, k = x.shape
    launch(
        kernel, (helpers,),
        x, lora_args[0], *lora_args[1:4], inside.tiles, inside.partials, inside.arrivals,
        expand.shrunk, sync, m, k, rank, **_shrink_constexprs(inside), HEADER=HEADER_SIZE,
        R_PAD=rank_padding(rank), SLICES=expand.shrunk.shape[1], UPCAST_DOT=upcast,
        BESIDE_PROGRAMS=gemm_programs, num_warps=4, num_stages=1,
    )  # fmt: skip
