"""The facts about an adapter that serving depends on, read once at registration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hi_moe_lora.adapters.safetensors_header import TensorInfo

Variant = Literal["lora", "dora", "adalora"]


@dataclass(frozen=True)
class AdapterManifest:
    """What :func:`hi_moe_lora.adapters.inspection.inspect_adapter` learned from a PEFT directory.

    ``target_modules`` is a tuple of module names, or a one-element tuple holding the regular
    expression when the config gives a string (``target_modules_regex``). ``tensors`` is the
    safetensors header (names, dtypes, shapes), kept for the checks against the served model.
    ``tensor_count`` is ``None`` only for manifests built by hand.
    """

    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    variant: Variant
    base_model: str | None
    weight_file: str
    tensor_count: int | None
    sha256: str
    tensors: tuple[TensorInfo, ...] = field(default=(), repr=False, compare=False)
    target_modules_regex: bool = False
