"""bench_slot_refresh.py on the CPU (a check of the script; the interpreter runs the scan)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import load_script

bench = load_script("benchmarks/kernels/bench_slot_refresh.py")


def test_a_cpu_run_times_both_methods_and_they_agree(tmp_path: Path) -> None:
    out = tmp_path / "refresh.json"
    bench.main(["--layers", "1", "--rounds", "2", "--changed", "1", "3", "--out", str(out)])
    summary = json.loads(out.read_text())
    assert [row["changed"] for row in summary["results"]] == [1, 3]
    for row in summary["results"]:
        assert set(row["ms_per_refresh"]) == {"one_launch", "per_tensor"}
        assert all(ms > 0 for ms in row["ms_per_refresh"].values())


def test_table_has_a_row_per_count() -> None:
    results = [{"changed": 1, "ms_per_refresh": {"one_launch": 0.25, "per_tensor": 8.0}}]
    lines = bench.table(results).splitlines()
    assert lines[0] == "| new adapters in a refresh | one_launch, ms | per_tensor, ms |"
    assert lines[2] == "| 1 | 0.25 | 8.00 |"


def test_changed_counts_are_checked() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--changed", "17"])
