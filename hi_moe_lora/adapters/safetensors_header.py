"""Reading (only) the header of a safetensors file.

Layout: 8-byte little-endian header length N, N bytes of JSON, then the raw tensor data. Each
entry of the JSON maps a tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}``
(offsets relative to the end of the header); ``__metadata__`` is an optional string map. We check
the structure, that the tensors tile the data exactly (no gap, no overlap, no trailing bytes: what
the safetensors library itself demands before vLLM can load the file); tensor bytes are not read
here (:mod:`hi_moe_lora.adapters.tensors` scans them).

Errors name the file and the tensor, never a value read from a file that failed to parse (the
first bytes of a file that is not safetensors at all could be anything, e.g. a secret).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from hi_moe_lora.adapters.errors import AdapterValidationError

# bytes per element; sub-byte and exotic types are accepted but not size-checked (None)
DTYPE_SIZES: dict[str, int | None] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "F4": None,
    "F6_E2M3": None,
    "F6_E3M2": None,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors reference implementation's limit
_LENGTH_BYTES = 8


#: Longest tensor name quoted in an error message.
_MAX_QUOTED = 120


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class SafetensorsLayout:
    """Where the data starts (bytes from the start of the file) and the tensors, in header order."""

    data_start: int
    tensors: list[TensorInfo]


def quoted(name: str) -> str:
    """A tensor or module name as error messages show it (repr, bounded)."""
    if len(name) > _MAX_QUOTED:
        name = name[:_MAX_QUOTED] + "..."
    return repr(name)


def _corrupt(path: Path, why: str) -> AdapterValidationError:
    return AdapterValidationError("corrupt_weights", f"{path.name}: {why}")


def _parse_entry(path: Path, name: str, entry: object, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _corrupt(path, f"tensor {quoted(name)} is not an object")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise _corrupt(path, f"tensor {quoted(name)} has an unknown dtype")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise _corrupt(path, f"tensor {quoted(name)} has an invalid shape")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise _corrupt(path, f"tensor {quoted(name)} has invalid data_offsets")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise _corrupt(path, f"tensor {quoted(name)} lies outside the file's data")
    item_size = DTYPE_SIZES[dtype]
    if item_size is not None and (end - begin) != math.prod(shape) * item_size:
        raise _corrupt(path, f"tensor {quoted(name)}: its byte size does not match {dtype}{shape}")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _check_tiling(path: Path, tensors: list[TensorInfo], data_size: int) -> None:
    """The tensors cover the data exactly once: no overlap, no gap, nothing after the last."""
    position = 0
    for tensor in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if tensor.begin != position:
            raise _corrupt(path, f"tensor {quoted(tensor.name)} overlaps or leaves a gap")
        position = tensor.end
    if position != data_size:
        raise _corrupt(path, "bytes after the last tensor")


def read_safetensors_header(path: Path) -> list[TensorInfo]:
    """Parse and check the header of ``path``; raise ``corrupt_weights`` on any inconsistency."""
    return read_safetensors_layout(path).tensors


def read_safetensors_layout(path: Path) -> SafetensorsLayout:
    """The header of ``path`` and where its data starts; ``corrupt_weights`` if inconsistent."""
    file_size = path.stat().st_size
    with path.open("rb") as handle:
        raw_length = handle.read(_LENGTH_BYTES)
        if len(raw_length) != _LENGTH_BYTES:
            raise _corrupt(path, "file is shorter than the 8-byte header length")
        header_length = int.from_bytes(raw_length, "little")
        if header_length == 0 or header_length > MAX_HEADER_BYTES:
            raise _corrupt(path, "not safetensors: implausible header length")
        if _LENGTH_BYTES + header_length > file_size:
            raise _corrupt(path, "not safetensors: header length exceeds the file size")
        raw_header = handle.read(header_length)
    try:
        header = json.loads(raw_header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _corrupt(path, "not safetensors: header is not valid JSON") from exc
    if not isinstance(header, dict):
        raise _corrupt(path, "not safetensors: header is not a JSON object")
    data_size = file_size - _LENGTH_BYTES - header_length
    tensors = [
        _parse_entry(path, name, entry, data_size)
        for name, entry in header.items()
        if name != "__metadata__"
    ]
    metadata = header.get("__metadata__")
    if metadata is not None and not isinstance(metadata, dict):
        raise _corrupt(path, "__metadata__ is not an object")
    _check_tiling(path, tensors, data_size)
    return SafetensorsLayout(_LENGTH_BYTES + header_length, tensors)
