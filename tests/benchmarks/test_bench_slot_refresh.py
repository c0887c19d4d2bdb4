"""bench_slot_refresh.py on the CPU (a check of the script; the interpreter runs the scan)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import load_script

bench = load_script("benchmarks/kernels/bench_slot_refresh.py")


@pytest.fixture(autouse=True)
def _small_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Layers of the 8B shape's seven projections at 1/64 of their widths: the interpreter runs
    the one-launch kernels on the CPU, one program at a time."""
    monkeypatch.setattr(bench, "A_WIDTHS", tuple(w // 64 for w in bench.A_WIDTHS))
    monkeypatch.setattr(bench, "B_HEIGHTS", tuple(h // 64 for h in bench.B_HEIGHTS))


def test_a_cpu_run_times_both_methods_and_they_agree(tmp_path: Path) -> None:
    out = tmp_path / "refresh.json"
    bench.main(["--layers", "1", "--rounds", "2", "--changed", "1", "3", "--out", str(out)])
    summary = json.loads(out.read_text())
    assert [row["changed"] for row in summary["results"]] == [1, 3]
    for row in summary["results"]:
        assert set(row["ms_per_refresh"]) == {"one_launch", "per_tensor"}
        assert all(ms > 0 for ms in row["ms_per_refresh"].values())


def test_narrow_copies_are_refreshed_alike_by_both_methods(tmp_path: Path) -> None:
    out = tmp_path / "refresh.json"
    args = ["--layers", "1", "--rounds", "1", "--changed", "2", "--max-rank", "32"]
    bench.main([*args, "--narrow-b", "--out", str(out)])
    assert json.loads(out.read_text())["narrow_b"] is True


def test_narrow_copies_need_a_max_rank_above_16() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--narrow-b", "--max-rank", "16"])


def test_table_has_a_row_per_count() -> None:
    results = [{"changed": 1, "ms_per_refresh": {"one_launch": 0.25, "per_tensor": 8.0}}]
    lines = bench.table(results).splitlines()
    assert lines[0] == "| new adapters in a refresh | one_launch, ms | per_tensor, ms |"
    assert lines[2] == "| 1 | 0.25 | 8.00 |"


def test_changed_counts_are_checked() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--changed", "17"])
