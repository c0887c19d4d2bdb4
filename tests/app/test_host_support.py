"""hi_moe_lora.app.host_support: what it reads from a model and a host, checked against vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hi_moe_lora.app import host_support
from hi_moe_lora.app.host_support import (
    CPU_AWQ_OP,
    cpu_kernel_library,
    cuda_device_present,
    library_has_op,
    quantization_method,
    unservable_reason,
)
from tests.support.vllm_cpu import loaded_kernel_library, serves_awq


def _model(root: Path, config: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    return root


def _awq_model(root: Path) -> Path:
    return _model(root, {"model_type": "llama", "quantization_config": {"quant_method": "AWQ"}})


def test_the_quantization_method_comes_from_config_json(tmp_path: Path) -> None:
    assert quantization_method(_awq_model(tmp_path / "awq")) == "awq"
    plain = _model(tmp_path / "plain", {"model_type": "llama"})
    assert quantization_method(plain) is None
    fp8 = _model(tmp_path / "fp8", {"quantization_config": {"quant_method": "fp8"}})
    assert quantization_method(fp8) == "fp8"


@pytest.mark.parametrize(
    "config_text",
    ["not json", "[1, 2]", '{"quantization_config": "awq"}', '{"quantization_config": {}}'],
)
def test_an_unreadable_config_has_no_method(tmp_path: Path, config_text: str) -> None:
    (tmp_path / "config.json").write_text(config_text)
    assert quantization_method(tmp_path) is None


def test_a_hub_name_or_missing_directory_has_no_method(tmp_path: Path) -> None:
    assert quantization_method("meta-llama/Llama-3-8B") is None
    assert quantization_method(tmp_path / "absent") is None


def test_an_op_is_found_by_its_name_in_a_library(tmp_path: Path) -> None:
    library = tmp_path / "lib.so"
    library.write_bytes(b"\0" * 4096 + b"_C::" + CPU_AWQ_OP + b"(Tensor x)" + b"\0" * 100)
    assert library_has_op(library, CPU_AWQ_OP)
    assert not library_has_op(library, b"cpu_gemm_w8a8")


@pytest.mark.vllm
def test_the_library_chosen_is_the_one_vllm_loads() -> None:
    loaded = loaded_kernel_library()
    assert loaded is not None, "vLLM's CPU build mapped no kernel library"
    chosen = cpu_kernel_library()
    assert chosen is not None
    assert chosen.resolve() == loaded.resolve()


@pytest.mark.vllm
def test_an_awq_model_is_refused_exactly_when_vllm_lacks_its_kernel(tmp_path: Path) -> None:
    reason = unservable_reason(_awq_model(tmp_path))
    assert (reason is None) == serves_awq()
    if reason is not None:
        assert "AVX-512" in reason
        assert CPU_AWQ_OP.decode() in reason
        assert str(tmp_path) in reason


@pytest.mark.vllm
def test_an_unquantized_model_is_never_refused(tmp_path: Path) -> None:
    assert unservable_reason(_model(tmp_path, {"model_type": "llama"})) is None


def test_cuda_device_present_is_what_torch_sees() -> None:
    import torch

    assert cuda_device_present() is torch.cuda.is_available()


def test_without_torch_there_is_no_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = host_support.importlib.util.find_spec

    def no_torch(name: str, package: str | None = None) -> object:
        return None if name == "torch" else real_find_spec(name, package)

    monkeypatch.setattr(host_support.importlib.util, "find_spec", no_torch)
    assert cuda_device_present() is False
