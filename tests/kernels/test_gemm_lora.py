"""The base GEMM with the fused slot's LoRA inside (interpreter on CPU, compiled on a GPU)
against a float64 reference."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_lora import (
    GemmExpand,
    GemmLoRAShapeError,
    counter_regions,
    fusable,
    launch_gemm_lora,
    launch_plain_gemm,
)
from hi_moe_lora.kernels.gemm_shrink import launch_gemm_shrink, prepare_shrink
from hi_moe_lora.kernels.gemm_tiles import (
    FewRows,
    GemmPlan,
    GemmTile,
    SeveralRoute,
    default_plan,
)
from hi_moe_lora.kernels.layout import DoraEpilogue
from hi_moe_lora.kernels.worklist import WorkListBuffers, arrival_counters

SLOTS = 3
#: A tile that splits K = 128 into four runs of one 32-wide step each.
SPLIT = GemmTile(32, 32, 2, split_k=4)
#: A tile that splits K = 1,024 into two runs of four 128-wide steps.
SPLIT_1024 = GemmTile(32, 128, 2, split_k=2)


def _case(
    m: int, k: int, widths: list[int], rank: int, device: str, dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    n = sum(widths)
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen) / k**0.5
    a = [torch.randn(SLOTS, 1, rank, k, generator=gen) / k**0.5 for _ in widths]
    b = [torch.randn(SLOTS, 1, wd, rank, generator=gen) / rank**0.5 for wd in widths]
    move = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
    return move(x), move(w), [move(t) for t in a], [move(t) for t in b]


def _reference(
    x: torch.Tensor,
    w: torch.Tensor,
    a: list[torch.Tensor],
    b: list[torch.Tensor],
    slots: list[int],
    fused: int | None,
    scale: float,
    round_inter: bool = True,
) -> torch.Tensor:
    """float64, the LoRA of the rows whose slot is ``fused`` (every adapter row: None), the
    intermediate rounded to the input dtype as the unsplit kernel and the split form round it
    (``round_inter``; a tile that splits K keeps each run's share of one adapter in fp32)."""
    out = x.double() @ w.double().T
    col = 0
    for a_i, b_i in zip(a, b, strict=True):
        width = b_i.shape[2]
        for row, slot in enumerate(slots):
            if slot >= 0 and fused in (None, slot):
                inter = (x[row].double() @ a_i[slot, 0].double().T) * scale
                if round_inter:
                    inter = inter.to(x.dtype)
                out[row, col : col + width] += inter.double() @ b_i[slot, 0].double().T
        col += width
    return out


#: Where the split form's shrink runs: launched ahead, inside the GEMM's launch, or in a
#: launch of its own beside the GEMM's.
SHRINK_FORMS = ["ahead", "inside", "beside"]


def _split_form(
    x: torch.Tensor, a: list[torch.Tensor], work: WorkListBuffers, form: str
) -> tuple[GemmExpand, torch.Tensor, torch.Tensor]:
    """The split form's expand, the GEMM's arrival counters and the whole counter tensor, the
    shrink in ``form`` (:data:`SHRINK_FORMS`)."""
    arrivals = arrival_counters(x.device)
    rest_small, rest_large = work.rest_tiles[BLOCK_M_SMALL], work.rest_tiles[BLOCK_M_LARGE]
    if form == "ahead":
        shrunk = launch_gemm_shrink(x, a, rest_small, BLOCK_M_SMALL, SLOTS, arrivals)
        return GemmExpand(rest_large, BLOCK_M_LARGE, shrunk, SLOTS), arrivals, arrivals
    gemm, shrink, sync = counter_regions(arrivals)
    launch = prepare_shrink(x, a, rest_small, BLOCK_M_SMALL, SLOTS, shrink)
    expand = GemmExpand(
        rest_large, BLOCK_M_LARGE, launch.out, SLOTS, launch, sync, beside=form == "beside"
    )
    return expand, gemm, arrivals


@pytest.mark.parametrize(
    ("m", "widths", "rank", "slots", "fused"),
    [
        (5, [64, 32, 32], 16, [1, 1, -1, 1, 1], 1),  # qkv-like, a base row among them
        (16, [128], 8, [0] * 16, 0),  # one slice, rank padded to 16
        (40, [64, 64], 16, [2, 0, 2, 2, 1] * 8, 2),  # other slots' rows left alone
        (8, [64], 16, [-1] * 8, -1),  # no fused slot: the base GEMM only
    ],
)
def test_the_fused_slots_rows_get_their_lora_and_every_row_the_base(
    m: int, widths: list[int], rank: int, slots: list[int], fused: int, device: str
) -> None:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, w, a, b = _case(m, 128, widths, rank, device, dtype)
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    fused_slot = torch.tensor([fused], dtype=torch.int32, device=device)
    y = torch.full((m, sum(widths)), float("nan"), dtype=dtype, device=device)
    launch_gemm_lora(y, x, w, a, b, token_slot, fused_slot, 0.5, tile=GemmTile(32, 64, 2))
    ref = _reference(x, w, a, b, slots, fused, 0.5)
    tol = 1e-4 if dtype == torch.float32 else 4e-2
    assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))


