"""step_floor.py: the weights' bytes of a decode step, the adapters a step holds, the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.kernels.step_floor import (
    adapter_bytes,
    base_weight_bytes,
    distinct_adapters,
    floor_rows,
    main,
)


def _decode(busy: float, tokens: float = 8.0, **categories: float) -> dict[str, Any]:
    return {"decode": {"tokens": tokens, "busy": busy, "period": busy + 50.0, **categories}}


def test_the_base_bytes_are_the_projections_of_every_layer_and_the_lm_head() -> None:
    qkv = 4096 * (4096 + 1024 + 1024)
    o = 4096 * 4096
    gate_up = 4096 * 2 * 14336
    down = 14336 * 4096
    lm_head = 128256 * 4096
    assert base_weight_bytes() == 2 * (32 * (qkv + o + gate_up + down) + lm_head)
    assert base_weight_bytes(layers=1, vocab=0) == 2 * (qkv + o + gate_up + down)


def test_an_adapter_has_an_a_per_slice_and_a_b_as_wide_as_the_output() -> None:
    rank = 16
    qkv = rank * (3 * 4096 + 6144)
    o = rank * (4096 + 4096)
    gate_up = rank * (2 * 4096 + 2 * 14336)
    down = rank * (14336 + 4096)
    assert adapter_bytes(rank, layers=1) == 2 * (qkv + o + gate_up + down)
    assert adapter_bytes(64) == 4 * adapter_bytes(16)


def test_a_step_holds_fewer_distinct_adapters_than_rows_when_traffic_spreads() -> None:
    assert distinct_adapters(1, 8) == pytest.approx(1.0)
    assert distinct_adapters(16, 8) == pytest.approx(16 * (1 - (15 / 16) ** 8))
    assert distinct_adapters(16, 1) == pytest.approx(1.0)
    assert distinct_adapters(0, 8) == 0.0


def test_each_load_is_put_beside_the_floor_and_the_targets_budget() -> None:
    summaries = {
        "one": _decode(5500.0, gemm_lora=4300.0, gemm=250.0),
        "base": _decode(5000.0, gemm=4000.0),
        "prefill-only": {"mixed": {"tokens": 300.0, "busy": 9000.0}},
    }
    rows = floor_rows(summaries, "base", {"one": 1}, 16, 4.8, [0.95, 0.9])
    assert [row["label"] for row in rows] == ["base", "one"]
    base, one = rows
    floor = base_weight_bytes() / 4.8e6
    assert base["floor_us"] == pytest.approx(floor)
    assert base["share"] == pytest.approx(floor / 4000.0)
    assert one["gemm_us"] == pytest.approx(4550.0)
    assert one["over_base_us"] == pytest.approx(550.0)
    assert one["lora_bytes_us"] == pytest.approx(adapter_bytes(16) / 4.8e6)
    assert one["busy_ratio"] == pytest.approx(5000.0 / 5500.0)
    assert one["budget_us"][0.95] == pytest.approx(5000.0 / 0.95 - 5000.0)
    assert one["budget_us"][0.9] == pytest.approx(5000.0 / 0.9 - 5000.0)


@pytest.mark.parametrize(
    ("base", "bandwidth", "message"),
    [("missing", 4.8, "no decode steps"), ("base", 0.0, "positive")],
)
def test_a_missing_base_or_a_bandwidth_of_zero_is_refused(
    base: str, bandwidth: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        floor_rows({"base": _decode(1.0, gemm=1.0)}, base, {}, 16, bandwidth, [0.95])


def test_the_command_prints_a_row_per_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = tmp_path / "steps.json"
    steps.write_text(
        json.dumps(
            {
                "srv-base": _decode(5000.0, gemm=4000.0),
                "srv-many": _decode(5600.0, gemm_lora=4650.0),
            }
        )
    )
    code = main([str(steps), "--base", "srv-base", "--adapters", "srv-many=16", "--target", "0.9"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| load | rows | distinct adapters |")
    assert lines[0].endswith("| LoRA budget at 0.9 µs |")
    assert lines[3].startswith("| srv-many | 8 | 6.5 | 4650 |")
    assert lines[3].endswith("| 650 | 113 | 0.893 | 556 |")


def test_a_malformed_adapter_count_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps({"b": _decode(1.0, gemm=1.0)}))
    with pytest.raises(SystemExit):
        main([str(steps), "--base", "b", "--adapters", "x=many"])
    assert "LABEL=N" in capsys.readouterr().err
