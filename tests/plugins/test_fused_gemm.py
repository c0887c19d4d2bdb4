"""The LoRA layers' ``_apply_sync`` asks the Punica wrapper for the whole output first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

base_linear = pytest.importorskip("vllm.lora.layers.base_linear")

from vllm.model_executor.layers.linear import UnquantizedLinearMethod  # noqa: E402

from plugins import fused_gemm  # noqa: E402

LAYER = base_linear.BaseLinearLayerWithLoRA


class _Wrapper:
    """A wrapper whose ``base_and_lora_linear`` answers ``whole`` (None: vLLM's path), and
    whose ``add_lora_linear`` adds one, so the test sees which path ran."""

    def __init__(self, whole: torch.Tensor | None) -> None:
        self.whole = whole
        self.calls = 0

    def base_and_lora_linear(self, layer: Any, x: torch.Tensor, bias: Any) -> Any:
        self.calls += 1
        return self.whole

    def add_lora_linear(self, y: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return y.add_(1.0)


def _layer(wrapper: object, weight: torch.Tensor) -> Any:
    layer = LAYER.__new__(LAYER)
    torch.nn.Module.__init__(layer)
    base = torch.nn.Module()
    base.weight = torch.nn.Parameter(weight, requires_grad=False)
    base.quant_method = UnquantizedLinearMethod()
    base.quant_method.process_weights_after_loading(base)  # (vLLM CPU picks its GEMM here)
    layer.base_layer = base
    layer.punica_wrapper = wrapper
    layer.lora_a_stacked, layer.lora_b_stacked, layer.output_slices = (), (), (4,)
    return layer


@pytest.fixture
def installed() -> Iterator[None]:
    assert fused_gemm.install()
    assert fused_gemm.install()  # (idempotent)
    yield
    fused_gemm.uninstall()


def test_the_wrappers_whole_output_is_the_layers(installed: None) -> None:
    whole = torch.full((2, 4), 7.0)
    wrapper = _Wrapper(whole)
    out = _layer(wrapper, torch.eye(4, 3))._apply_sync(torch.ones(2, 3))
    assert out is whole
    assert wrapper.calls == 1


def test_none_from_the_wrapper_keeps_vllms_base_gemm_and_lora(installed: None) -> None:
    x, weight = torch.ones(2, 3), torch.eye(4, 3)
    out = _layer(_Wrapper(None), weight)._apply_sync(x)
    assert torch.equal(out, x @ weight.T + 1.0)


def test_uninstall_restores_vllms_method() -> None:
    original = LAYER.__dict__["_apply_sync"]
    fused_gemm.install()
    assert LAYER.__dict__["_apply_sync"] is not original
    fused_gemm.uninstall()
    assert LAYER.__dict__["_apply_sync"] is original
    wrapper = _Wrapper(torch.zeros(2, 4))
    _layer(wrapper, torch.eye(4, 3))._apply_sync(torch.ones(2, 3))
    assert wrapper.calls == 0


class _Platform:
    """A platform as ``fused_gemm.measured_gpu`` reads it."""

    def __init__(self, cuda: bool, name: str) -> None:
        self.cuda, self.name = cuda, name

    def is_cuda(self) -> bool:
        return self.cuda

    def get_device_name(self, device_id: int = 0) -> str:
        return self.name


@pytest.fixture
def platform(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Swap vLLM's current platform for the test; ``measured_gpu`` reads it afresh."""
    import vllm.platforms

    def use(cuda: bool, name: str) -> None:
        monkeypatch.setattr(vllm.platforms, "current_platform", _Platform(cuda, name))
        fused_gemm.measured_gpu.cache_clear()

    yield use
    fused_gemm.measured_gpu.cache_clear()


def test_auto_is_on_only_on_a_gpu_the_tile_table_holds(platform: Any) -> None:
    from hi_moe_lora.kernels.gemm_tiles import measured_devices

    measured = sorted(measured_devices())
    assert measured  # (the shipped table holds at least the GPU it was measured on)
    platform(True, measured[0])
    assert fused_gemm.enabled("auto")
    platform(True, "NVIDIA Unmeasured GPU")
    assert not fused_gemm.enabled("auto")
    assert fused_gemm.enabled("on")  # (on: the rule-of-thumb tiles where none were measured)
    platform(False, measured[0])  # (vLLM CPU: no CUDA kernels to fuse)
    assert not fused_gemm.enabled("auto")
    assert not fused_gemm.enabled("off")


def test_the_log_advises_specialization_only_where_the_fused_gemm_runs_without_it() -> None:
    advice = fused_gemm.specialization_advice(fused=True, specialized=False)
    assert advice is not None
    assert "--specialize-active-lora" in advice
    assert fused_gemm.specialization_advice(fused=True, specialized=True) is None
    assert fused_gemm.specialization_advice(fused=False, specialized=False) is None
