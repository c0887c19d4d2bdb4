"""``benchmarks/kernels/bench_op_host.py``: the three variants timed side by side, the
``custom_op`` twin runs the package's function, and the table and JSON it writes."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.support.scripts import load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("benchmarks/kernels/bench_op_host.py")


def test_twin_is_the_package_function_registered_the_old_way(bench: ModuleType) -> None:
    twin = bench._custom_op_twin()
    assert twin is bench._custom_op_twin()  # registered once
    assert str(twin.default._schema).startswith("hi_moe_lora_bench::lora_linear(Tensor(a0!) y")
    args = list(bench.op_arguments("cpu"))
    before = args[0].clone()
    twin(*args)  # the no-LoRA flag: returns before any work
    assert torch.equal(args[0], before)


def test_measures_every_variant_and_writes_json(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    assert bench.main(["--calls", "20", "--rounds", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["us_per_call"]) == {"library", "custom_op", "function"}
    assert all(len(s) == 2 and min(s) > 0 for s in result["samples"].values())
    lines = bench.table(result).splitlines()
    assert lines[2].startswith("| library |")
    assert lines[2].endswith("| 1.00 |")
