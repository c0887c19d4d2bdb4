"""Our kernels' variants compiled after the warm-up are logged, with how they differ from the
warm-up's; other hooks keep their say."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from hi_moe_lora.kernels import late_compiles
from hi_moe_lora.kernels.late_compiles import (
    LateCompileWatch,
    describe,
    recording_warm_up,
    unwatch,
    watch,
)

knobs = pytest.importorskip("triton").knobs
LOGGER = "hi_moe_lora.kernels.late_compiles"


@pytest.fixture(autouse=True)
def _no_hook_before() -> Iterator[None]:
    """Each test starts without a hook (another test's warm-up may have left its watch)."""
    saved = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = None
    yield
    knobs.runtime.jit_cache_hook = saved


def _compile_event(
    module: str, *, manual: bool = False, aligned: bool = True, block: int = 16
) -> dict[str, Any]:
    """What Triton 3.6 hands its JIT cache hook before a compile (``JITFunction._call_hook``):
    ``x_ptr`` specialized as 16-byte aligned or not, ``BLOCK`` a constexpr."""
    from triton.runtime.jit import JitFunctionInfo

    attrs = {(0,): [["tt.divisibility", 16]]} if aligned else {}
    return {
        "key": "k",
        "repr": "kernel[num_warps=4](x_ptr: ())",
        "fn": JitFunctionInfo(module, "kernel", None),
        "compile": {
            "signature": {"x_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr"},
            "constants": {(2,): block},
            "configs": [attrs],
            "num_warps": 4,
            "num_stages": 3,
        },
        "is_manual_warmup": manual,
        "already_compiled": False,
    }


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_variants_fields_are_its_types_alignment_constexprs_and_options() -> None:
    assert describe(_compile_event("m")["compile"]) == {
        "x_ptr": "*bf16/16",
        "n": "i32",
        "BLOCK": "16",
        "num_warps": "4",
        "num_stages": "3",
    }
    assert describe(None) == {}  # (a Triton that hands nothing: no fields, no failure)


def test_our_variants_are_logged_with_how_they_differ_from_the_warm_ups(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with recording_warm_up() as hook:
        assert isinstance(hook, LateCompileWatch)
        hook(**_compile_event("hi_moe_lora.kernels.gemm_lora", manual=True))
        hook(**_compile_event("hi_moe_lora.kernels.gemm_lora", manual=True, block=32))
    assert knobs.runtime.jit_cache_hook is hook
    assert not hook.warming
    with caplog.at_level("INFO", logger=LOGGER):
        assert hook(**_compile_event("hi_moe_lora.kernels.gemm_lora", aligned=False)) is None
        hook(**_compile_event("vllm.lora.ops.triton_ops.lora_shrink_op"))  # (not ours)
        hook(**_compile_event("hi_moe_lora.kernels.gemm_shrink", manual=True))  # (a warm-up)
        hook(**_compile_event("hi_moe_lora.kernels.gemm_lora", block=32))  # (the warm-up's)
    assert _lines(caplog) == [
        "hi-moe-lora: kernel variant 1 compiled after the warm-up: kernel; "
        "x_ptr=*bf16 (warm-up: *bf16/16) "
        "(x_ptr=*bf16, n=i32, BLOCK=16, num_warps=4, num_stages=3)",
        "hi-moe-lora: kernel variant 2 compiled after the warm-up: kernel; "
        "the same fields as a warm-up variant "
        "(x_ptr=*bf16/16, n=i32, BLOCK=32, num_warps=4, num_stages=3)",
    ]
    assert hook.count == 2


def test_listeners_hear_each_late_variant_and_a_failing_one_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[str] = []

    def broken(kernel: str) -> None:
        raise RuntimeError("metrics down")

    hook = watch()
    assert hook is not None
    hook.listen(heard.append)
    hook.listen(heard.append)  # (once per listener)
    hook.listen(broken)
    with caplog.at_level("INFO", logger=LOGGER):
        assert hook(**_compile_event("hi_moe_lora.kernels.gemm_lora")) is None
        hook(**_compile_event("vllm.lora.ops.triton_ops.lora_shrink_op"))  # (not ours)
    assert heard == ["kernel"]
    assert "a late-compile listener failed" in caplog.text
    assert hook.count == 1


def test_the_hook_it_replaced_is_still_called_and_answers_for_triton() -> None:
    seen: list[str] = []

    def earlier(**kwargs: Any) -> bool:
        seen.append(kwargs["fn"].module)
        return True  # (Triton then skips the compile: the earlier hook's call, kept)

    knobs.runtime.jit_cache_hook = earlier
    hook = watch()
    assert hook is not None
    assert hook.previous is earlier
    assert hook(**_compile_event("vllm.model_executor.layers.x")) is True
    assert hook(**_compile_event("hi_moe_lora.kernels.gemm_lora")) is True
    assert seen == ["vllm.model_executor.layers.x", "hi_moe_lora.kernels.gemm_lora"]
    assert watch() is hook  # (idempotent: no hook wrapping itself)
    unwatch()
    assert knobs.runtime.jit_cache_hook is earlier


def test_a_triton_without_the_hook_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(late_compiles, "_knobs", lambda: None)
    assert watch() is None
    unwatch()  # (nothing to put back)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="Triton's JIT compiles for a GPU")
def test_a_real_launch_that_compiles_after_the_watch_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import triton

    from hi_moe_lora.kernels import narrow_copy

    kernel = triton.jit(narrow_copy._copy_kernel)  # (a fresh cache: the launch must compile)
    hook = watch()  # (a new watch: no warm-up variants recorded)
    assert hook is not None
    data = torch.zeros(16, dtype=torch.bfloat16, device="cuda")
    table = torch.zeros(narrow_copy.TABLE_COLUMNS, dtype=torch.int64, device="cuda")
    slots = torch.zeros(1, dtype=torch.int32, device="cuda")  # (no rows: nothing is copied)
    with caplog.at_level("INFO", logger=LOGGER):
        kernel[(1, 1, 1)](data, data, table, slots, narrow_copy.TABLE_COLUMNS, 16, 16)
        kernel[(1, 1, 1)](data, data, table, slots, narrow_copy.TABLE_COLUMNS, 16, 16)
    torch.cuda.synchronize()
    lines = _lines(caplog)
    assert len(lines) == 1
    assert "compiled after the warm-up: _copy_kernel; no variant of it" in lines[0]
