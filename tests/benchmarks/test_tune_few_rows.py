"""tune_few_rows.py's choice of a few-rows tile and the table it writes (CPU: the timing itself
needs a GPU)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
import torch

from hi_moe_lora.kernels.gemm_tiles import (
    TABLE_FILE,
    FewRows,
    GemmPlan,
    GemmTile,
    SeveralRoute,
    load_table,
    parse_table,
    table_json,
)
from tests.support.scripts import load_script

tune = load_script("benchmarks/kernels/tune_few_rows.py")

NOW, FAST, FASTER = GemmTile(64, 128, 4), GemmTile(32, 256, 3), GemmTile(64, 64, 6, 4, 2)


def test_the_fastest_tile_with_one_adapter_wins_by_more_than_the_margin() -> None:
    timings = {NOW: (5.0, 9.0, 0.03), FAST: (4.0, 9.1, 0.03), FASTER: (3.0, 9.0, 0.03)}
    assert tune.choose_tile(NOW, timings, 0.3) == FASTER


@pytest.mark.parametrize(
    ("fast", "why"),
    [
        ((4.8, 9.0, 0.03), "within the margin"),
        ((3.0, 9.5, 0.03), "slower with several adapters"),
        ((3.0, 9.0, 0.2), "off the float64 reference"),
        ((math.inf, math.inf, math.inf), "did not run"),
    ],
)
def test_the_tile_served_now_stays_unless_another_is_clearly_better(
    fast: tuple[float, float, float], why: str
) -> None:
    assert tune.choose_tile(NOW, {NOW: (5.0, 9.0, 0.03), FAST: fast}, 0.3) == NOW, why


def test_a_tile_the_timing_missed_is_kept() -> None:
    assert tune.choose_tile(NOW, {FAST: (1.0, 1.0, 0.0)}, 0.3) == NOW


def _row(
    current: GemmTile, ours: tuple[float, float], tiles: dict[GemmTile, tuple[float, float, float]]
) -> dict[str, Any]:
    """A ``tune_shape`` result row at 8 rows, one launch timed."""
    return {
        "m": 8,
        "route": "one-launch",
        "current": [current.block_n, current.block_k, current.stages, current.warps, 1],
        "cublas_ours_us": ours[0],
        "cublas_ours_several_us": ours[1],
        "tiles": [
            [t.block_n, t.block_k, t.stages, t.warps, t.split_k, *times]
            for t, times in tiles.items()
        ],
    }


def test_a_plan_with_few_rows_keeps_them_on_the_tile_chosen() -> None:
    few = FewRows(8, SeveralRoute.ONE_LAUNCH, one_adapter=True)
    plan = GemmPlan(NOW, True, None, SeveralRoute.ONE_LAUNCH, few)
    faster = _row(NOW, (9.0, 9.0), {NOW: (5.0, 9.0, 0.03), FAST: (4.0, 9.0, 0.03)})
    assert tune.few_rows_from(plan, faster, 0.3) == replace(few, tile=FAST)
    close = _row(NOW, (9.0, 9.0), {NOW: (5.0, 9.0, 0.03), FAST: (4.9, 9.0, 0.03)})
    assert tune.few_rows_from(plan, close, 0.3) is few


def test_a_plan_without_few_rows_gets_them_where_the_split_form_beat_our_launch() -> None:
    plan = GemmPlan(NOW, True, None, SeveralRoute.ONE_LAUNCH)
    both = _row(NOW, (7.0, 9.0), {NOW: (6.0, 8.0, 0.03), FAST: (5.0, 8.5, 0.03)})
    expected = FewRows(8, SeveralRoute.ONE_LAUNCH, one_adapter=True, tile=FAST)
    assert tune.few_rows_from(plan, both, 0.3) == expected
    own_tile = _row(NOW, (7.0, 9.0), {NOW: (5.0, 8.0, 0.03), FAST: (5.5, 8.0, 0.03)})
    expected = FewRows(8, SeveralRoute.ONE_LAUNCH, one_adapter=True)
    assert tune.few_rows_from(plan, own_tile, 0.3) == expected
    one_only = _row(NOW, (7.0, 9.0), {NOW: (5.0, 9.5, 0.03)})
    assert tune.few_rows_from(plan, one_only, 0.3) is None
    no_fuse = GemmPlan(NOW, False, None, SeveralRoute.ONE_LAUNCH)
    assert tune.few_rows_from(no_fuse, both, 0.3) is None


def test_the_changes_land_in_their_plans_and_nothing_else_changes() -> None:
    table = load_table(TABLE_FILE)
    device = next(iter(table))
    first, second, *_ = table[device]
    few = FewRows(4, SeveralRoute.SPLIT, one_adapter=True, tile=FAST)
    tuned = tune.with_few_rows(table, device, {first: few, second: None})
    assert tuned[device][first] == replace(table[device][first], few_rows=few)
    assert tuned[device][second] == replace(table[device][second], few_rows=None)
    others = {k: p for k, p in tuned[device].items() if k not in (first, second)}
    assert others == {k: p for k, p in table[device].items() if k not in (first, second)}
    raw = json.loads(json.dumps(table_json(tuned, "test")))
    assert parse_table(raw, "test") == tuned


def test_a_tuned_tables_note_keeps_its_history_and_says_what_changed() -> None:
    note = tune.tuned_note("Measured at M = 64.", "NVIDIA H200", [8], ["4096x4096", "6144x4096"])
    assert note.startswith("Measured at M = 64. few_rows re-measured at M = 8 on NVIDIA H200")
    assert "(shapes changed: 4096x4096, 6144x4096); not yet served." in note
    assert "shapes changed: none" in tune.tuned_note("", "NVIDIA H200", [8], [])
    assert not tune.tuned_note("", "NVIDIA H200", [8], []).startswith(" ")
    assert "at M = 8, 16, 32 on" in tune.tuned_note("", "NVIDIA H200", [8, 16, 32], [])


def _at(
    m: int, ours: tuple[float, float], tiles: dict[GemmTile, tuple[float, float, float]]
) -> dict[str, Any]:
    """A ``tune_shape`` row at ``m`` rows (cuBLAS at half our launch's one-adapter time)."""
    return {**_row(NOW, ours, tiles), "m": m, "cublas_us": ours[0] / 2}


def test_rows_at_several_counts_combine_into_sums_over_the_tiles_timed_at_every_count() -> None:
    at8 = _at(8, (7.0, 9.0), {NOW: (5.0, 8.0, 0.01), FAST: (4.0, 8.0, 0.02)})
    at16 = _at(16, (8.0, 10.0), {NOW: (6.0, 9.0, 0.03), FAST: (7.0, 9.0, 0.01), FASTER: (1, 1, 0)})
    row = tune.combined_row([at8, at16])
    assert tune.timings_of(row) == {NOW: (11.0, 17.0, 0.03), FAST: (11.0, 17.0, 0.02)}
    assert (row["m"], row["ms"], row["current"]) == (8, [8, 16], at8["current"])
    assert (row["cublas_us"], row["cublas_ours_us"], row["cublas_ours_several_us"]) == (
        7.5, 15.0, 19.0,
    )  # fmt: skip
    assert tune.combined_row([at8]) is at8


def test_a_tile_fastest_at_one_count_but_not_over_the_range_is_not_chosen() -> None:
    few = FewRows(8, SeveralRoute.ONE_LAUNCH, one_adapter=True)
    plan = GemmPlan(NOW, True, None, SeveralRoute.ONE_LAUNCH, few)
    at8 = _at(8, (9.0, 9.0), {NOW: (5.0, 9.0, 0.03), FAST: (4.0, 9.0, 0.03)})
    at32 = _at(32, (9.0, 9.0), {NOW: (5.0, 9.0, 0.03), FAST: (6.5, 9.0, 0.03)})
    assert tune.few_rows_from(plan, at8, 0.3) == replace(few, tile=FAST)
    assert tune.few_rows_from(plan, tune.combined_row([at8, at32]), 0.6) is few


def test_a_newly_chosen_tile_is_shown_at_each_count_beside_the_tile_now() -> None:
    at8 = _at(8, (9.0, 9.0), {NOW: (5.0, 9.0, 0.03), FAST: (4.0, 8.5, 0.03)})
    at32 = _at(32, (9.0, 9.0), {NOW: (7.0, 9.5, 0.03), FAST: (6.3, 9.0, 0.03)})
    assert tune.chosen_at_each_count("o", FAST, [at8, at32]) == (
        "o: the chosen 32 x 256 x 3 x 4 x 1 at M = 8 4.0 / 8.5 (now 5.0 / 9.0); "
        "M = 32 6.3 / 9.0 (now 7.0 / 9.5)"
    )
    assert "M = 8 inf / inf" in tune.chosen_at_each_count("o", FASTER, [at8])  # (not timed)


def test_a_result_rows_tiles_read_back_as_timings() -> None:
    row = {"tiles": [[64, 128, 4, 4, 1, 5.0, 9.0, 0.03], [32, 256, 3, 4, 1, 4.0, 8.0, 0.02]]}
    assert tune.timings_of(row) == {NOW: (5.0, 9.0, 0.03), FAST: (4.0, 8.0, 0.02)}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--m", "33"], "--m is from 1 to 32"),
        (["--m", "0"], "--m is from 1 to 32"),
        (["--m", "8", "--adapters", "9"], "--adapters is from 2 to 8"),
        (["--m", "8", "40"], "--m is from 1 to 32"),
        (["--m", "16", "4", "--adapters", "8"], "--adapters is from 2 to 4 at 4 rows"),
    ],
)
def test_bad_arguments_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        tune.main(argv)
    assert message in capsys.readouterr().err


def test_it_needs_a_gpu_to_time(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit):
        tune.main(["--m", "8"])
    assert "needs a CUDA GPU" in capsys.readouterr().err
