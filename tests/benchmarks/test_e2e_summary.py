"""e2e_summary.py: ratios to the mean of every base run, the drift, and each run's rounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.kernels.e2e_summary import is_base, main, run_of, summary


def _write(results: Path, name: str, throughput: float, phases: bool = False) -> None:
    data = {
        "output_throughput": throughput,
        "median_tpot_ms": 7.25,
        "median_ttft_ms": 401.6,
        "p99_ttft_ms": 512.2,
        "completed": 256,
    }
    if phases:
        data["server_phases_ms"] = {"queue": 12.5, "prefill": 250.0, "ttft": 330.1, "decode": 860}
    (results / f"srv-c64-{name}.json").write_text(json.dumps(data))


def test_a_rounds_name_names_the_run_it_repeats() -> None:
    assert [run_of(n) for n in ("many", "many.2", "many8.3", "base-again")] == [
        "many",
        "many",
        "many8",
        "base-again",
    ]
    assert [is_base(n) for n in ("base", "base.4", "base-again", "one.2")] == [
        True,
        True,
        True,
        False,
    ]


def test_ratios_are_to_the_mean_of_every_base_run_and_rounds_are_summed_up(
    tmp_path: Path,
) -> None:
    runs = {"base": 100.0, "many": 80.0, "one": 90.0, "base.2": 110.0, "many.2": 84.0}
    for name, throughput in runs.items():
        _write(tmp_path, name, throughput, phases=name == "many")
    lines = summary(tmp_path, "srv", [*runs, "one.2"], 64)
    assert lines[0] == "srv c 64 base runs 100.0 then 110.0 out tok/s: +10.0 % from first to last"
    assert (
        "    many:     80.0 out tok/s (0.762x base)  TPOT p50 7.25 ms  TTFT p50/p99 402/512"
        in (lines[2])
    )
    assert lines[3].strip() == (
        "server side: queue 12.5 ms, prefill 250.0 ms, TTFT 330.1 ms, decode 860 ms"
    )
    assert "srv c 64   one.2: no result" in lines
    assert lines[-1] == "srv c 64    many: 0.781x base over 2 rounds (0.762-0.800)"
    assert not any("one: " in line and "rounds" in line for line in lines)  # (one round only)
    assert not any("base: " in line and "rounds" in line for line in lines)


def test_without_a_base_run_there_is_no_ratio(tmp_path: Path) -> None:
    _write(tmp_path, "one", 90.0)
    (line,) = summary(tmp_path, "srv", ["one"], 64)
    assert "(no base run)" in line


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "base", 100.0)
    _write(tmp_path, "one", 95.0)
    assert main([str(tmp_path), "srv", "base one", "64"]) == 0
    assert "(0.950x base)" in capsys.readouterr().out
    assert main([str(tmp_path)]) == 2
