"""Fixtures of the trust tests: adapters whose weights differ clearly, built once and cached.

The churn adapters are built (PEFT, ``hi_moe_lora.tinymodel``) beside the session's tiny model,
in the fleet cache, so the session stack's source roots admit them and later sessions reuse them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hi_moe_lora.tinymodel import TinyAdapterSpec, TinyFleet, build_fleet

#: More distinct adapters than the session stack has LoRA slots (``--max-loras 4``); ranks
#: differ too, so slots are refilled with adapters of other shapes.
CHURN_ADAPTERS: dict[str, TinyAdapterSpec] = {
    f"churn-{index}": TinyAdapterSpec(rank=8 if index % 2 else 16, alpha=16, seed=100 + index)
    for index in range(6)
}


@pytest.fixture(scope="session")
def churn_adapters(tiny_fleet: TinyFleet) -> list[Path]:
    """Six adapter directories for the session's tiny model, each with its own weights."""
    root = tiny_fleet.model_dir.parent
    fleet = build_fleet(root, CHURN_ADAPTERS)
    return [fleet.adapters[key] for key in CHURN_ADAPTERS]
