"""``hi_moe_lora::gemm_lora_linear``: the base GEMM and every token's LoRA, fused or not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

import hi_moe_lora.kernels.gemm_op  # noqa: F401  (registers the op)
from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_tiles import (
    FewRows,
    GemmPlan,
    GemmTile,
    SeveralRoute,
    default_plan,
)
from hi_moe_lora.kernels.worklist import WorkListBuffers

SLOTS = 4
RANK = 16


def split_form_plan(n: int, k: int) -> GemmPlan:
    """The rule of thumb's plan, several adapters in the split form."""
    return replace(default_plan(n, k), several=SeveralRoute.SPLIT)


@pytest.fixture(autouse=True)
def _rule_of_thumb_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' small shapes take the rule of thumb's plans on every device, with the split
    form (on a GPU the tile table holds, shapes it lacks would not be fused at all)."""
    import hi_moe_lora.kernels.gemm_lora as gemm_lora

    monkeypatch.setattr(gemm_lora, "plan_for", lambda device, n, k: split_form_plan(n, k))


def _plans_with_route(monkeypatch: pytest.MonkeyPatch, route: SeveralRoute) -> None:
    """Every shape takes the rule of thumb's plan with ``route`` for several adapters."""
    import hi_moe_lora.kernels.gemm_lora as gemm_lora

    monkeypatch.setattr(
        gemm_lora, "plan_for", lambda device, n, k: replace(default_plan(n, k), several=route)
    )


