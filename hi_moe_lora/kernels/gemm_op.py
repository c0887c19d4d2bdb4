"""The ``hi_moe_lora::gemm_lora_linear`` torch op: a LoRA layer's base GEMM and its LoRA.

For calls of ``min_rows`` to ``max_rows`` token rows of a shape :func:`.gemm_lora.fusable`
accepts (CUDA, or ``TRITON_INTERPRET=1``), the shape's plan (:mod:`.gemm_tiles`, measured per
GPU) decides. Where it fuses, the base GEMM carries the LoRA of a step that serves one adapter
(:func:`.gemm_lora.launch_gemm_lora`). Two ways to know which steps those are:

- ``specialized`` (vLLM's ``--specialize-active-lora``: a CUDA graph per count of active
  adapters, the count in ``active_loras``, a CPU tensor read when the op runs, so at capture):
  one active adapter takes the fused GEMM alone;
- otherwise, and for several active adapters, the step's fused slot decides on the device (-1
  when it is not a one-adapter step).

The plan's route for several adapters (:class:`.gemm_tiles.SeveralRoute`, measured per shape
with rank-16 slots; ``OURS`` for wider slots, :func:`.gemm_tiles.at_slot_rank`) serves the rest
of the step's LoRA tokens:

- ``SPLIT``: a shrink launch ahead (:func:`.gemm_shrink.launch_gemm_shrink`, over the rest work
  list, empty in a one-adapter step) and their expand in the GEMM's epilogue; no launch
  follows the GEMM. A call the split form does not fit (more rows than a rest tile holds, or K
  not in whole shrink runs) takes ``OURS`` instead;
- ``ONE_LAUNCH``: the split form with the shrink inside the GEMM's launch: helper programs
  take its jobs from the start, the GEMM's programs what is left after their K loop (runs of
  ``INSIDE_RUN_STEPS`` K steps, each job's ticket being a round trip); where it does not fit,
  ``OURS``;
- ``SHRINK_BESIDE``: as ``ONE_LAUNCH``, the helper programs in a launch of their own on a side
  stream beside the GEMM's (forked from the op's stream and joined back, so a CUDA graph
  captures a fork and a join);
- ``FUSED``: the GEMM with the fused slot, then our launch (:func:`.ops.lora_linear_impl`) on
  the rest work list;
- ``OURS``: under the flag, cuBLAS or the plain tile, then our launch on the whole work list;
  without it, as ``FUSED`` (a one-adapter step must still find its fused slot).

Below ``min_rows``, a call takes a split form only where its plan says so (``few_rows``: from
how many rows, by which route, on which tile) and the step is known to serve several adapters
(specialized), or, where the plan's ``few_rows`` says ``one_adapter``, for any step with LoRA,
every one of them then over the whole work list, never by the fused slot (one adapter's LoRA
inside the GEMM's K loop is slower there than our launch): one adapter, a count not known, and
vLLM's count of two (one adapter beside base rows, or two adapters) alike.
Every other call runs ``x W^T`` by the plan's plain GEMM (:func:`.gemm_lora.launch_plain_gemm`)
where it has one (from ``min_rows`` up), which beat cuBLAS on that GPU, else by ``torch.mm``
(cuBLAS on CUDA, as vLLM's unquantized layers do), then our launch over the whole work list. A
step without LoRA (vLLM's ``no_lora`` flag) takes that base GEMM alone. The choice depends only
on static shapes and CPU flags, as in :mod:`.ops`, so a CUDA graph captured around the op stays
valid; the fused slot and both work lists are per-step device data. Registered through
:mod:`.op_registry` (``y``, ``counters`` and ``gemm_arrivals`` mutated; every launch leaves the
arrival counters zero).
"""

from __future__ import annotations

import functools

import torch

from .config import BLOCK_M_LARGE, BLOCK_M_SMALL
from .gemm_lora import (
    GemmExpand,
    counter_regions,
    fusable,
    launch_gemm_lora,
    launch_plain_gemm,
)
from .gemm_shrink import RUN_STEPS, launch_gemm_shrink, prepare_shrink, shrink_runs
from .gemm_tiles import SPLIT_ROUTES, GemmPlan, SeveralRoute, few_rows_route
from .layout import DoraEpilogue
from .op_registry import register_op
from .ops import lora_linear_impl, use_triton
from .ranks import tracker_for

OP_NAME = "hi_moe_lora::gemm_lora_linear"
#: K steps a run of the shrink holds inside the GEMM's launch (512 of K: 8 runs at K = 4,096).
#: At 16 adapters, 64 rows (H200, benchmarks/README.md, sixteenth window), runs of 4 steps
#: against 8 and 16: o 6.5 µs of LoRA against 9.4 and 15.3, gate_up 8.3 against 10.3 and 9.8.
INSIDE_RUN_STEPS = 4
#: The routes whose shrink jobs run beside the GEMM's K loop (runs of ``INSIDE_RUN_STEPS``).
INSIDE_ROUTES = (SeveralRoute.ONE_LAUNCH, SeveralRoute.SHRINK_BESIDE)


