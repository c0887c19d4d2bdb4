"""tune_gemm_tiles.py's grid and the plan it writes from its measurements (CPU: the timing
itself needs a GPU)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from hi_moe_lora.kernels.gemm_tiles import (
    FewRows,
    GemmPlan,
    GemmTile,
    SeveralRoute,
    parse_table,
    table_json,
)
from tests.support.scripts import load_script

tune = load_script("benchmarks/kernels/tune_gemm_tiles.py")


def test_the_grid_holds_only_tiles_that_fit_the_shape_and_an_sm() -> None:
    for k, widths in tune.SHAPES.values():
        n = sum(widths)
        tiles = tune.candidate_tiles(n, k, widths, 64)
        assert tiles
        for tile in tiles:
            assert all(wd % tile.block_n == 0 for wd in widths)
            assert k % (tile.block_k * tile.split_k) == 0
            assert k // (tile.block_k * tile.split_k) >= 2
            assert 96 <= n // tile.block_n * tile.split_k <= 16 * 132
            smem = tile.stages * 2 * (64 * tile.block_k + tile.block_k * (tile.block_n + 16))
            assert smem <= tune.SMEM_BYTES
    # (down is 4,096 columns over K = 14,336: only splits give it more than 64 programs of 64)
    down = tune.candidate_tiles(4096, 14336, (4096,), 64)
    assert any(t.split_k > 1 for t in down)


def _row(cublas: float, ours: float, plain: float, lora: float) -> dict[str, object]:
    return {
        "cublas_us": cublas,
        "cublas_ours_us": ours,
        "best_plain": [64, 128, 4, 4, 2, plain, 0.0],
        "best_lora": [32, 128, 4, 4, 1, lora, 0.0],
    }


def test_the_plan_fuses_where_lora_inside_beat_cublas_then_our_launch() -> None:
    plan = tune.plan_from(_row(18.5, 26.7, 18.4, 22.0), margin=0.02)
    assert plan == GemmPlan(GemmTile(32, 128, 4, 4, 1), fuse=True, plain_tile=None)
    assert not tune.plan_from(_row(18.5, 26.7, 18.4, 27.0), margin=0.02).fuse


def test_the_plain_tile_is_kept_only_when_it_beat_cublas_by_the_margin() -> None:
    plan = tune.plan_from(_row(18.5, 26.7, 15.0, 22.0), margin=0.02)
    assert plan.plain_tile == GemmTile(64, 128, 4, 4, 2)
    assert tune.plan_from(_row(18.5, 26.7, 18.3, 22.0), margin=0.02).plain_tile is None


def test_several_adapters_take_the_fastest_of_four_routes() -> None:
    row = _row(18.5, 26.7, 18.4, 22.0) | {"several_cublas_ours_us": 31.0}

    def route(**times: float) -> SeveralRoute:
        return tune.plan_from(row | times, margin=0.02).several

    assert route(several_fused_ours_us=32.0, several_split_us=30.5) is SeveralRoute.SPLIT
    assert route(several_fused_ours_us=29.0, several_split_us=30.5) is SeveralRoute.FUSED
    assert route(several_fused_ours_us=31.5, several_split_us=31.5) is SeveralRoute.OURS
    assert route(several_fused_ours_us=31.0, several_split_us=31.0) is SeveralRoute.OURS  # (ties)
    one_launch = {"several_fused_ours_us": 32.0, "several_split_us": 30.5}
    assert route(**one_launch, several_one_launch_us=24.0) is SeveralRoute.ONE_LAUNCH
    assert route(**one_launch, several_one_launch_us=30.6) is SeveralRoute.SPLIT
    # With a plain tile kept (3.5 µs faster than cuBLAS), "ours" runs on it instead.
    faster_plain = _row(18.5, 26.7, 15.0, 22.0) | {"several_cublas_ours_us": 31.0}
    times = {"several_fused_ours_us": 28.0, "several_split_us": 28.0}
    assert tune.plan_from(faster_plain | times, margin=0.02).several is SeveralRoute.OURS
    # (rows from before these measurements: our launch after the GEMM)
    assert tune.plan_from(_row(18.5, 26.7, 18.4, 22.0), margin=0.02).several is SeveralRoute.OURS


def test_the_written_table_reads_back(tmp_path: Path) -> None:
    plan = tune.plan_from(_row(18.5, 26.7, 15.0, 22.0), margin=0.02)
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps(table_json({"NVIDIA H200": {"6144x4096": plan}}, "n")))
    assert parse_table(json.loads(path.read_text()), str(path))["NVIDIA H200"]["6144x4096"] == plan


def test_a_shape_of_another_model_is_read_from_the_command_line() -> None:
    assert tune.parse_shape("qkv_tp2=4096:2048,512,512") == ("qkv_tp2", (4096, (2048, 512, 512)))
    for bad in ("qkv", "qkv=4096", "qkv=4096:", "=4096:64", "qkv=0:64", "qkv=4096:64,x"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected"):
            tune.parse_shape(bad)


def _by_tile(tile: list[int], lora_us: float, **us: float) -> dict[str, object]:
    return {"tile": tile, "lora_us": lora_us, "us": us, "max_err": 0.0}


def test_the_tile_and_route_are_chosen_together_among_tiles_that_tie_with_one_adapter() -> None:
    """gate_up on an H200 (2026-11-29): two tiles 0.1 µs apart with one adapter, and 26 µs
    apart in one launch; the plan must not take the first tile's slower route."""
    row = _row(71.4, 75.8, 62.8, 65.9) | {
        "several_by_tile": [
            _by_tile(
                [64, 64, 3, 4, 1], 65.9, ours=85.5, fused=84.6, split=98.7, **{"one-launch": 101.9}
            ),
            _by_tile(
                [128, 64, 4, 4, 1], 66.0, ours=85.5, fused=84.2, split=78.6, **{"one-launch": 75.5}
            ),
        ]
    }
    plan = tune.plan_from(row, margin=0.02)
    assert plan.lora_tile == GemmTile(128, 64, 4, 4, 1)
    assert plan.several is SeveralRoute.ONE_LAUNCH
    assert plan.fuse  # (66.0 with one adapter against 75.8 for cuBLAS then our launch)


