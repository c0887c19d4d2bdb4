"""Our kernels' variants compiled after the warm-up are logged; other hooks keep their say."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from hi_moe_lora.kernels import late_compiles
from hi_moe_lora.kernels.late_compiles import LateCompileWatch, unwatch, watch

knobs = pytest.importorskip("triton").knobs
LOGGER = "hi_moe_lora.kernels.late_compiles"


@pytest.fixture(autouse=True)
def _restore_hook() -> Iterator[None]:
    saved = knobs.runtime.jit_cache_hook
    yield
    knobs.runtime.jit_cache_hook = saved


def _compile_event(module: str, *, manual: bool = False) -> dict[str, Any]:
    """What Triton hands its JIT cache hook before a compile (``JITFunction._call_hook``)."""
    from triton.runtime.jit import JitFunctionInfo

    return {
        "key": "k",
        "repr": f"{module.rsplit('.', 1)[-1]}_kernel[num_warps=4](x_ptr: *bf16, n: i32)",
        "fn": JitFunctionInfo(module, "kernel", None),
        "compile": {},
        "is_manual_warmup": manual,
        "already_compiled": False,
    }


def test_our_variants_are_logged_with_tritons_description(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hook = watch()
    assert isinstance(hook, LateCompileWatch)
    assert knobs.runtime.jit_cache_hook is hook
    with caplog.at_level("INFO", logger=LOGGER):
        assert hook(**_compile_event("hi_moe_lora.kernels.gemm_lora")) is None
        hook(**_compile_event("vllm.lora.ops.triton_ops.lora_shrink_op"))
        hook(**_compile_event("hi_moe_lora.kernels.gemm_shrink", manual=True))  # (a warm-up)
        hook(**_compile_event("hi_moe_lora.kernels.gemm_shrink"))
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert lines == [
        "hi-moe-lora: kernel variant 1 compiled after the warm-up: "
        "gemm_lora_kernel[num_warps=4](x_ptr: *bf16, n: i32)",
        "hi-moe-lora: kernel variant 2 compiled after the warm-up: "
        "gemm_shrink_kernel[num_warps=4](x_ptr: *bf16, n: i32)",
    ]
    assert hook.count == 2


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
    hook = watch()
    assert hook is not None
    data = torch.zeros(16, dtype=torch.bfloat16, device="cuda")
    table = torch.zeros(narrow_copy.TABLE_COLUMNS, dtype=torch.int64, device="cuda")
    slots = torch.zeros(1, dtype=torch.int32, device="cuda")  # (no rows: nothing is copied)
    with caplog.at_level("INFO", logger=LOGGER):
        kernel[(1, 1, 1)](data, data, table, slots, narrow_copy.TABLE_COLUMNS, 16, 16)
        kernel[(1, 1, 1)](data, data, table, slots, narrow_copy.TABLE_COLUMNS, 16, 16)
    torch.cuda.synchronize()
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1
    assert "_copy_kernel" in lines[0]