@pytest.mark.parametrize("tile", [GemmTile(32, 64, 2), SPLIT])
def test_the_fused_slots_adapter_is_read_up_to_the_rank_the_step_gives(
    tile: GemmTile, device: str
) -> None:
    """A rank-8 adapter in rank-64 slots, its rank beside the fused slot (as the work list
    writes it): A and B are read only up to it (NaN past it proves it; vLLM holds zeros)."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    m, widths, own = 12, [64, 32, 32], 8
    x, w, a, b = _case(m, 128, widths, 64, device, dtype, seed=3)
    for a_i, b_i in zip(a, b, strict=True):
        a_i[:, :, own:] = 0.0
        b_i[:, :, :, own:] = 0.0
    a_nan, b_nan = [t.clone() for t in a], [t.clone() for t in b]
    for a_i, b_i in zip(a_nan, b_nan, strict=True):
        a_i[:, :, own:] = float("nan")
        b_i[:, :, :, own:] = float("nan")
    slots = [2, -1, 2, 0] * 3
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    fused_slot = torch.tensor([2, own], dtype=torch.int32, device=device)
    y = torch.full((m, sum(widths)), float("nan"), dtype=dtype, device=device)
    arrivals = arrival_counters(device)
    launch_gemm_lora(
        y, x, w, a_nan, b_nan, token_slot, fused_slot, 0.5, tile=tile, arrivals=arrivals
    )
    ref = _reference(x, w, a, b, slots, 2, 0.5, round_inter=tile.split_k == 1)
    tol = 1e-4 if dtype == torch.float32 else 4e-2
    assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))


@pytest.mark.parametrize(("tile", "k"), [(GemmTile(32, 64, 2), 64), (SPLIT, 128)])
def test_dora_scales_the_fused_slots_rows_when_the_slot_is_live(
    tile: GemmTile, k: int, device: str
) -> None:
    """Unsplit, and split (each run's partial scaled: the scale is per column)."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, w, a, b = _case(4, k, [64], 16, device, dtype, seed=k)
    slots = [0, 1, 1, -1]
    g = torch.rand(SLOTS + 1, 64, generator=torch.Generator().manual_seed(1)).to(device) + 0.5
    live = torch.tensor([0, 1, 0], dtype=torch.int32, device=device)
    y = torch.empty(4, 64, dtype=dtype, device=device)
    launch_gemm_lora(
        y, x, w, a, b,
        torch.tensor(slots, dtype=torch.int32, device=device),
        torch.tensor([1], dtype=torch.int32, device=device),
        1.0, DoraEpilogue(g, live), tile=tile, arrivals=arrival_counters(device),
    )  # fmt: skip
    split = tile.split_k > 1
    ref = _reference(x, w, a, b, slots, 1, 1.0, round_inter=not split)
    ref[1:3] *= g[1].double()
    tol = 1e-4 if dtype == torch.float32 else (2e-2 if split else 4e-2)
    assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))


def test_shapes_that_are_not_whole_tiles_are_refused(device: str) -> None:
    x, w, a, b = _case(4, 128, [48], 16, device, torch.float32)
    token_slot = torch.zeros(4, dtype=torch.int32, device=device)
    fused = torch.zeros(1, dtype=torch.int32, device=device)
    y = torch.empty(4, 48, device=device)
    with pytest.raises(GemmLoRAShapeError, match="whole tiles"):
        launch_gemm_lora(y, x, w, a, b, token_slot, fused, 1.0, tile=GemmTile(32, 64, 2))
    with pytest.raises(GemmLoRAShapeError, match="slices"):
        launch_gemm_lora(y, x, w, a, b[:0], token_slot, fused, 1.0)