def _run(
    slots: list[int],
    device: str,
    min_rows: int,
    no_lora: bool = False,
    specialized: bool = False,
    unit_dora: bool = False,
    launch: Callable[[Callable[[], None], torch.Tensor], None] = lambda call, y: call(),
    slot_rank: int = RANK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's output and a float64 reference for qkv-like slices of 128 + 64 + 64 columns
    (``unit_dora``: as a DoRA layer whose every slot is live with magnitude ratios of one;
    ``launch``: how the op's call is made, given the call and its output; ``slot_rank``: the
    stacked weights' rank, vLLM's ``--max-lora-rank``, the adapters' own rank being ``RANK``,
    zeros beyond it as vLLM pads them)."""
    gen = torch.Generator().manual_seed(len(slots))
    dtype = torch.bfloat16  # (the fused GEMM takes half precision only)
    m, k, widths = len(slots), 256, (128, 64, 64)
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(sum(widths), k, generator=gen) / k**0.5
    a = [torch.randn(SLOTS, 1, RANK, k, generator=gen) / k**0.5 for _ in widths]
    b = [torch.randn(SLOTS, 1, wd, RANK, generator=gen) / RANK**0.5 for wd in widths]
    pad = slot_rank - RANK
    a = [torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in a]
    b = [torch.nn.functional.pad(t, (0, pad)) for t in b]
    x, w = x.to(device, dtype), w.to(device, dtype)
    a, b = [t.to(device, dtype) for t in a], [t.to(device, dtype) for t in b]
    work = WorkListBuffers(128, SLOTS, device, fused_slot=True)
    work.update(np.array(slots), [RANK] * SLOTS)
    assert work.fused_slot is not None
    y = torch.full((m, sum(widths)), float("nan"), dtype=dtype, device=device)
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    ranks = torch.full((SLOTS,), RANK, dtype=torch.int32, device=device)
    active = torch.tensor([len(set(slots))], dtype=torch.int32)
    dora = _unit_dora(sum(widths), device, unit_dora)

    def call() -> None:
        torch.ops.hi_moe_lora.gemm_lora_linear(
            y, x, w, a, b, work.tiles[BLOCK_M_SMALL], work.tiles[BLOCK_M_LARGE],
            work.rest_tiles[BLOCK_M_SMALL], work.rest_tiles[BLOCK_M_LARGE], token_slot,
            work.fused_slot, ranks, work.counters, work.gemm_arrivals, torch.tensor([no_lora]),
            1.0, min_rows, 64, active, specialized, *dora,
        )  # fmt: skip

    launch(call, y)
    ref = x.double() @ w.double().T
    if not no_lora:
        col = 0
        for a_i, b_i in zip(a, b, strict=True):
            for row, slot in enumerate(slots):
                if slot >= 0:
                    inter = (x[row].double() @ a_i[slot, 0].double().T).to(dtype)
                    ref[row, col : col + b_i.shape[2]] += inter.double() @ b_i[slot, 0].double().T
            col += b_i.shape[2]
    return y, ref


def _unit_dora(
    n: int, device: str, on: bool
) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
    if not on:
        return None, None
    live = torch.ones(SLOTS, dtype=torch.int32, device=device)
    return torch.ones(SLOTS, n, dtype=torch.float32, device=device), live


def _assert_close(y: torch.Tensor, ref: torch.Tensor) -> None:
    assert float((y.double() - ref).abs().max()) < 4e-2 * max(1.0, float(ref.abs().max()))


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    """``owner.name`` still called, each call counted in the returned list."""
    real = getattr(owner, name)
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _count_launches(
    monkeypatch: pytest.MonkeyPatch, plan: Callable[[str, int, int], GemmPlan]
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """Every shape takes ``plan``'s plan, the shrink inside in runs of one K step (K = 256: two
    runs); the op's calls counted: fused GEMMs, our launches, cuBLAS calls, shrink launches
    ahead, shrinks inside the GEMM (each list grows as the op runs)."""
    import hi_moe_lora.kernels.gemm_lora as gemm_lora
    import hi_moe_lora.kernels.gemm_op as gemm_op

    monkeypatch.setattr(gemm_lora, "plan_for", plan)
    monkeypatch.setattr(gemm_op, "INSIDE_RUN_STEPS", 1)
    return (
        _count_calls(monkeypatch, gemm_op, "launch_gemm_lora"),
        _count_calls(monkeypatch, gemm_op, "lora_linear_impl"),
        _count_calls(monkeypatch, gemm_op.torch, "mm"),
        _count_calls(monkeypatch, gemm_op, "launch_gemm_shrink"),
        _count_calls(monkeypatch, gemm_op, "prepare_shrink"),
    )


SEVERAL = [0, 3, 3, -1, 2, 3, 0, 3, 1, 1]


@pytest.mark.parametrize(
    "slots",
    [
        [1] * 8,  # one adapter: the rest list is empty (vLLM counts one active adapter)
        [1] * 6 + [-1, 1],  # one adapter and a base row (vLLM counts two ids)
        SEVERAL,  # several adapters: the split form (shrink ahead, expand in the GEMM)
    ],
)
@pytest.mark.parametrize("min_rows", [1, 65])  # fused, and the base GEMM then our launch
@pytest.mark.parametrize("specialized", [False, True])  # (vLLM's count of active adapters)
def test_every_token_gets_the_base_and_its_own_adapter(
    slots: list[int], min_rows: int, specialized: bool, device: str
) -> None:
    y, ref = _run(slots, device, min_rows, specialized=specialized)
    _assert_close(y, ref)


def test_a_step_without_lora_runs_the_base_gemm_alone(device: str) -> None:
    y, ref = _run([0, 1, 2], device, 1, no_lora=True)
    _assert_close(y, ref)


@pytest.mark.parametrize("slots", [[2] * 6, SEVERAL])
@pytest.mark.parametrize("specialized", [False, True])
def test_a_fusable_call_makes_no_launch_after_the_gemm(
    slots: list[int], specialized: bool, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One adapter rides inside the GEMM, several are shrunk ahead and expanded inside it:
    our launch is not made, whether or not vLLM counts the adapters."""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    calls = _count_calls(monkeypatch, gemm_op, "lora_linear_impl")
    y, ref = _run(slots, device, 1, specialized=specialized)
    assert calls == []
    _assert_close(y, ref)


