"""capture_pauses.py: a capture's progress and its long steps, from vLLM's progress bar."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.kernels.capture_pauses import captures, main, scan

BAR = "Capturing CUDA graphs (PIECEWISE): {pct}%|###| {n}/357 [{t}<00:10, 9.9it/s]"
LOG = "\r".join(
    [
        "(EngineCore pid=1) INFO [monitor.py:53] torch.compile took 5.47 s in total",
        BAR.format(pct=0, n=0, t="00:00"),
        BAR.format(pct=31, n=112, t="00:40"),
        BAR.format(pct=79, n=282, t="01:12"),
        BAR.format(pct=79, n=283, t="01:36"),
        BAR.format(pct=80, n=284, t="01:59"),
        BAR.format(pct=80, n=285, t="01:59"),
        BAR.format(pct=100, n=357, t="1:02:03"),
        "later output",
    ]
)


def test_long_steps_are_named_by_the_graph_they_end_on() -> None:
    (capture,) = captures(LOG, min_pause=20)
    assert (capture.done, capture.total, capture.seconds) == (357, 357, 3723)
    assert capture.pauses == [(112, 40), (282, 32), (283, 24), (284, 23), (357, 3604)]


def test_a_bar_that_restarts_is_another_capture() -> None:
    found = captures(LOG + "\n" + BAR.format(pct=0, n=0, t="00:00"), min_pause=5)
    assert [c.done for c in found] == [357, 0]


def test_the_report_names_vllms_timings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "serve.log"
    log.write_text(LOG)
    assert main([str(log), "--min-pause", "20"]) == 0
    out = capsys.readouterr().out
    assert "torch.compile took 5.47 s" in out
    assert "357/357 graphs in 3723 s" in out
    assert "283:+24s" in out
    assert main([str(tmp_path / "missing.log")]) == 2


def _late(n: int, kernel: str, why: str) -> str:
    """A late_compiles.py line as vLLM's log prints it."""
    return (
        f"(EngineCore pid=1) INFO 11-29 16:31:16 [late_compiles.py:105] hi-moe-lora: kernel "
        f"variant {n} compiled after the warm-up: {kernel}; {why} (x_ptr=*bf16/16, BLOCK_M=64)"
    )


def test_late_variants_are_placed_at_the_graph_the_capture_was_on() -> None:
    log = "\r".join(
        [
            _late(1, "_scan_kernel", "no variant of it in the warm-up"),
            BAR.format(pct=0, n=0, t="00:00"),
            BAR.format(pct=79, n=311, t="00:45")
            + _late(2, "_gemm_lora_kernel", "a=i32 (warm-up: i64)"),
            BAR.format(pct=100, n=357, t="01:29"),
            _late(3, "_copy_kernel", "no variant of it in the warm-up"),
        ]
    )
    found, late = scan(log, min_pause=5)
    assert [c.done for c in found] == [357]
    assert [(c.where, c.kernel, c.why) for c in late] == [
        ("before the capture", "_scan_kernel", "no variant of it in the warm-up"),
        ("PIECEWISE graph 312", "_gemm_lora_kernel", "a=i32 (warm-up: i64)"),
        ("after the PIECEWISE capture", "_copy_kernel", "no variant of it in the warm-up"),
    ]


def test_the_report_lists_the_late_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "serve.log"
    log.write_text(LOG + "\n" + _late(1, "_gemm_lora_kernel", "b=i32/16 (warm-up: i64/16)"))
    assert main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "variants of ours compiled after the kernel warm-up: 1" in out
    assert "after the PIECEWISE capture: _gemm_lora_kernel; b=i32/16 (warm-up: i64/16)" in out


def test_the_lines_late_compiles_writes_are_the_ones_it_reads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The line comes from the watch itself, so a change of its wording fails here."""
    pytest.importorskip("triton")
    from triton.runtime.jit import JitFunctionInfo

    from hi_moe_lora.kernels.late_compiles import LateCompileWatch

    watch = LateCompileWatch(previous=None)
    event = {
        "fn": JitFunctionInfo("hi_moe_lora.kernels.gemm_lora", "_gemm_lora_kernel", None),
        "compile": {"signature": {"x_ptr": "*bf16"}, "configs": [{}]},
        "is_manual_warmup": False,
    }
    with caplog.at_level("INFO", logger="hi_moe_lora.kernels.late_compiles"):
        watch(**event)
    (line,) = [r.getMessage() for r in caplog.records]
    _, late = scan(BAR.format(pct=0, n=0, t="00:00") + "\r" + line, min_pause=5)
    assert [(c.where, c.kernel, c.why) for c in late] == [
        ("PIECEWISE graph 1", "_gemm_lora_kernel", "no variant of it in the warm-up")
    ]
