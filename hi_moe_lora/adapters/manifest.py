"""The facts about an adapter that serving depends on, read once at registration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Variant = Literal["lora", "dora"]


@dataclass(frozen=True)
class AdapterManifest:
    """What :func:`hi_moe_lora.adapters.inspection.inspect_adapter` learned from a PEFT directory.

    ``target_modules`` is a tuple of module names, or a one-element tuple holding the regular
    expression when the config gives a string. ``tensor_count`` is ``None`` for ``.bin`` weights,
    whose pickle we never open.
    """

    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    variant: Variant
    base_model: str | None
    weight_file: str
    tensor_count: int | None
    sha256: str
