"""tune_few_rows.py's choice of a few-rows tile and the table it writes (CPU: the timing itself
needs a GPU)."""

from __future__ import annotations

import json
import math

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


def test_chosen_tiles_become_the_few_rows_tiles_and_nothing_else_changes() -> None:
    table = load_table(TABLE_FILE)
    device = next(iter(table))
    key = next(iter(table[device]))
    tuned = tune.with_few_rows_tiles(table, device, {key: FAST})
    plan = tuned[device][key]
    assert plan.few_rows is not None
    assert plan.few_rows.tile == FAST
    assert plan == GemmPlan(
        table[device][key].lora_tile,
        table[device][key].fuse,
        table[device][key].plain_tile,
        table[device][key].several,
        FewRows(plan.few_rows.from_rows, plan.few_rows.several, plan.few_rows.one_adapter, FAST),
    )
    others = {k: p for k, p in tuned[device].items() if k != key}
    assert others == {k: p for k, p in table[device].items() if k != key}
    raw = json.loads(json.dumps(table_json(tuned, "test")))
    assert parse_table(raw, "test") == tuned


def test_a_plan_without_few_rows_cannot_take_a_tile() -> None:
    table = {"gpu": {"64x64": GemmPlan(NOW, True, None, SeveralRoute.OURS)}}
    with pytest.raises(ValueError, match="gpu: 64x64: no few_rows"):
        tune.with_few_rows_tiles(table, "gpu", {"64x64": FAST})


def test_a_result_rows_tiles_read_back_as_timings() -> None:
    row = {"tiles": [[64, 128, 4, 4, 1, 5.0, 9.0, 0.03], [32, 256, 3, 4, 1, 4.0, 8.0, 0.02]]}
    assert tune.timings_of(row) == {NOW: (5.0, 9.0, 0.03), FAST: (4.0, 8.0, 0.02)}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--m", "33"], "--m is from 1 to 32"),
        (["--m", "0"], "--m is from 1 to 32"),
        (["--m", "8", "--adapters", "9"], "--adapters is from 2 to 8"),
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
