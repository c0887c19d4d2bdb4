"""The Llama-3-8B projections the kernel benchmarks time: one home for their shapes.

Each of a layer's LoRA-wrapped linears, by the name the benchmarks give it, as its input width
``K`` and its output slices (vLLM packs q, k and v into one weight, and gate and up into
another; each slice has its own LoRA B).
"""

from __future__ import annotations

HIDDEN, KV_WIDTH, INTERMEDIATE = 4096, 1024, 14336

#: name -> (input width K, output slices)
PROJECTIONS: dict[str, tuple[int, tuple[int, ...]]] = {
    "qkv": (HIDDEN, (HIDDEN, KV_WIDTH, KV_WIDTH)),
    "o": (HIDDEN, (HIDDEN,)),
    "gate_up": (HIDDEN, (INTERMEDIATE, INTERMEDIATE)),
    "down": (INTERMEDIATE, (HIDDEN,)),
}


def packed(name: str) -> tuple[int, int]:
    """(input width, output width) of a projection, its slices packed into one matrix."""
    k, slices = PROJECTIONS[name]
    return k, sum(slices)
