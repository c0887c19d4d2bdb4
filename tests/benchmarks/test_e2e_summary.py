"""e2e_summary.py: ratios to the mean of every base run, the drift, and each run's rounds;
a request's time over the base runs' split by phase."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.kernels.e2e_summary import (
    is_base,
    main,
    phase_excess,
    request_phases,
    run_of,
    summary,
)


def _phases(prefill: float, decode: float, ttft: float) -> dict[str, float]:
    return {"queue": 0.5, "prefill": prefill, "ttft": ttft, "decode": decode}


def _write(
    results: Path,
    name: str,
    throughput: float,
    phases: bool = False,
    split: dict[str, float] | None = None,
) -> None:
    data = {
        "output_throughput": throughput,
        "median_tpot_ms": 7.25,
        "median_ttft_ms": 401.6,
        "p99_ttft_ms": 512.2,
        "completed": 256,
    }
    if phases:
        data["server_phases_ms"] = {"queue": 12.5, "prefill": 250.0, "ttft": 330.1, "decode": 860}
    if split is not None:
        data["server_phases_ms"] = split
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


def test_a_requests_time_is_split_into_its_phases() -> None:
    parts = request_phases(_phases(prefill=48.0, decode=620.0, ttft=60.0))
    assert parts == {"decode": 620.0, "prefill": 48.0, "queue": 0.5, "before the queue": 11.5}


def test_the_excess_over_the_bases_mean_is_split_by_phase() -> None:
    bases = [_phases(48.0, 620.0, 60.0), _phases(50.0, 624.0, 64.0)]
    excess = phase_excess(_phases(65.0, 657.0, 81.0), bases)
    assert excess["decode"] == pytest.approx(35.0)
    assert excess["prefill"] == pytest.approx(16.0)
    assert excess["queue"] == pytest.approx(0.0)
    assert excess["before the queue"] == pytest.approx(15.5 - 12.5)
    assert excess["request"] == pytest.approx(54.0)  # (TTFT and decode: 738 against 684)


def test_the_summary_prints_each_runs_split_and_the_rounds_mean(tmp_path: Path) -> None:
    _write(tmp_path, "base", 100.0, split=_phases(48.0, 620.0, 60.0))
    _write(tmp_path, "one", 90.0, split=_phases(64.0, 650.0, 78.0))
    _write(tmp_path, "one.2", 92.0, split=_phases(60.0, 640.0, 74.0))
    lines = summary(tmp_path, "srv", ["base", "one", "one.2"], 64)
    assert lines[-1] == (
        "srv c 64     one: a request +41.0 ms over base: decode +25.0, prefill +14.0, "
        "queue +0.0, before the queue +2.0 (mean of 2 rounds)"
    )
    splits = [line.strip() for line in lines if line.strip().startswith("a request")]
    assert splits == [
        "a request +48.0 ms over base: decode +30.0, prefill +16.0, queue +0.0, before the queue "
        "+2.0",
        "a request +34.0 ms over base: decode +20.0, prefill +12.0, queue +0.0, before the queue "
        "+2.0",
    ]
