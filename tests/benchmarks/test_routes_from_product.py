"""routes_from_product.py: the table it writes from bench_fused_gemm.py --product's results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hi_moe_lora.kernels.gemm_tiles import TABLE_FILE, SeveralRoute, load_table, shape_key
from tests.support.scripts import load_script

routes = load_script("benchmarks/kernels/routes_from_product.py")

DEVICE = "NVIDIA H200"


def _row(shape: str, adapters: int, shipped: float, **others: float) -> dict[str, object]:
    """A bench row: every route at 50 µs unless given; the op under its plan at ``shipped``."""
    us = {key: 50.0 for key in routes.ROUTE_KEYS.values()}
    us.update(
        {routes.ROUTE_KEYS[SeveralRoute(name.replace("_", "-"))]: v for name, v in others.items()}
    )
    us[routes.SHIPPED_KEY] = shipped
    return {"shape": shape, "m": 64, "adapters": adapters, "us": us}


def _plans(path: Path) -> dict[str, SeveralRoute]:
    plans = load_table(path)[DEVICE]
    return {name: plans[shape_key(n, k)].several for name, (k, n) in routes.SHAPES.items()}


def _write(tmp_path: Path, name: str, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(rows))
    return path


def test_a_route_faster_by_the_margin_replaces_the_shipped_one_and_tiles_stay(
    tmp_path: Path,
) -> None:
    shipped = _plans(TABLE_FILE)
    rows = [
        _row("qkv", 16, 31.0, shrink_beside=25.0),  # 6 µs faster: taken
        _row("down", 16, 48.0, shrink_beside=47.8),  # 0.2 µs: within the margin, kept
        _row("qkv", 1, 20.0, shrink_beside=1.0),  # one adapter: not a step of several
    ]
    out = tmp_path / "table.json"
    assert routes.main([str(_write(tmp_path, "r.json", rows)), "--out", str(out)]) == 0
    written = _plans(out)
    assert written["qkv"] is SeveralRoute.SHRINK_BESIDE
    assert written["down"] is shipped["down"]
    assert written["o"] is shipped["o"]
    assert written["gate_up"] is shipped["gate_up"]
    old, new = load_table(TABLE_FILE)[DEVICE], load_table(out)[DEVICE]
    assert {k: p.lora_tile for k, p in old.items()} == {k: p.lora_tile for k, p in new.items()}
    assert "qkv" in json.loads(out.read_text())["note"]


def test_the_shipped_route_is_timed_as_the_op_runs_it_under_its_plan(tmp_path: Path) -> None:
    assert _plans(TABLE_FILE)["o"] is SeveralRoute.ONE_LAUNCH
    # one launch's own column says 10 µs, but the op under its plan ran at 40: split wins
    rows = [_row("o", 16, 40.0, split=35.0, one_launch=10.0)]
    out = tmp_path / "table.json"
    routes.main([str(_write(tmp_path, "r.json", rows)), "--out", str(out)])
    assert _plans(out)["o"] is SeveralRoute.SPLIT


def test_several_result_files_are_combined_by_their_median(tmp_path: Path) -> None:
    files = [
        _write(tmp_path, f"r{i}.json", [_row("qkv", 16, 31.0, split=split)])
        for i, split in enumerate((20.0, 40.0, 41.0))
    ]
    out = tmp_path / "table.json"
    routes.main([*map(str, files), "--out", str(out)])
    assert _plans(out)["qkv"] is _plans(TABLE_FILE)["qkv"]  # median 40: slower than shipped


def test_results_without_several_adapters_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "r.json", [_row("qkv", 1, 20.0)])
    with pytest.raises(SystemExit, match="several adapters"):
        routes.main([str(path), "--out", str(tmp_path / "t.json")])