@pytest.mark.parametrize(
    ("route", "specialized", "launches"),
    [
        # ``OURS``: under the flag cuBLAS, then our launch; without it (the count not known),
        # the LoRA tile's GEMM first, so that a one-adapter step still finds its fused slot
        (SeveralRoute.OURS, True, ([], [1], [1])),
        (SeveralRoute.OURS, False, ([1], [1], [])),
        # ``FUSED`` (down on the H200 until the eighteenth window): the LoRA tile's GEMM, then our
        # launch, either way
        (SeveralRoute.FUSED, True, ([1], [1], [])),
        (SeveralRoute.FUSED, False, ([1], [1], [])),
    ],
)
def test_the_routes_without_the_split_form_run_our_launch_after_the_gemm(
    route: SeveralRoute,
    specialized: bool,
    launches: tuple[list[int], list[int], list[int]],
    device: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the plan's route for several adapters is not the split form (measured slower
    there), a step of several adapters makes no shrink, runs one GEMM (ours or cuBLAS, as
    ``launches`` says: fused GEMMs, our launches, cuBLAS calls) and our launch once after
    it, and still gives every token its own adapter."""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    _plans_with_route(monkeypatch, route)
    shrinks = _count_calls(monkeypatch, gemm_op, "launch_gemm_shrink")
    gemms = _count_calls(monkeypatch, gemm_op, "launch_gemm_lora")
    ours = _count_calls(monkeypatch, gemm_op, "lora_linear_impl")
    cublas = _count_calls(monkeypatch, gemm_op.torch, "mm")
    y, ref = _run(SEVERAL, device, 1, specialized=specialized)
    assert shrinks == []
    assert (gemms, ours, cublas) == launches
    _assert_close(y, ref)


@pytest.mark.parametrize("slots", [[1] * 8, SEVERAL])
@pytest.mark.parametrize("specialized", [False, True])
@pytest.mark.parametrize("route", [SeveralRoute.ONE_LAUNCH, SeveralRoute.SHRINK_BESIDE])
def test_the_routes_with_the_shrink_beside_the_k_loop_make_no_launch_around_the_gemm(
    slots: list[int],
    specialized: bool,
    route: SeveralRoute,
    device: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ONE_LAUNCH`` and ``SHRINK_BESIDE``: no shrink launch ahead and no launch after the
    GEMM; one GEMM call, which holds the shrink (inside its launch, or with its helpers'
    launch beside it) where the step has several adapters, or may have (the count not known);
    every token gets its own adapter. (The counters' reset: ``test_gemm_lora.py``.)"""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    _plans_with_route(monkeypatch, route)
    monkeypatch.setattr(gemm_op, "INSIDE_RUN_STEPS", 1)  # (K = 256: two runs of one step)
    shrinks = _count_calls(monkeypatch, gemm_op, "launch_gemm_shrink")
    inside = _count_calls(monkeypatch, gemm_op, "prepare_shrink")
    gemms = _count_calls(monkeypatch, gemm_op, "launch_gemm_lora")
    ours = _count_calls(monkeypatch, gemm_op, "lora_linear_impl")
    y, ref = _run(slots, device, 1, specialized=specialized)
    _assert_close(y, ref)
    one_adapter_alone = specialized and len(set(slots)) == 1
    assert (shrinks, ours, gemms) == ([], [], [1])
    assert inside == ([] if one_adapter_alone else [1])