def test_a_tie_with_several_adapters_goes_to_the_tile_faster_with_one() -> None:
    row = _row(18.5, 26.7, 18.4, 22.0) | {
        "several_by_tile": [
            _by_tile([64, 64, 6, 4, 2], 22.4, ours=31.0, split=29.0),
            _by_tile([32, 128, 4, 4, 1], 22.0, ours=31.0, split=29.0),
        ]
    }
    plan = tune.plan_from(row, margin=0.02)
    assert plan.lora_tile == GemmTile(32, 128, 4, 4, 1)
    assert plan.several is SeveralRoute.SPLIT


def test_the_routes_are_timed_on_the_tiles_within_the_margin_fastest_first() -> None:
    times = {
        GemmTile(64, 64, 6, 4, 2): (39.1, 0.0),
        GemmTile(64, 128, 4, 4, 2): (39.4, 0.0),
        GemmTile(32, 128, 4, 4, 2): (40.8, 0.0),
        GemmTile(32, 64, 6, 4, 2): (42.4, 0.0),
    }
    assert tune.close_tiles(times, margin=1.0, most=4) == [
        GemmTile(64, 64, 6, 4, 2),
        GemmTile(64, 128, 4, 4, 2),
    ]
    assert tune.close_tiles(times, margin=5.0, most=3) == list(times)[:3]
    assert tune.close_tiles(times, margin=-1.0, most=0) == [GemmTile(64, 64, 6, 4, 2)]