def gemm_lora_linear_impl(
    y: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    lora_a: list[torch.Tensor],
    lora_b: list[torch.Tensor],
    tiles_small: torch.Tensor,
    tiles_large: torch.Tensor,
    rest_small: torch.Tensor,
    rest_large: torch.Tensor,
    token_slot: torch.Tensor,
    fused_slot: torch.Tensor,
    slot_rank: torch.Tensor,
    counters: torch.Tensor,
    gemm_arrivals: torch.Tensor,
    no_lora: torch.Tensor,
    scale: float,
    min_rows: int,
    max_rows: int,
    active_loras: torch.Tensor,
    specialized: bool,
    dora_scales: torch.Tensor | None = None,
    dora_live: torch.Tensor | None = None,
) -> None:
    """``y = x W^T + scale x A[slot]^T B[slot]^T`` per token (``W`` is ``(n, k)``)."""
    active = int(active_loras.item())
    alone = specialized and active == 1
    # (vLLM counts the base rows' id too: two may be one adapter and base rows, three are two
    # adapters at least, so no fused slot, and the GEMM is compiled without A's K loop)
    no_fused_slot = specialized and active >= 3
    lora = not bool(no_lora.item())
    several_known = specialized and lora and not alone  # (a step of several adapters)
    few_rows = x.shape[0] < min_rows
    plan = None
    if (lora or not few_rows) and use_triton(x):
        plan = fusable(x, weight, lora_b, max_rows)
    if plan is not None and few_rows:
        plan = _few_rows_plan(plan, x, several_known)
    # (below the least rows under one_adapter, the only way a step not counted as several gets
    # a plan there: every step over the whole work list, no fused slot)
    few = plan.few_rows if plan is not None and few_rows else None
    whole = few is not None and few.one_adapter
    several = plan.several if plan is not None else SeveralRoute.OURS
    if several in SPLIT_ROUTES and not _split_form_fits(x, several):
        several = SeveralRoute.OURS
    fused = plan is not None and plan.fuse and lora
    dora = None
    if dora_scales is not None and dora_live is not None:
        dora = DoraEpilogue(dora_scales, dora_live)
    if plan is not None and fused and (alone or several in SPLIT_ROUTES):
        expand = None
        arrivals = gemm_arrivals
        slots = slot_rank.numel()
        split = whole or not alone
        rest = (tiles_small, tiles_large) if whole else (rest_small, rest_large)
        if split and several is SeveralRoute.SPLIT:  # (the rest list shrunk ahead)
            shrunk = launch_gemm_shrink(x, lora_a, rest[0], BLOCK_M_SMALL, slots, gemm_arrivals)
            expand = GemmExpand(rest[1], BLOCK_M_LARGE, shrunk, slots)
        elif split:  # (the rest list shrunk beside the K loop: in its launch, or beside it)
            arrivals, shrink_arrivals, sync = counter_regions(gemm_arrivals)
            inside = prepare_shrink(
                x, lora_a, rest[0], BLOCK_M_SMALL, slots, shrink_arrivals, INSIDE_RUN_STEPS
            )
            beside = several is SeveralRoute.SHRINK_BESIDE
            expand = GemmExpand(rest[1], BLOCK_M_LARGE, inside.out, slots, inside, sync, beside)
        launch_gemm_lora(
            y, x, weight, lora_a, lora_b, token_slot, fused_slot, scale, dora,
            plan.lora_tile, arrivals, expand, may_fuse=not (no_fused_slot or whole),
        )  # fmt: skip
        tracker = tracker_for(slot_rank)  # (our launch, which would, is not made)
        if tracker is not None:
            tracker.observe(lora_a, lora_b)
        return
    if plan is not None and fused and (several is not SeveralRoute.OURS or not specialized):
        launch_gemm_lora(
            y, x, weight, lora_a, lora_b, token_slot, fused_slot, scale, dora,
            plan.lora_tile, gemm_arrivals,
        )  # fmt: skip
        tiles = (rest_small, rest_large)
    else:
        if plan is not None and plan.plain_tile is not None:
            launch_plain_gemm(y, x, weight, plan.plain_tile, gemm_arrivals)
        else:
            torch.mm(x, weight.t(), out=y)
        tiles = (tiles_small, tiles_large)
    lora_linear_impl(
        y, x, lora_a, lora_b, *tiles, slot_rank, counters, no_lora, scale, 0, True,
        dora_scales, dora_live,
    )  # fmt: skip


def _few_rows_plan(plan: GemmPlan, x: torch.Tensor, several_known: bool) -> GemmPlan | None:
    """The plan of a call of fewer rows than the fused GEMM's least, in a step with LoRA: its
    ``few_rows`` route (a split form, where it fits), from the rows it names, for a step known
    to serve several adapters (vLLM's ``--specialize-active-lora``: the op is captured per count
    of active adapters), and for the other steps (one adapter, or a count not known) where the
    plan says ``one_adapter``; else None (cuBLAS, then our launch). Under ``one_adapter`` the
    fused slot never serves these rows (the op sends every step over the whole work list): one
    adapter's LoRA inside the GEMM's K loop is slower there than our launch."""
    few = plan.few_rows
    if few is None or x.shape[0] < few.from_rows or not plan.fuse:
        return None
    if not (several_known or few.one_adapter):
        return None
    if not _split_form_fits(x, few.several):
        return None
    return _with_few_rows_route(plan)


@functools.cache
def _with_few_rows_route(plan: GemmPlan) -> GemmPlan:
    """``plan`` with its ``few_rows`` route, on its ``few_rows`` tile where it names one (made
    once per plan: the op asks on every eager call)."""
    routed = few_rows_route(plan)
    assert routed is not None
    return routed


def _split_form_fits(x: torch.Tensor, route: SeveralRoute) -> bool:
    """Whether the split form (``route``: alone, or beside the GEMM's K loop) takes a call of
    this shape: every adapter's rows in one tile of the rest list, and K in whole shrink runs."""
    steps = INSIDE_RUN_STEPS if route in INSIDE_ROUTES else RUN_STEPS
    return x.shape[0] <= BLOCK_M_LARGE and shrink_runs(x.shape[1], steps) is not None


gemm_lora_linear = register_op(OP_NAME, gemm_lora_linear_impl, ("y", "counters", "gemm_arrivals"))
