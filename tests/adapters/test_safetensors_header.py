from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.safetensors_header import read_safetensors_header
from tests.support.adapter_files import safetensors_bytes


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "adapter_model.safetensors"
    path.write_bytes(data)
    return path


def _raw(header: dict[str, object], data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def test_reads_tensors_without_loading_them(tmp_path: Path) -> None:
    path = _write(tmp_path, safetensors_bytes({"a.lora_A.weight": (4, 16), "b": (16, 4)}))
    tensors = read_safetensors_header(path)
    assert [(t.name, t.dtype, t.shape) for t in tensors] == [
        ("a.lora_A.weight", "F32", (4, 16)),
        ("b", "F32", (16, 4)),
    ]
    assert tensors[1].begin == tensors[0].end == 4 * 16 * 4


def test_agrees_with_the_safetensors_library(tmp_path: Path) -> None:
    numpy = pytest.importorskip("numpy")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "adapter_model.safetensors"
    safetensors_numpy.save_file(
        {"x": numpy.zeros((3, 5), dtype=numpy.float16), "y": numpy.ones(7, dtype=numpy.int64)},
        str(path),
    )
    shapes = {t.name: (t.dtype, t.shape) for t in read_safetensors_header(path)}
    assert shapes == {"x": ("F16", (3, 5)), "y": ("I64", (7,))}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "shorter than"),
        (b"\x01\x02\x03", "shorter than"),
        (struct.pack("<Q", 0), "implausible header length"),
        (struct.pack("<Q", 1 << 40) + b"{}", "implausible header length"),
        (struct.pack("<Q", 64) + b"{}", "exceeds the file size"),
        (struct.pack("<Q", 8) + b"\xff\xfe garbage", "not valid JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    ],
)
def test_garbage_and_truncated_headers_are_corrupt(
    tmp_path: Path, data: bytes, message: str
) -> None:
    with pytest.raises(AdapterValidationError) as caught:
        read_safetensors_header(_write(tmp_path, data))
    assert caught.value.code == "corrupt_weights"
    assert message in caught.value.detail


def test_truncated_data_is_corrupt(tmp_path: Path) -> None:
    whole = safetensors_bytes({"w": (8, 8)})
    with pytest.raises(AdapterValidationError, match="outside"):
        read_safetensors_header(_write(tmp_path, whole[:-10]))


@pytest.mark.parametrize(
    "entry",
    [
        {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]},
        {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]},
        {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]},
        {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]},
        {"dtype": "F32", "shape": [1], "data_offsets": [0]},
        "not-an-object",
    ],
)
def test_inconsistent_entries_are_corrupt(tmp_path: Path, entry: object) -> None:
    with pytest.raises(AdapterValidationError) as caught:
        read_safetensors_header(_write(tmp_path, _raw({"t": entry}, b"\0" * 4)))
    assert caught.value.code == "corrupt_weights"