def test_the_shrink_beside_is_taken_only_where_the_routes_name_it() -> None:
    """qkv on an H200 (2026-11-29): the shrink beside 0.3 µs ahead of our launch by the
    microbenchmark; served, the step stalled. The plan keeps our launch unless asked."""
    row = _row(17.8, 25.6, 19.3, 21.4) | {
        "several_by_tile": [
            _by_tile(
                [64, 128, 4, 4, 1],
                21.4,
                ours=30.5,
                fused=31.9,
                split=31.1,
                **{"one-launch": 37.7, "shrink-beside": 30.2},
            )
        ]
    }
    assert tune.plan_from(row, margin=0.02).several is SeveralRoute.OURS
    every = tune.ROUTES
    assert tune.plan_from(row, margin=0.02, routes=every).several is SeveralRoute.SHRINK_BESIDE


def test_the_routes_given_must_hold_our_launch(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        tune.main(["--routes", "one-launch", "split"])
    assert '--routes must hold "ours"' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tune.main(["--routes", "sideways"])
    assert "invalid SeveralRoute value: 'sideways'" in capsys.readouterr().err


def test_rows_outside_a_plan_are_timed_but_write_no_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tiles.json"
    with pytest.raises(SystemExit):
        tune.main(["--m", "8", "--out", str(out)])
    assert "--out writes plans that serve 33-64 rows" in capsys.readouterr().err
    assert not out.exists()
    for rows in ("0", "65"):
        with pytest.raises(SystemExit):
            tune.main(["--m", rows])
        assert f"--m is from 1 to 64 rows, not {rows}" in capsys.readouterr().err


def test_a_retuned_shape_keeps_its_few_rows_and_other_shapes_stay() -> None:
    """The sweep times 33-64 rows: writing its plans over a table keeps each shape's
    ``few_rows`` (measured apart, at fewer rows), and leaves the shapes it did not time."""
    few = FewRows(8, SeveralRoute.ONE_LAUNCH, one_adapter=True, tile=GemmTile(32, 128, 6))
    old = GemmPlan(GemmTile(64, 64, 6), True, None, SeveralRoute.ONE_LAUNCH, few)
    untouched = GemmPlan(GemmTile(64, 128, 4), True, None)
    table = {"gpu": {"4096x4096": old, "6144x4096": untouched}}
    new = GemmPlan(GemmTile(32, 128, 4), False, GemmTile(64, 128, 3), SeveralRoute.SPLIT)
    brand_new = GemmPlan(GemmTile(64, 64, 3), True, None)
    tune.merge_plans(table, "gpu", {"4096x4096": new, "2048x4096": brand_new})
    assert table["gpu"] == {
        "4096x4096": GemmPlan(new.lora_tile, False, new.plain_tile, SeveralRoute.SPLIT, few),
        "6144x4096": untouched,
        "2048x4096": brand_new,
    }
    tune.merge_plans(table, "other gpu", {"4096x4096": new})
    assert table["other gpu"] == {"4096x4096": new}


def test_the_reference_adds_each_rows_own_adapter_once() -> None:
    """``x W^T`` plus, per row and output slice, its slot's ``(x A^T) B^T`` (in float64 after the
    bf16 intermediate), for every row's own slot."""
    gen = torch.Generator().manual_seed(0)
    case = {
        "x": torch.randn(3, 8, generator=gen),
        "w": torch.randn(6, 8, generator=gen),
        "a": [torch.randn(2, 1, 4, 8, generator=gen) for _ in range(2)],
        "b": [torch.randn(2, 1, wd, 4, generator=gen) for wd in (2, 4)],
    }
    slots = [1, 0, 1]
    got = tune.lora_reference(case, slots)
    x = case["x"].double()
    for row, slot in enumerate(slots):
        parts = []
        for a, b in zip(case["a"], case["b"], strict=True):
            inter = (x[row] @ a[slot, 0].double().T).to(torch.bfloat16).double()
            parts.append(inter @ b[slot, 0].double().T)
        expected = x[row] @ case["w"].double().T + torch.cat(parts)
        assert torch.allclose(got[row], expected)
