"""gemm_spill_report.py: a row per compiled kernel of the fused GEMM, each compiled cold."""

from __future__ import annotations

import os

import pytest

from tests.support.scripts import load_script

report = load_script("benchmarks/kernels/gemm_spill_report.py")


def test_each_asked_variant_is_compiled_into_a_fresh_cache_and_reported(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/keep/me")
    argv = ["--shapes", "4096x4096", "--slot-ranks", "16", "64", "--forms", "ahead"]
    assert report.main([*argv, "--may-fuse", "no"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.strip("|").split("|") for line in lines[2:]]
    assert [(row[0].strip(), row[2].strip(), row[3].strip()) for row in rows] == [
        ("4096x4096", "16", "ahead"),
        ("4096x4096", "64", "ahead"),
    ]
    for row in rows:
        regs, stack, seconds = int(row[5]), int(row[6]), float(row[7])
        assert 0 < regs <= 255
        assert stack >= 0
        assert seconds > 0
    assert os.environ["TRITON_CACHE_DIR"] == "/keep/me"  # (the caller's cache left as it was)


def test_a_shape_the_table_does_not_plan_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        report.main(["--shapes", "1x1"])
    assert "not planned for NVIDIA H200: 1x1" in capsys.readouterr().err
