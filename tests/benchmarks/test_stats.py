"""benchmarks/stats.py: the nearest-rank percentile the benchmarks report."""

from __future__ import annotations

from benchmarks.stats import percentile


def test_nearest_rank_without_interpolation() -> None:
    values = [float(v) for v in range(1, 101)]  # 1 .. 100
    assert percentile(values, 0.5) == 51.0
    assert percentile(values, 0.99) == 100.0
    assert percentile(values, 1.0) == 100.0  # clamped to the largest
    assert percentile([3.0, 1.0, 2.0], 0.0) == 1.0  # sorted first
