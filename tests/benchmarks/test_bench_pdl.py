"""bench_pdl.py's arithmetic and table (the timing itself needs an sm_90 GPU)."""

from __future__ import annotations

import pytest
import torch

from tests.support.scripts import load_script

bench = load_script("benchmarks/kernels/bench_pdl.py")


def test_summary_is_per_launch_against_the_gemms_alone() -> None:
    chain = {"base": 1000.0, "off": 1320.0, "launch": 1280.0, "overlap": 1200.0}
    summary = bench.summarise(chain, launches=32)
    assert summary["us_per_launch"]["base"] == pytest.approx(31.25)
    assert summary["lora_us_per_launch"] == pytest.approx(
        {"off": 10.0, "launch": 8.75, "overlap": 6.25}
    )
    assert summary["ratio_to_base"]["overlap"] == pytest.approx(1000 / 1200)


def test_table_has_a_row_per_case() -> None:
    chain = {"base": 640.0, "off": 960.0, "launch": 896.0, "overlap": 832.0}
    rows = [{"tokens": 64, "adapters": 16, "summary": bench.summarise(chain, 32)}]
    lines = bench.table(rows).splitlines()
    assert lines[0].startswith("| tokens | adapters | base µs / GEMM | off: LoRA µs")
    assert lines[2] == "| 64 | 16 | 20.00 | 10.00 (0.667) | 8.00 (0.714) | 6.00 (0.769) |"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_without_a_gpu_it_says_so() -> None:
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench.main(["--tokens", "8"])
