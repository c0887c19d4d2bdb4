"""Reading (only) the header of a safetensors file.

Layout: 8-byte little-endian header length N, N bytes of JSON, then the raw tensor data. Each
entry of the JSON maps a tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}``
(offsets relative to the end of the header); ``__metadata__`` is an optional string map. We check
the structure and that every tensor lies inside the file; tensor bytes are never read.
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


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _corrupt(path: Path, why: str) -> AdapterValidationError:
    return AdapterValidationError("corrupt_weights", f"{path.name}: {why}")


def _parse_entry(path: Path, name: str, entry: object, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _corrupt(path, f"tensor {name!r} is not an object")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise _corrupt(path, f"tensor {name!r} has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise _corrupt(path, f"tensor {name!r} has an invalid shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise _corrupt(path, f"tensor {name!r} has invalid data_offsets {offsets!r}")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        raise _corrupt(
            path, f"tensor {name!r} spans bytes {begin}..{end} outside the {data_size}-byte data"
        )
    item_size = DTYPE_SIZES[dtype]
    if item_size is not None and (end - begin) != math.prod(shape) * item_size:
        raise _corrupt(path, f"tensor {name!r}: {end - begin} bytes do not match {dtype}{shape}")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def read_safetensors_header(path: Path) -> list[TensorInfo]:
    """Parse and check the header of ``path``; raise ``corrupt_weights`` on any inconsistency."""
    file_size = path.stat().st_size
    with path.open("rb") as handle:
        raw_length = handle.read(_LENGTH_BYTES)
        if len(raw_length) != _LENGTH_BYTES:
            raise _corrupt(path, "file is shorter than the 8-byte header length")
        header_length = int.from_bytes(raw_length, "little")
        if header_length == 0 or header_length > MAX_HEADER_BYTES:
            raise _corrupt(path, f"implausible header length {header_length}")
        if _LENGTH_BYTES + header_length > file_size:
            raise _corrupt(path, f"header length {header_length} exceeds the file size")
        raw_header = handle.read(header_length)
    try:
        header = json.loads(raw_header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt(path, f"header is not valid JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise _corrupt(path, "header is not a JSON object")
    data_size = file_size - _LENGTH_BYTES - header_length
    tensors = [
        _parse_entry(path, name, entry, data_size)
        for name, entry in header.items()
        if name != "__metadata__"
    ]
    metadata = header.get("__metadata__")
    if metadata is not None and not isinstance(metadata, dict):
        raise _corrupt(path, "__metadata__ is not an object")
    return tensors
