"""The Llama-3-8B projection shapes the kernel benchmarks share."""

from __future__ import annotations

from benchmarks.kernels.llama_shapes import PROJECTIONS, packed


def test_the_packed_projections_have_llama_3_8bs_widths() -> None:
    assert {name: packed(name) for name in PROJECTIONS} == {
        "qkv": (4096, 6144),  # (32 query heads and 8 key and 8 value heads of 128)
        "o": (4096, 4096),
        "gate_up": (4096, 28672),
        "down": (14336, 4096),
    }


def test_each_slice_has_its_own_width() -> None:
    assert PROJECTIONS["qkv"][1] == (4096, 1024, 1024)
    assert PROJECTIONS["gate_up"][1] == (14336, 14336)
