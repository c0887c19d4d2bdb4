"""Streaming scan of tensor values: every weight finite, dtypes LoRA weights may have."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

import hi_moe_lora.adapters.tensors as tensors_module
from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.safetensors_header import read_safetensors_layout
from hi_moe_lora.adapters.tensors import check_tensor_values
from tests.support.adapter_files import safetensors_bytes

FORMATS = {"F16": "e", "F32": "f", "F64": "d"}


def _file(tmp_path: Path, dtype: str, values: list[float]) -> Path:
    if dtype == "BF16":  # the upper half of a float32
        data = b"".join(struct.pack("<f", v)[2:] for v in values)
    else:
        data = struct.pack(f"<{len(values)}{FORMATS[dtype]}", *values)
    header = json.dumps(
        {"w": {"dtype": dtype, "shape": [len(values)], "data_offsets": [0, len(data)]}}
    ).encode()
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def _check(path: Path) -> None:
    check_tensor_values(path, read_safetensors_layout(path))


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32", "F64"])
def test_finite_values_pass(tmp_path: Path, dtype: str) -> None:
    big = 60000.0 if dtype == "F16" else 1e30
    _check(_file(tmp_path, dtype, [0.0, -0.0, 1.5, -2.25, big, -big, 1e-3]))


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32", "F64"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_inf_are_refused(tmp_path: Path, dtype: str, bad: float) -> None:
    with pytest.raises(AdapterValidationError) as caught:
        _check(_file(tmp_path, dtype, [0.5] * 100 + [bad] + [0.25] * 10))
    assert caught.value.code == "non_finite_weights"
    assert "'w'" in caught.value.detail


def test_values_are_streamed_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensors_module, "CHUNK_BYTES", 64)
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(safetensors_bytes({"a": (7, 13), "b": (13, 7)}))
    _check(path)
    data = bytearray(path.read_bytes())
    data[-2:] = struct.pack("<f", float("nan"))[2:]  # the last element of the last tensor
    path.write_bytes(bytes(data))
    with pytest.raises(AdapterValidationError, match="'b'"):
        _check(path)


@pytest.mark.parametrize("dtype", ["I32", "U8", "F8_E4M3", "BOOL"])
def test_other_dtypes_are_refused(tmp_path: Path, dtype: str) -> None:
    size = {"I32": 4, "U8": 1, "F8_E4M3": 1, "BOOL": 1}[dtype]
    header = json.dumps({"w": {"dtype": dtype, "shape": [2], "data_offsets": [0, 2 * size]}})
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 2 * size)
    with pytest.raises(AdapterValidationError) as caught:
        _check(path)
    assert caught.value.code == "unsupported_dtype"