@pytest.mark.parametrize(
    ("m", "widths", "slots", "fused"),
    [
        (5, [64, 32, 32], [1, 1, -1, 1, 1], 1),  # qkv-like, a base row among them
        (40, [64, 64], [2, 0, 2, 2, 1] * 8, 2),  # other slots' rows left alone
        (8, [64], [-1] * 8, -1),  # no fused slot: the base GEMM only
    ],
)
def test_a_tile_that_splits_k_adds_every_runs_share_of_base_and_lora(
    m: int, widths: list[int], slots: list[int], fused: int, device: str
) -> None:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, w, a, b = _case(m, 128, widths, 16, device, dtype, seed=m)
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    fused_slot = torch.tensor([fused], dtype=torch.int32, device=device)
    arrivals = arrival_counters(device)
    ref = _reference(x, w, a, b, slots, fused, 0.5, round_inter=False)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for _ in range(2):  # (the second call finds the counters as the first left them)
        y = torch.full((m, sum(widths)), float("nan"), dtype=dtype, device=device)
        launch_gemm_lora(
            y, x, w, a, b, token_slot, fused_slot, 0.5, tile=SPLIT, arrivals=arrivals
        )  # fmt: skip
        assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))
        assert int(arrivals.abs().sum()) == 0


@pytest.mark.parametrize(
    ("m", "k", "widths", "rank", "tile"),
    [
        (10, 256, [64, 32, 32], 16, GemmTile(32, 64, 2)),  # qkv-like, one shrink run
        (64, 1024, [64, 64], 8, SPLIT_1024),  # 64 rows, four shrink runs, K split in the GEMM
        (33, 512, [64], 64, GemmTile(64, 64, 2)),  # a wide rank: two adapters a dot
    ],
)
@pytest.mark.parametrize("form", SHRINK_FORMS)
def test_the_split_form_expands_every_tokens_own_adapter_in_the_epilogue(
    m: int, k: int, widths: list[int], rank: int, tile: GemmTile, form: str, device: str
) -> None:
    """Several adapters: the shrink ahead, inside the GEMM's launch or beside it, each token's
    expand by its own adapter's B; every counter left zero."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, w, a, b = _case(m, k, widths, rank, device, dtype, seed=m)
    slots = [i % (SLOTS + 1) - 1 for i in range(m)]  # (every slot, tokens without an adapter)
    work = WorkListBuffers(64, SLOTS, device, fused_slot=True)
    work.update(np.array(slots), [rank] * SLOTS)
    assert work.fused_slot is not None
    expand, arrivals, counters = _split_form(x, a, work, form)
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    ref = _reference(x, w, a, b, slots, None, 0.5)
    tol = 1e-4 if dtype == torch.float32 else 4e-2
    for _ in range(2):  # (the second call finds the counters as the first left them)
        y = torch.full((m, sum(widths)), float("nan"), dtype=dtype, device=device)
        launch_gemm_lora(
            y, x, w, a, b, token_slot, work.fused_slot, 0.5, tile=tile, arrivals=arrivals,
            expand=expand,
        )  # fmt: skip
        assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))
        assert int(counters.abs().sum()) == 0


def test_the_split_forms_sums_are_the_same_whoever_runs_the_shrinks_jobs(device: str) -> None:
    """The shrink ahead (its own launch runs every job) against inside the GEMM's launch, where
    in the interpreter the first GEMM program runs every job while it waits: the same dots in
    the same order, so the same output bit for bit. (On a GPU the helpers run nearly every job,
    so only the CPU tells.)"""
    if device != "cpu":
        pytest.skip("the waiting programs' jobs run in order only in the interpreter")
    m, k, widths, rank = 10, 1024, [64, 32, 32], 16  # (four shrink runs of two K steps)
    x, w, a, b = _case(m, k, widths, rank, device, torch.float32, seed=7)
    slots = [i % (SLOTS + 1) - 1 for i in range(m)]
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    outputs = []
    for form in ("ahead", "inside"):
        work = WorkListBuffers(64, SLOTS, device, fused_slot=True)
        work.update(np.array(slots), [rank] * SLOTS)
        assert work.fused_slot is not None
        expand, arrivals, _ = _split_form(x, a, work, form)
        y = torch.empty((m, sum(widths)), dtype=torch.float32, device=device)
        launch_gemm_lora(
            y, x, w, a, b, token_slot, work.fused_slot, 0.5, tile=GemmTile(32, 64, 2),
            arrivals=arrivals, expand=expand,
        )  # fmt: skip
        outputs.append(y)
    assert torch.equal(outputs[0], outputs[1])


#: Real ranks of the three slots, in slots of rank 64 (``--max-lora-rank 64``).
OWN_RANKS = [16, 64, 8]


def _padded_past_own_ranks(
    a: list[torch.Tensor], b: list[torch.Tensor], filler: float
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Copies of ``a`` and ``b`` with each slot's A rows past its own rank (:data:`OWN_RANKS`)
    set to ``filler``, and the B columns past 16 of the slots not wider than 16."""
    a, b = [t.clone() for t in a], [t.clone() for t in b]
    for slot, own in enumerate(OWN_RANKS):
        for a_i, b_i in zip(a, b, strict=True):
            a_i[slot, :, own:] = filler
            if own <= 16:
                b_i[slot, :, :, 16:] = filler
    return a, b