@pytest.mark.parametrize("route", [SeveralRoute.SPLIT, SeveralRoute.ONE_LAUNCH])
@pytest.mark.parametrize(
    ("slots", "specialized", "from_rows", "takes_the_split_form"),
    [
        (SEVERAL, True, 8, True),  # (10 rows: several adapters, counted, from 8 rows)
        (SEVERAL, True, 11, False),  # (fewer rows than the plan's least)
        (SEVERAL, True, None, False),  # (the plan does not say)
        (SEVERAL, False, 8, False),  # (the count of adapters not known)
        ([2] * 10, True, 8, False),  # (one adapter: its LoRA inside the GEMM is slower there)
    ],
)
def test_below_the_fused_rows_only_a_counted_step_of_several_adapters_takes_the_split_form(
    route: SeveralRoute,
    slots: list[int],
    specialized: bool,
    from_rows: int | None,
    takes_the_split_form: bool,
    device: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls of fewer rows than the fused GEMM's least (``min_rows`` 33 here) run cuBLAS then
    our launch, unless the plan's ``few_rows`` lets a step that vLLM counts as several adapters
    take a split form: its own, not the plan's route from 33 rows (``ours`` here). Every token
    gets its own adapter either way."""

    few = None if from_rows is None else FewRows(from_rows, route)

    def plan(device_name: str, n: int, k: int) -> GemmPlan:
        return replace(default_plan(n, k), several=SeveralRoute.OURS, few_rows=few)

    launches = _count_launches(monkeypatch, plan)
    y, ref = _run(slots, device, 33, specialized=specialized)
    _assert_close(y, ref)
    if not takes_the_split_form:
        assert launches == ([], [1], [1], [], [])
    elif route is SeveralRoute.SPLIT:  # (the shrink launched ahead)
        assert launches == ([1], [], [], [1], [])
    else:  # (the shrink inside the GEMM's launch)
        assert launches == ([1], [], [], [], [1])


@pytest.mark.parametrize("route", [SeveralRoute.SPLIT, SeveralRoute.ONE_LAUNCH])
@pytest.mark.parametrize(
    ("slots", "specialized"),
    [
        ([2] * 10, True),  # (one adapter, counted: the rest list would be empty)
        ([2] * 10, False),  # (one adapter, the count not known)
        (SEVERAL, False),  # (several adapters, the count not known)
        (SEVERAL, True),  # (several, counted: the whole list is the rest list then)
        ([2] * 8 + [-1, 2], True),  # (one adapter and base rows: vLLM counts two ids, so
        # "several", but the rest list would leave this adapter to the fused slot)
    ],
)
def test_below_the_fused_rows_one_adapter_takes_the_split_form_over_the_whole_list_if_planned(
    route: SeveralRoute,
    slots: list[int],
    specialized: bool,
    device: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``few_rows.one_adapter`` every step with LoRA of at least ``from_rows`` rows takes
    the split form below the fused GEMM's least rows over the whole work list, with the GEMM
    compiled without the fused slot's K loop (its LoRA would be added twice). Every token gets
    its own adapter, once."""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    def plan(device_name: str, n: int, k: int) -> GemmPlan:
        few = FewRows(8, route, one_adapter=True)
        return replace(default_plan(n, k), several=SeveralRoute.OURS, few_rows=few)

    launches = _count_launches(monkeypatch, plan)
    real = gemm_op.launch_gemm_lora
    may_fuse: list[bool] = []

    def recorded(*args: Any, **kwargs: Any) -> None:
        may_fuse.append(kwargs.get("may_fuse", True))
        real(*args, **kwargs)

    monkeypatch.setattr(gemm_op, "launch_gemm_lora", recorded)
    y, ref = _run(slots, device, 33, specialized=specialized)
    _assert_close(y, ref)
    ahead = [1] if route is SeveralRoute.SPLIT else []
    assert launches[1:] == ([], [], ahead, [] if ahead else [1])
    assert may_fuse == [False]


@pytest.mark.parametrize(("min_rows", "few_rows_tile"), [(33, True), (1, False)])
def test_below_the_fused_rows_the_gemm_runs_on_the_few_rows_tile_where_the_plan_names_one(
    min_rows: int, few_rows_tile: bool, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan's ``few_rows.tile`` serves the calls below the fused GEMM's least rows (here 10
    rows of one adapter); calls from the least rows up keep the plan's LoRA tile."""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    few_tile, lora_tile = GemmTile(32, 64, 2), GemmTile(64, 64, 3)

    def plan(device_name: str, n: int, k: int) -> GemmPlan:
        few = FewRows(8, SeveralRoute.ONE_LAUNCH, one_adapter=True, tile=few_tile)
        return GemmPlan(lora_tile, True, None, SeveralRoute.ONE_LAUNCH, few)

    import hi_moe_lora.kernels.gemm_lora as gemm_lora

    monkeypatch.setattr(gemm_lora, "plan_for", plan)
    monkeypatch.setattr(gemm_op, "INSIDE_RUN_STEPS", 1)  # (K = 256: two runs of one step)
    real = gemm_op.launch_gemm_lora
    tiles: list[GemmTile] = []

    def recorded(*args: Any, **kwargs: Any) -> None:
        tiles.append(args[9])
        real(*args, **kwargs)

    monkeypatch.setattr(gemm_op, "launch_gemm_lora", recorded)
    y, ref = _run([2] * 10, device, min_rows, specialized=True)
    _assert_close(y, ref)
    assert tiles == [few_tile if few_rows_tile else lora_tile]


def test_below_the_fused_rows_one_adapter_of_a_dora_layer_takes_the_split_form(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's LoRA layers all carry a DoRA table: with ``one_adapter`` a one-adapter step of
    fewer rows goes through the split form with the table's epilogue, each row scaled by its
    own slot's row, its LoRA added once."""

    def plan(device_name: str, n: int, k: int) -> GemmPlan:
        few = FewRows(8, SeveralRoute.SPLIT, one_adapter=True)
        return replace(default_plan(n, k), several=SeveralRoute.OURS, few_rows=few)

    launches = _count_launches(monkeypatch, plan)
    y, ref = _run([1] * 10, device, 33, specialized=True, unit_dora=True)
    _assert_close(y, ref)
    assert launches == ([1], [], [], [1], [])


def test_below_the_fused_rows_no_step_without_lora_takes_the_split_form(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``one_adapter`` concerns steps with LoRA: a base-model step stays on cuBLAS alone."""

    def plan(device_name: str, n: int, k: int) -> GemmPlan:
        few = FewRows(8, SeveralRoute.ONE_LAUNCH, one_adapter=True)
        return replace(default_plan(n, k), several=SeveralRoute.OURS, few_rows=few)

    launches = _count_launches(monkeypatch, plan)
    y, ref = _run([2] * 10, device, 33, no_lora=True)
    _assert_close(y, ref)
    assert launches == ([], [1], [1], [], [])


@pytest.mark.parametrize(
    ("slots", "specialized", "min_rows", "expected"),
    [
        (SEVERAL, True, 1, ([], [1], [1])),  # (counted: cuBLAS, then our launch)
        (SEVERAL, False, 1, ([1], [1], [])),  # (not counted: the GEMM finds no fused slot)
        (SEVERAL, True, 33, ([], [1], [1])),  # (below the fused rows, despite few_rows)
        ([2] * 10, True, 1, ([1], [], [])),  # (one adapter: its LoRA still in the GEMM)
    ],
)
def test_slots_wider_than_the_measured_rank_give_several_adapters_our_launch(
    slots: list[int],
    specialized: bool,
    min_rows: int,
    expected: tuple[list[int], list[int], list[int]],
    device: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``--max-lora-rank 64`` (slots of rank 64, adapters of rank 16) a plan whose
    routes are split forms still gives a step of several adapters no shrink: the split forms
    would work at the slots' rank (:func:`.gemm_tiles.at_slot_rank`). ``expected``: fused
    GEMMs, our launches, cuBLAS calls. Every token gets its own adapter."""

    def plan(device_name: str, n: int, k: int) -> GemmPlan:
        return replace(default_plan(n, k), several=SeveralRoute.ONE_LAUNCH, few_rows=FewRows(8))

    launches = _count_launches(monkeypatch, plan)
    y, ref = _run(slots, device, min_rows, specialized=specialized, slot_rank=64)
    _assert_close(y, ref)
    assert launches == (*expected, [], [])  # (no shrink, ahead or inside)


def _replayed_in_a_graph(call: Callable[[], None], y: torch.Tensor) -> None:
    """``call`` once to compile, then captured in a CUDA graph and replayed twice, ``y``
    cleared before each replay (so the last one wrote what the test reads)."""
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()  # type: ignore[no-untyped-call]
    with torch.cuda.graph(graph):
        call()
    for _ in range(2):
        y.fill_(float("nan"))
        graph.replay()
    torch.cuda.synchronize()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="captures a CUDA graph")
@pytest.mark.parametrize(
    "route", [SeveralRoute.SPLIT, SeveralRoute.ONE_LAUNCH, SeveralRoute.SHRINK_BESIDE]
)
def test_a_captured_graph_replays_each_split_form_with_its_counters_reset(
    route: SeveralRoute, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As vLLM replays the op: the shrink beside the GEMM captured as a fork and a join of a
    side stream, and every form's counters left zero by its own launches for the next replay
    (a ticket left over would leave the next replay's jobs untaken)."""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    _plans_with_route(monkeypatch, route)
    monkeypatch.setattr(gemm_op, "INSIDE_RUN_STEPS", 1)  # (K = 256: two runs of one step)
    y, ref = _run(SEVERAL, "cuda", 1, specialized=True, launch=_replayed_in_a_graph)
    _assert_close(y, ref)


def test_the_one_launch_route_takes_our_launch_where_k_is_not_in_whole_runs(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """K = 256 is not a whole run of the inside shrink's 1,024: cuBLAS, then our launch."""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    _plans_with_route(monkeypatch, SeveralRoute.ONE_LAUNCH)
    inside = _count_calls(monkeypatch, gemm_op, "prepare_shrink")
    ours = _count_calls(monkeypatch, gemm_op, "lora_linear_impl")
    y, ref = _run(SEVERAL, device, 1, specialized=True)
    assert (inside, ours) == ([], [1])
    _assert_close(y, ref)


@pytest.mark.parametrize("specialized", [False, True])
def test_a_dora_layers_several_adapters_take_the_split_form(
    specialized: bool, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's LoRA layers all carry a DoRA table (ones until a DoRA adapter is activated): the
    split form serves them, scaling each row by its own slot's row."""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    shrinks = _count_calls(monkeypatch, gemm_op, "launch_gemm_shrink")
    y, ref = _run(SEVERAL, device, 1, specialized=specialized, unit_dora=True)
    assert shrinks == [1]
    _assert_close(y, ref)


@pytest.mark.parametrize("specialized", [False, True])
def test_a_call_taller_than_a_rest_tile_takes_our_launch(
    specialized: bool, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above 64 rows an adapter's tokens may span two tiles of the rest list, which the
    expand's one-tile-an-adapter rule does not allow: our launch serves them."""
    import hi_moe_lora.kernels.gemm_op as gemm_op

    calls = _count_calls(monkeypatch, gemm_op, "lora_linear_impl")
    monkeypatch.setattr(gemm_op, "fusable", lambda x, w, b, rows: split_form_plan(*w.shape))
    y, ref = _run([0, 1] * 40, device, 1, specialized=specialized)
    assert calls == [1]
    _assert_close(y, ref)


SPLIT_PLAN = GemmPlan(
    GemmTile(32, 32, 2, split_k=2), True, GemmTile(32, 32, 2, split_k=4), SeveralRoute.SPLIT
)


@pytest.mark.parametrize(
    ("slots", "no_lora", "specialized"),
    [
        ([1] * 8, False, True),  # one adapter in the split GEMM alone
        (SEVERAL, False, True),  # the split form: its expand once, in K's first run
        (SEVERAL, False, False),  # the same, the count of adapters not known
        ([0, 1, 2], True, False),  # no LoRA: the plain GEMM alone
    ],
)
def test_a_plan_with_a_plain_tile_takes_it_where_no_lora_rides_inside(
    slots: list[int],
    no_lora: bool,
    specialized: bool,
    device: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A measured plan (split K, and a plain GEMM that beat cuBLAS) runs in place of cuBLAS."""
    import hi_moe_lora.kernels.gemm_lora as gemm_lora
    import hi_moe_lora.kernels.gemm_op as gemm_op

    monkeypatch.setattr(gemm_lora, "plan_for", lambda device, n, k: SPLIT_PLAN)
    cublas = _count_calls(monkeypatch, gemm_op.torch, "mm")
    y, ref = _run(slots, device, 1, no_lora=no_lora, specialized=specialized)
    assert cublas == []
    _assert_close(y, ref)
