"""helper_residency.py: programs an SM from a kernel's resources, the helpers placed at the
start, and the sweep's LoRA cost over the plain GEMM beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hi_moe_lora.kernels.gemm_tiles import FewRows, GemmPlan, GemmTile, SeveralRoute, table_json
from tests.support.scripts import load_script

residency = load_script("benchmarks/kernels/helper_residency.py")


@pytest.mark.parametrize(
    ("registers", "shared", "warps", "expected", "bound"),
    [
        (148, 40 * 1024, 4, 3, "registers: 4,864 a warp, 19,456 a program"),
        (110, 120 * 1024, 4, 1, "shared memory"),
        (128, 72 * 1024, 8, 2, "registers and shared memory alike"),
        (32, 0, 4, 16, "warps: 64 an SM"),
        (16, 0, 1, 32, "programs: 32 an SM"),
    ],
)
def test_programs_an_sm_are_bound_by_the_scarcest_resource(
    registers: int, shared: int, warps: int, expected: int, bound: str
) -> None:
    assert residency.programs_an_sm(registers, shared, warps) == expected, bound


def test_helpers_after_the_gemms_programs_get_only_the_slots_left() -> None:
    assert residency.helpers_resident(128, 132, 396) == 132
    assert residency.helpers_resident(224, 132, 264) == 40
    assert residency.helpers_resident(448, 132, 396) == 0


def _results(tmp_path: Path) -> Path:
    path = tmp_path / "tune.json"
    row = {
        "shape": "o", "key": "4096x4096", "m": 8,
        "plain": [[32, 128, 6, 4, 1, 13.0], [64, 64, 6, 4, 2, 13.5]],
        "tiles": [[32, 128, 6, 4, 1, 14.5, 15.0, 0.01], [32, 256, 4, 4, 1, 14.0, 14.2, 0.01]],
    }  # fmt: skip
    path.write_text(json.dumps({"device": "NVIDIA H200", "rows": [row]}))
    return path


def test_only_tiles_timed_plain_and_with_lora_are_costed(tmp_path: Path) -> None:
    costs = residency.lora_costs(json.loads(_results(tmp_path).read_text()))
    assert costs == [
        {"shape": "o", "n": 4096, "m": 8, "tile": GemmTile(32, 128, 6), "one": 1.5, "several": 2.0}
    ]


def test_each_tile_is_compiled_and_reported_with_the_classes_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("triton.backends.nvidia")
    assert residency.main([str(_results(tmp_path))]) == 0
    out = capsys.readouterr().out
    (line,) = [row for row in out.splitlines() if row.startswith("| o |")]
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells[:3] == ["o", "8", "32 x 128 x 6, 4 warps, split 1"]
    fit, gemm, slots, resident = (int(cell) for cell in cells[5:9])
    assert (gemm, slots) == (128, fit * 132)
    assert resident == min(132, max(0, slots - 128))
    assert cells[9] == "1.5 / 2.0"
    assert "median 1.5 µs" in out


def test_a_file_that_is_not_a_sweeps_results_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": [{"shape": "o"}]}')
    with pytest.raises(SystemExit):
        residency.main([str(bad)])
    assert "not a tune_few_rows.py results file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        residency.main([str(_results(tmp_path)), "--sms", "0"])
    assert "--sms is at least 1" in capsys.readouterr().err


def test_waves_round_the_gemms_programs_over_the_slots_up() -> None:
    assert residency.waves(224, 264) == 1
    assert residency.waves(264, 264) == 1
    assert residency.waves(448, 264) == 2
    assert residency.waves(448, 396) == 2


def _plans() -> dict[str, GemmPlan]:
    return {
        "4096x4096": GemmPlan(
            GemmTile(64, 64, 6, 4, 2), True, None, SeveralRoute.ONE_LAUNCH,
            FewRows(8, SeveralRoute.ONE_LAUNCH, True, GemmTile(32, 256, 4)),
        ),
        "6144x4096": GemmPlan(
            GemmTile(64, 128, 4), True, None, SeveralRoute.OURS, FewRows(8, SeveralRoute.SPLIT)
        ),
        "4096x14336": GemmPlan(GemmTile(64, 64, 6, 4, 2), True, None),
    }  # fmt: skip


def test_each_plans_few_rows_kernel_is_its_few_rows_tile_in_its_routes_form() -> None:
    assert residency.few_rows_kernels(_plans()) == [
        ("4096x4096", GemmTile(32, 256, 4), "inside"),
        ("6144x4096", GemmTile(64, 128, 4), "ahead"),  # (no tile of its own: the LoRA tile)
    ]  # (4096x14336 has no few_rows: left out)


def _table(tmp_path: Path) -> Path:
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps(table_json({"NVIDIA H200": _plans()}, "test plans")))
    return path


def test_a_tables_few_rows_kernels_are_compiled_and_placed_at_each_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("triton.backends.nvidia")
    assert residency.main(["--table", str(_table(tmp_path)), "--rows", "8", "32"]) == 0
    out = capsys.readouterr().out
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in out.splitlines()
        if line.startswith("| 4") or line.startswith("| 6")
    ]
    assert [(cells[0], cells[1], cells[3]) for cells in rows] == [
        ("4096x4096", "8", "inside"), ("4096x4096", "32", "inside"),
        ("6144x4096", "8", "ahead"), ("6144x4096", "32", "ahead"),
    ]  # fmt: skip
    for cells in rows:
        registers, stack, _, fit, gemm, slots, wave_count = (int(cell) for cell in cells[4:11])
        assert 0 < registers <= 255
        assert stack >= 0
        assert slots == fit * 132
        assert wave_count == -(-gemm // slots)
    inside, ahead = rows[0], rows[2]
    assert inside[2] == "32 x 256 x 4, 4 warps, split 1"
    assert int(inside[8]) == 4096 // 32
    assert int(inside[11]) == min(132, max(0, int(inside[9]) - int(inside[8])))
    assert ahead[2] == "64 x 128 x 4, 4 warps, split 1"  # (its LoRA tile: no few-rows tile)
    assert int(ahead[8]) == 6144 // 64
    assert ahead[11] == "-"  # (only the one launch has helpers)


def test_a_table_without_few_rows_plans_or_rows_past_the_fused_gemms_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path)
    with pytest.raises(SystemExit):
        residency.main(["--table", str(table), "--rows", "64"])
    assert "--rows are from 1 to" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        residency.main(["--table", str(table), "--device", "NVIDIA H100"])
    assert "holds no few-rows plan for 'NVIDIA H100'" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"devices": []}')
    with pytest.raises(SystemExit):
        residency.main(["--table", str(broken)])
    assert "not a tile table" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        residency.main([str(table), "--table", str(table)])
    assert "not allowed with argument" in capsys.readouterr().err