@pytest.mark.parametrize("form", SHRINK_FORMS)
def test_the_split_form_reads_each_adapter_at_its_own_rank_in_wider_slots(
    form: str, device: str
) -> None:
    """Rank-16 and rank-8 adapters beside a rank-64 one, in rank-64 slots: the shrink reads A
    only up to each tile's rank and the expand's later rank parts only for the wide tile; the
    NaN past those ranks (vLLM holds zeros there) proves it, against float64 on the zeros."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    m, widths = 24, [64, 32, 32]
    x, w, a, b = _case(m, 256, widths, 64, device, dtype, seed=9)
    a_zero, b_zero = _padded_past_own_ranks(a, b, 0.0)
    a_nan, b_nan = _padded_past_own_ranks(a, b, float("nan"))
    slots = [i % (SLOTS + 1) - 1 for i in range(m)]
    work = WorkListBuffers(64, SLOTS, device, fused_slot=True)
    work.update(np.array(slots), OWN_RANKS)
    assert work.fused_slot is not None
    expand, arrivals, counters = _split_form(x, a_nan, work, form)
    y = torch.full((m, sum(widths)), float("nan"), dtype=dtype, device=device)
    launch_gemm_lora(
        y, x, w, a_nan, b_nan, torch.tensor(slots, dtype=torch.int32, device=device),
        work.fused_slot, 0.5, tile=GemmTile(32, 64, 2), arrivals=arrivals, expand=expand,
    )  # fmt: skip
    ref = _reference(x, w, a_zero, b_zero, slots, None, 0.5)
    tol = 1e-4 if dtype == torch.float32 else 4e-2
    assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))
    assert int(counters.abs().sum()) == 0


@pytest.mark.parametrize("tile", [GemmTile(32, 64, 2), GemmTile(32, 64, 2, split_k=2)])
@pytest.mark.parametrize("form", SHRINK_FORMS)
def test_the_split_form_scales_each_live_dora_slots_rows_by_its_own_ratios(
    tile: GemmTile, form: str, device: str
) -> None:
    """Unsplit, and split (each run's partial scaled: the ratio is per column)."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    m, widths = 12, [64, 32, 32]
    x, w, a, b = _case(m, 256, widths, 16, device, dtype, seed=5)
    slots = [i % (SLOTS + 1) - 1 for i in range(m)]
    work = WorkListBuffers(64, SLOTS, device, fused_slot=True)
    work.update(np.array(slots), [16] * SLOTS)
    assert work.fused_slot is not None
    expand, arrivals, _ = _split_form(x, a, work, form)
    g = torch.rand(SLOTS + 1, 128, generator=torch.Generator().manual_seed(2)).to(device) + 0.5
    live = torch.tensor([0, 1, 1], dtype=torch.int32, device=device)
    y = torch.full((m, 128), float("nan"), dtype=dtype, device=device)
    launch_gemm_lora(
        y, x, w, a, b, torch.tensor(slots, dtype=torch.int32, device=device), work.fused_slot,
        0.5, DoraEpilogue(g, live), tile=tile, arrivals=arrivals, expand=expand,
    )  # fmt: skip
    ref = _reference(x, w, a, b, slots, None, 0.5)
    for row, slot in enumerate(slots):
        if slot >= 0 and int(live[slot]):
            ref[row] *= g[slot].double()
    tol = 1e-4 if dtype == torch.float32 else 4e-2
    assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))


def test_the_split_form_refuses_an_intermediate_of_another_shape(device: str) -> None:
    x, w, a, b = _case(4, 128, [64], 16, device, torch.float32)
    work = WorkListBuffers(64, SLOTS, device, fused_slot=True)
    work.update(np.array([0, 1, 2, 0]), [16] * SLOTS)
    assert work.fused_slot is not None
    token_slot = torch.tensor([0, 1, 2, 0], dtype=torch.int32, device=device)
    y = torch.empty(4, 64, device=device)
    rest = work.rest_tiles[BLOCK_M_LARGE]
    wrong = GemmExpand(rest, BLOCK_M_LARGE, torch.zeros(4, 2, 16, device=device), SLOTS)
    with pytest.raises(GemmLoRAShapeError, match="intermediate"):
        launch_gemm_lora(y, x, w, a, b, token_slot, work.fused_slot, 1.0, expand=wrong)
    short = GemmExpand(rest, 2, torch.zeros(4, 1, 16, device=device), SLOTS)
    with pytest.raises(GemmLoRAShapeError, match="at most 2"):
        launch_gemm_lora(y, x, w, a, b, token_slot, work.fused_slot, 1.0, expand=short)
    jobless = GemmExpand(rest, BLOCK_M_LARGE, torch.zeros(4, 1, 16, device=device), SLOTS)
    with pytest.raises(GemmLoRAShapeError, match="needs its jobs"):  # (beside, nothing inside)
        launch_gemm_lora(
            y, x, w, a, b, token_slot, work.fused_slot, 1.0, expand=replace(jobless, beside=True)
        )


