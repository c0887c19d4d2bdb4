"""Reading the values of a safetensors file, streamed: every weight must be a finite float.

A LoRA weight that is NaN or infinite loads without complaint and turns every token the adapter
touches into garbage, so registration reads all tensor bytes once, in bounded chunks (a few MiB in
memory whatever the file size). Floats are checked by their exponent bits, which are all ones
exactly for NaN and ±Inf: the most significant byte of each little-endian element is picked out
with a strided slice and classified with ``bytes.translate`` (both run in C), and only the rare
candidates are looked at one by one. Stdlib only.

Weight dtypes accepted: ``F16``, ``BF16``, ``F32``, ``F64`` (what PEFT writes and vLLM casts to
the model's dtype); anything else (integers, 8-bit and smaller floats) is ``unsupported_dtype``.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.safetensors_header import SafetensorsLayout, TensorInfo, quoted

# dtype -> (element size, exponent bits in the most significant byte, in the byte below it)
_EXPONENT_MASKS: dict[str, tuple[int, int, int]] = {
    "F16": (2, 0x7C, 0x00),
    "BF16": (2, 0x7F, 0x80),
    "F32": (4, 0x7F, 0x80),
    "F64": (8, 0x7F, 0xF0),
}
WEIGHT_DTYPES = frozenset(_EXPONENT_MASKS)
#: Bytes read at a time (a multiple of every element size).
CHUNK_BYTES = 4 << 20


def _marks(high_mask: int) -> bytes:
    """A ``bytes.translate`` table: 1 where a byte has every bit of ``high_mask`` set, else 0."""
    return bytes(1 if byte & high_mask == high_mask else 0 for byte in range(256))


_TABLES = {dtype: _marks(high) for dtype, (_, high, _) in _EXPONENT_MASKS.items()}


def _first_non_finite(chunk: bytes, dtype: str) -> int | None:
    """Index of the first NaN/Inf element of a chunk of little-endian ``dtype`` values."""
    size, _, low_mask = _EXPONENT_MASKS[dtype]
    marks = chunk[size - 1 :: size].translate(_TABLES[dtype])
    index = marks.find(1)
    while index != -1:
        if low_mask == 0 or chunk[index * size + size - 2] & low_mask == low_mask:
            return index
        index = marks.find(1, index + 1)
    return None


def _check_tensor(handle: BinaryIO, path: Path, data_start: int, tensor: TensorInfo) -> None:
    size = _EXPONENT_MASKS[tensor.dtype][0]
    handle.seek(data_start + tensor.begin)
    remaining = tensor.end - tensor.begin
    carry = b""  # a partial element left by a short read
    while remaining > 0:
        chunk = handle.read(min(CHUNK_BYTES, remaining))
        if not chunk:
            raise AdapterValidationError(
                "corrupt_weights", f"{path.name}: file ended inside tensor {quoted(tensor.name)}"
            )
        remaining -= len(chunk)
        data = carry + chunk
        whole = len(data) - len(data) % size
        carry = data[whole:]
        if _first_non_finite(data[:whole], tensor.dtype) is not None:
            raise AdapterValidationError(
                "non_finite_weights",
                f"{path.name}: tensor {quoted(tensor.name)} holds NaN or infinite values",
            )


def check_tensor_values(path: Path, layout: SafetensorsLayout) -> None:
    """Raise ``unsupported_dtype`` or ``non_finite_weights`` unless every weight is finite."""
    for tensor in layout.tensors:
        if tensor.dtype not in WEIGHT_DTYPES:
            raise AdapterValidationError(
                "unsupported_dtype",
                f"{path.name}: tensor {quoted(tensor.name)} is {tensor.dtype}; LoRA weights must "
                f"be one of {', '.join(sorted(WEIGHT_DTYPES))}",
            )
    with path.open("rb") as handle:
        for tensor in sorted(layout.tensors, key=lambda t: t.begin):
            _check_tensor(handle, path, layout.data_start, tensor)
