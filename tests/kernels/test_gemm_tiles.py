"""The fused GEMM's tile table: reading, checking, and which plan a shape gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hi_moe_lora.kernels import gemm_tiles
from hi_moe_lora.kernels.gemm_tiles import (
    ENV_GEMM_TILES,
    MEASURED_SLOT_RANK,
    TABLE_FILE,
    FewRows,
    GemmPlan,
    GemmTile,
    GemmTilesError,
    SeveralRoute,
    at_slot_rank,
    default_plan,
    few_rows_route,
    load_slot_rank,
    load_table,
    measured_slot_rank,
    parse_table,
    plan_for,
    shape_key,
    table_json,
    table_slot_rank,
)

TUNED = GemmPlan(
    GemmTile(64, 128, 4, warps=8, split_k=2), False, GemmTile(32, 256, 3), SeveralRoute.FUSED
)


@pytest.fixture(autouse=True)
def _fresh_table() -> object:
    """Each test reads the table again (it is read once per process)."""
    gemm_tiles._active_file.cache_clear()
    plan_for.cache_clear()
    yield None
    gemm_tiles._active_file.cache_clear()
    plan_for.cache_clear()


def _serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: dict[str, dict[str, GemmPlan]]
) -> None:
    """Write ``table`` and name it in ``HI_MOE_LORA_GEMM_TILES``."""
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps(table_json(table, "test")))
    monkeypatch.setenv(ENV_GEMM_TILES, str(path))


def test_a_table_round_trips_through_its_json() -> None:
    table = {"NVIDIA H200": {shape_key(6144, 4096): TUNED}}
    raw = json.loads(json.dumps(table_json(table, "test")))
    assert parse_table(raw, "test") == table


def test_a_plans_few_rows_round_trip_and_are_left_out_when_unset() -> None:
    few = FewRows(8, SeveralRoute.SPLIT)
    table = {"gpu": {"4096x4096": GemmPlan(GemmTile(64, 64, 6), True, None, few_rows=few)}}
    table["gpu"]["6144x4096"] = TUNED
    raw = json.loads(json.dumps(table_json(table, "test")))
    assert raw["devices"]["gpu"]["4096x4096"]["few_rows"] == {"from_rows": 8, "several": "split"}
    assert "few_rows" not in raw["devices"]["gpu"]["6144x4096"]
    assert parse_table(raw, "test") == table


def test_a_plans_few_rows_for_one_adapter_round_trip() -> None:
    few = FewRows(8, SeveralRoute.ONE_LAUNCH, one_adapter=True)
    table = {"gpu": {"4096x4096": GemmPlan(GemmTile(64, 64, 6), True, None, few_rows=few)}}
    raw = json.loads(json.dumps(table_json(table, "test")))
    written = raw["devices"]["gpu"]["4096x4096"]["few_rows"]
    assert written == {"from_rows": 8, "several": "one-launch", "one_adapter": True}
    assert parse_table(raw, "test") == table


def test_a_plans_few_rows_tile_round_trips() -> None:
    few = FewRows(8, SeveralRoute.ONE_LAUNCH, tile=GemmTile(32, 256, 3, 4, 2))
    table = {"gpu": {"4096x4096": GemmPlan(GemmTile(64, 64, 6), True, None, few_rows=few)}}
    raw = json.loads(json.dumps(table_json(table, "test")))
    written = raw["devices"]["gpu"]["4096x4096"]["few_rows"]["tile"]
    assert written == {"block_n": 32, "block_k": 256, "stages": 3, "warps": 4, "split_k": 2}
    assert parse_table(raw, "test") == table


def test_a_few_rows_call_runs_the_few_rows_route_on_its_tile_or_the_lora_tile() -> None:
    own = FewRows(8, SeveralRoute.ONE_LAUNCH, tile=GemmTile(128, 128, 3))
    plan = GemmPlan(GemmTile(64, 64, 6), True, None, SeveralRoute.OURS, own)
    assert few_rows_route(plan) == GemmPlan(
        GemmTile(128, 128, 3), True, None, SeveralRoute.ONE_LAUNCH, own
    )
    borrowed = FewRows(8, SeveralRoute.SPLIT)
    plan = GemmPlan(GemmTile(64, 64, 6), True, None, SeveralRoute.OURS, borrowed)
    assert few_rows_route(plan) == GemmPlan(
        GemmTile(64, 64, 6), True, None, SeveralRoute.SPLIT, borrowed
    )
    assert few_rows_route(TUNED) is None  # (no few_rows)


@pytest.mark.parametrize(
    ("few_rows", "message"),
    [
        ({"from_rows": 0, "several": "one-launch"}, "from_rows is from 1 to 64, not 0"),
        ({"from_rows": 65, "several": "one-launch"}, "from_rows is from 1 to 64, not 65"),
        ({"from_rows": True, "several": "one-launch"}, "from_rows is from 1 to 64, not True"),
        ({"from_rows": "8", "several": "one-launch"}, "from_rows is from 1 to 64, not '8'"),
        ({"several": "one-launch"}, "from_rows is from 1 to 64, not None"),
        ({"from_rows": 8, "several": "ours"}, "several is a split form .*, not 'ours'"),
        ({"from_rows": 8, "several": "sideways"}, "several is one of"),
        ({"from_rows": 8}, "expected"),
        ({"from_rows": 8, "several": "split", "to_rows": 32}, "expected"),
        ({"from_rows": 8, "several": "split", "one_adapter": 1}, "one_adapter is true or false"),
        (
            {"from_rows": 8, "several": "split", "tile": {"block_n": 48, "block_k": 64}},
            "tile: .*missing .*stages",
        ),
        (
            {
                "from_rows": 8,
                "several": "split",
                "tile": {"block_n": 48, "block_k": 64, "stages": 2},
            },
            "tile: block_n must be a power of two, not 48",
        ),
        (8, "expected"),
    ],
)
def test_bad_few_rows_are_refused_with_where(few_rows: object, message: str) -> None:
    entry = {"lora": {"block_n": 64, "block_k": 64, "stages": 2}, "fuse": True}
    raw = {"devices": {"gpu": {"64x64": entry | {"few_rows": few_rows}}}}
    with pytest.raises(GemmTilesError, match=rf"^bad\.json: gpu: 64x64: few_rows: {message}"):
        parse_table(raw, "bad.json")


def test_the_shipped_table_is_valid() -> None:
    load_table(TABLE_FILE)


BENCHMARK_TABLES = sorted(
    (Path(__file__).parents[2] / "benchmarks" / "kernels" / "tables").glob("*.json")
)


@pytest.mark.parametrize("path", BENCHMARK_TABLES, ids=lambda path: path.stem)
def test_the_benchmarks_tables_plan_every_shape_the_shipped_one_does(path: Path) -> None:
    """``gpu_e2e.sh``'s ``+NAME`` labels serve these beside the shipped table (earlier shipped
    tables, or the shipped one with other routes): each plans the same GPUs and shapes, so a
    served A/B differs only in the plans, never in which shapes fall back to the rule of thumb."""
    shipped, other = load_table(TABLE_FILE), load_table(path)
    assert other.keys() == shipped.keys()
    for device, plans in shipped.items():
        assert other[device].keys() == plans.keys()


@pytest.mark.parametrize(
    ("older", "route"),
    [
        ({}, SeveralRoute.OURS),  # (from before the split form)
        ({"split": False}, SeveralRoute.OURS),
        ({"split": True}, SeveralRoute.SPLIT),  # (from before the three routes)
    ],
)
def test_older_tables_keep_the_route_they_meant_for_several_adapters(
    older: dict[str, bool], route: SeveralRoute
) -> None:
    entry = {"lora": {"block_n": 64, "block_k": 64, "stages": 2}, "fuse": True, "plain": None}
    plans = parse_table({"devices": {"gpu": {"64x64": entry | older}}}, "test")
    assert plans["gpu"]["64x64"].several is route


def test_the_shipped_h200_routes_are_the_measured_ones() -> None:
    """16 adapters, H200 (benchmarks/README.md, fourteenth to eighteenth windows): our launch
    after cuBLAS on qkv, the split form in one launch on o, gate_up and down (down on its
    eighteenth-window tile, 64 x 64, six stages, K split in two)."""
    plans = load_table(TABLE_FILE)["NVIDIA H200"]
    routes = [plans[shape_key(n, k)].several for n, k in SHAPES]
    assert routes == [
        SeveralRoute.OURS,
        SeveralRoute.ONE_LAUNCH,
        SeveralRoute.ONE_LAUNCH,
        SeveralRoute.ONE_LAUNCH,
    ]


@pytest.mark.parametrize("route", list(SeveralRoute))
def test_above_the_measured_slot_rank_several_adapters_take_our_launch(
    route: SeveralRoute,
) -> None:
    """The routes were measured with rank-16 slots; the split forms work at the slots' rank,
    so under a larger ``--max-lora-rank`` a step of several adapters takes our launch, at
    every row count, while the one-adapter plan (tile, fuse, plain tile) stays."""
    plan = GemmPlan(GemmTile(64, 64, 6), True, GemmTile(32, 256, 3), route, FewRows(8))
    for rank in (8, 16):
        assert at_slot_rank(plan, rank) == plan
    ours = GemmPlan(plan.lora_tile, True, plan.plain_tile, SeveralRoute.OURS, None)
    for rank in (32, 64, 128):
        assert at_slot_rank(plan, rank) == ours
    # A table measured up to slot rank 64 keeps its routes there, not above.
    assert at_slot_rank(plan, 64, measured=64) == plan
    assert at_slot_rank(plan, 128, measured=64) == ours
    # Made once per plan: the op asks on every eager call.
    assert at_slot_rank(plan, 64) is at_slot_rank(plan, 128)


def test_a_table_says_up_to_which_slot_rank_its_routes_were_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert measured_slot_rank() == MEASURED_SLOT_RANK  # (the shipped table: not said)
    path = tmp_path / "tiles.json"
    raw = table_json({"NVIDIA H200": {"6144x4096": TUNED}}, "test") | {"measured_slot_rank": 64}
    path.write_text(json.dumps(raw))
    monkeypatch.setenv(ENV_GEMM_TILES, str(path))
    gemm_tiles._active_file.cache_clear()
    assert measured_slot_rank() == 64
    assert plan_for("NVIDIA H200", 6144, 4096) == TUNED


@pytest.mark.parametrize(("rank", "written"), [(MEASURED_SLOT_RANK, False), (64, True)])
def test_a_tables_measured_slot_rank_is_written_where_wider_and_reads_back(
    rank: int, written: bool, tmp_path: Path
) -> None:
    """The tuning scripts write a table they read back with the slot rank it had: said only
    where wider than the default, so tables that never said it stay as they were."""
    raw = table_json({"NVIDIA H200": {"6144x4096": TUNED}}, "test", rank)
    assert ("measured_slot_rank" in raw) is written
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps(raw))
    assert load_slot_rank(path) == rank
    assert load_table(path) == {"NVIDIA H200": {"6144x4096": TUNED}}


@pytest.mark.parametrize("rank", [8, 0, "64", True, 64.0])
def test_a_bad_measured_slot_rank_is_refused_with_its_file(rank: object) -> None:
    with pytest.raises(GemmTilesError, match=r"^bad\.json: measured_slot_rank is a whole"):
        table_slot_rank({"devices": {}, "measured_slot_rank": rank}, "bad.json")


def test_a_shape_the_table_lacks_takes_the_rule_of_thumb() -> None:
    assert plan_for("NVIDIA Nonexistent", 4096, 14336) == default_plan(4096, 14336)
    assert not default_plan(4096, 14336).fuse  # (down: input wider than output)
    assert default_plan(6144, 4096) == GemmPlan(GemmTile(64, 128, 4), True, None)
    # The split form for elongated weights only (gate_up, down; not qkv, o).
    routes = [default_plan(n, k).several for n, k in SHAPES]
    assert routes == [SeveralRoute.OURS, SeveralRoute.OURS, SeveralRoute.SPLIT, SeveralRoute.SPLIT]


SHAPES = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]


def test_the_environment_names_another_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _serve(tmp_path, monkeypatch, {"NVIDIA H200": {"6144x4096": TUNED}})
    assert plan_for("NVIDIA H200", 6144, 4096) == TUNED
    assert plan_for("NVIDIA H100 80GB HBM3", 6144, 4096) == default_plan(6144, 4096)


def test_a_measured_gpu_fuses_no_shape_the_sweep_did_not_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another model (or tensor-parallel split) on a measured GPU: cuBLAS then our launch."""
    _serve(tmp_path, monkeypatch, {"NVIDIA H200": {"6144x4096": TUNED}})
    plan = plan_for("NVIDIA H200", 3072, 4096)  # (qkv at tensor parallel 2)
    assert not plan.fuse
    assert plan.plain_tile is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "expected"),
        ({"devices": {"gpu": {"1x1": {"lora": {"block_n": 64}, "fuse": True}}}}, "lora"),
        (
            {
                "devices": {
                    "gpu": {
                        "1x1": {"lora": {"block_n": 48, "block_k": 64, "stages": 2}, "fuse": True}
                    }
                }
            },
            "power of two",
        ),
        (
            {
                "devices": {
                    "gpu": {
                        "1x1": {"lora": {"block_n": 64, "block_k": 64, "stages": 0}, "fuse": True}
                    }
                }
            },
            "positive integer",
        ),
        ({"devices": {"gpu": {"1x1": {"lora": {}, "fuse": "yes"}}}}, "fuse"),
        (
            {
                "devices": {
                    "gpu": {
                        "1x1": {
                            "lora": {"block_n": 64, "block_k": 64, "stages": 2},
                            "fuse": True,
                            "split": "yes",
                        }
                    }
                }
            },
            "split is true or false",
        ),
        (
            {
                "devices": {
                    "gpu": {
                        "1x1": {
                            "lora": {"block_n": 64, "block_k": 64, "stages": 2},
                            "fuse": True,
                            "several": "both",
                        }
                    }
                }
            },
            "several is one of 'ours', 'fused', 'split', 'one-launch', 'shrink-beside', not 'both'",
        ),
        (
            {
                "devices": {
                    "gpu": {
                        "1x1": {
                            "lora": {"block_n": 64, "block_k": 64, "stages": 2},
                            "fuse": True,
                            "several": "split",
                            "split": True,
                        }
                    }
                }
            },
            "not both",
        ),
    ],
)
def test_a_bad_table_is_refused_with_where_it_is_wrong(raw: object, message: str) -> None:
    with pytest.raises(GemmTilesError, match=message):
        parse_table(raw, "bad.json")


def test_an_unreadable_table_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "tiles.json"
    path.write_text("{not json")
    with pytest.raises(GemmTilesError, match=r"tiles\.json"):
        load_table(path)