@pytest.mark.parametrize("tile", [GemmTile(32, 64, 2), SPLIT, GemmTile(64, 32, 2, split_k=2)])
def test_the_plain_gemm_is_x_times_w_transposed(tile: GemmTile, device: str) -> None:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, w, _, _ = _case(24, 128, [128], 16, device, dtype, seed=7)
    y = torch.full((24, 128), float("nan"), dtype=dtype, device=device)
    launch_plain_gemm(y, x, w, tile, arrival_counters(device))
    ref = x.double() @ w.double().T
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))


def test_a_split_tile_without_arrival_counters_is_refused(device: str) -> None:
    x, w, _, _ = _case(4, 128, [64], 16, device, torch.float32)
    y = torch.empty(4, 64, device=device)
    with pytest.raises(GemmLoRAShapeError, match="arrival counters"):
        launch_plain_gemm(y, x, w, SPLIT)
    with pytest.raises(GemmLoRAShapeError, match="whole tiles"):  # (K 128 in 4 runs of 64)
        launch_plain_gemm(y, x, w, GemmTile(32, 64, 2, split_k=4), arrival_counters(device))


def test_fusable_plans_decode_sized_half_precision_calls_of_whole_tiles() -> None:
    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    w = torch.empty(6144, 4096, dtype=torch.bfloat16)
    qkv = [torch.empty(2, 1, wd, 16, dtype=torch.bfloat16) for wd in (4096, 1024, 1024)]
    assert fusable(x, w, qkv, max_rows=64) == default_plan(6144, 4096)  # (no table on a CPU)
    assert fusable(x, w, qkv, max_rows=32) is None  # (more rows than decode)
    assert fusable(x.float(), w.float(), qkv, max_rows=64) is None
    assert fusable(x, w, qkv[:2], max_rows=64) is None  # (slices do not cover W)


@pytest.mark.parametrize(("slot_rank", "measured"), [(16, 16), (64, 16), (64, 64)])
def test_fusable_plans_for_the_slots_rank(
    slot_rank: int, measured: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slots wider than the table's measured slot rank (``--max-lora-rank 64`` under a table
    measured at 16): several adapters take our launch, whatever the measured route
    (:func:`.gemm_tiles.at_slot_rank`); a table measured at 64 keeps its routes there."""
    import hi_moe_lora.kernels.gemm_lora as gemm_lora

    plan = GemmPlan(GemmTile(64, 128, 4), True, None, SeveralRoute.ONE_LAUNCH, FewRows(8))
    monkeypatch.setattr(gemm_lora, "plan_for", lambda device, n, k: plan)
    monkeypatch.setattr(gemm_lora, "measured_slot_rank", lambda: measured)
    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    w = torch.empty(6144, 4096, dtype=torch.bfloat16)
    qkv = [torch.empty(2, 1, wd, slot_rank, dtype=torch.bfloat16) for wd in (4096, 1024, 1024)]
    mine = slot_rank <= measured
    expected = plan if mine else replace(plan, several=SeveralRoute.OURS, few_rows=None)
    assert fusable(x, w, qkv, max_rows=64) == expected


def test_fusable_drops_a_plain_tile_that_does_not_fit_the_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hi_moe_lora.kernels.gemm_lora as gemm_lora

    plan = GemmPlan(
        GemmTile(64, 128, 4), True, GemmTile(64, 128, 4, split_k=64), SeveralRoute.FUSED
    )
    monkeypatch.setattr(gemm_lora, "plan_for", lambda device, n, k: plan)
    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    w = torch.empty(4096, 4096, dtype=torch.bfloat16)
    o = [torch.empty(2, 1, 4096, 16, dtype=torch.bfloat16)]
    # (the rest of the plan kept: its route for several adapters too)
    assert fusable(x, w, o, max_rows=64) == GemmPlan(plan.lora_tile, True, None, SeveralRoute.FUSED)
