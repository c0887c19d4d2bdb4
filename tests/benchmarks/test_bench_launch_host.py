"""bench_launch_host.py's GPU-free parts: the launcher's argument order and the table."""

from __future__ import annotations

from typing import Any

from tests.support.scripts import load_script

bench = load_script("benchmarks/kernels/bench_launch_host.py")


def test_bound_arguments_follow_the_kernel_signature() -> None:
    class Kernel:
        @staticmethod
        def fn(x: Any, y: Any, n: Any, BLOCK: Any, FLAG: Any) -> None:
            return None

    bound = bench._bound_arguments(
        Kernel(), ("x", "y", 3), {"FLAG": True, "BLOCK": 64, "num_warps": 4}
    )
    assert bound == ["x", "y", 3, 64, True]


def test_table_has_a_column_per_token_count() -> None:
    results = [
        {"tokens": 16, "us_per_call": {"op": 50.0, "scratch": 4.0}},
        {"tokens": 1024, "us_per_call": {"op": 60.0}},
    ]
    lines = bench.table(results).splitlines()
    assert lines[0] == "| stage | M = 16 | M = 1024 |"
    assert lines[2] == "| op | 50.0 | 60.0 |"
    assert lines[3] == "| scratch | 4.0 | nan |"


def test_direct_launches_are_switched_on_for_the_plan_stage() -> None:
    from hi_moe_lora.kernels import direct_launch

    was = direct_launch.SWITCH.on
    try:
        direct_launch.SWITCH.set(False)
        assert bench._direct_launch_switch() is direct_launch.SWITCH
        assert direct_launch.SWITCH.on
    finally:
        direct_launch.SWITCH.set(was)


def test_profile_lists_the_functions_with_the_most_own_time_a_call() -> None:
    def slow() -> int:
        return sum(range(20_000))

    def call() -> None:
        slow()
        len("quick")

    rows = bench.profile(call, 50, 3)
    assert len(rows) == 3
    assert [row["own_us"] for row in rows] == sorted((row["own_us"] for row in rows), reverse=True)
    summed = next(row for row in rows if "sum" in row["function"])
    assert summed["runs_per_call"] == 1.0
    assert summed["own_us"] > 0
    text = bench.profile_text("op", rows).splitlines()
    assert text[0].startswith("op: own µs a call")
    assert len(text) == 4
