"""gemm_spill_report.py: a row per compiled kernel of the fused GEMM, each compiled cold."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from hi_moe_lora.kernels.gemm_tiles import FewRows, GemmPlan, GemmTile, SeveralRoute, table_json
from tests.support.scripts import load_script

report = load_script("benchmarks/kernels/gemm_spill_report.py")


def test_each_asked_variant_is_compiled_into_a_fresh_cache_and_reported(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/keep/me")
    argv = ["--shapes", "4096x4096", "--slot-ranks", "16", "64", "--forms", "ahead"]
    assert report.main([*argv, "--may-fuse", "no"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.strip("|").split("|") for line in lines[2:]]
    assert [tuple(row[i].strip() for i in (0, 2, 3, 4)) for row in rows] == [
        ("4096x4096", "64", "16", "ahead"),
        ("4096x4096", "64", "64", "ahead"),
    ]
    for row in rows:
        regs, stack, seconds = int(row[6]), int(row[7]), float(row[8])
        assert 0 < regs <= 255
        assert stack >= 0
        assert seconds > 0
    assert os.environ["TRITON_CACHE_DIR"] == "/keep/me"  # (the caller's cache left as it was)


def test_a_shape_the_table_does_not_plan_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        report.main(["--shapes", "1x1"])
    assert "not planned for NVIDIA H200: 1x1" in capsys.readouterr().err


def test_few_rows_compiles_each_plans_few_rows_tile_in_its_route_as_such_a_call_launches_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    assert report.main(["--shapes", "4096x4096", "--slot-ranks", "16", "--few-rows", "8"]) == 0
    rows = [line.strip("|").split("|") for line in capsys.readouterr().out.splitlines()[2:]]
    plan = report.load_table(report.TABLE_FILE)["NVIDIA H200"]["4096x4096"]
    assert plan.few_rows is not None
    assert plan.few_rows.tile is not None
    tile = plan.few_rows.tile
    label = f"n{tile.block_n} k{tile.block_k} s{tile.stages} w{tile.warps} x{tile.split_k}"
    assert [[cell.strip() for cell in row[:6]] for row in rows] == [
        ["4096x4096", label, "8", "16", "inside", "no"]
    ]


def test_few_rows_leaves_out_plans_without_them_and_is_bounded_by_the_least_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plans = report.load_table(report.TABLE_FILE)["NVIDIA H200"]
    key = "4096x4096"
    bare = {key: replace(plans[key], few_rows=None)}
    args = argparse.Namespace(shapes=None, few_rows=8, forms=["inside"], may_fuse=["no"])
    assert report.kernels_to_compile(bare, args) == {}
    args.few_rows = None
    assert report.kernels_to_compile(bare, args) == {(plans[key].lora_tile, "inside", False): [key]}
    with pytest.raises(SystemExit):
        report.main(["--few-rows", "33"])
    assert "--few-rows is from 1 to 32 rows" in capsys.readouterr().err


def test_another_table_is_read_with_table_and_a_bad_one_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("triton.backends.nvidia")
    few = FewRows(8, SeveralRoute.ONE_LAUNCH, tile=GemmTile(32, 128, 4))
    plan = GemmPlan(GemmTile(64, 64, 6), True, None, SeveralRoute.OURS, few)
    table = tmp_path / "tiles.json"
    table.write_text(json.dumps(table_json({"NVIDIA H200": {"4096x4096": plan}}, "test")))
    argv = ["--table", str(table), "--slot-ranks", "16", "--few-rows", "16"]
    assert report.main(argv) == 0
    rows = [line.strip("|").split("|") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [[cell.strip() for cell in row[:6]] for row in rows] == [
        ["4096x4096", "n32 k128 s4 w4 x1", "16", "16", "inside", "no"]
    ]
    with pytest.raises(SystemExit):
        report.main(["--table", str(table), "--device", "NVIDIA H100"])
    assert "holds no plans for 'NVIDIA H100'" in capsys.readouterr().err
    table.write_text("{")
    with pytest.raises(SystemExit):
        report.main(["--table", str(table)])
    assert "not a tile table" in capsys.readouterr().err
