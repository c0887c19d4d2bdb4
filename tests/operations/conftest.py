"""A dedicated embedded stack (control plane + real vLLM CPU) for the operations tests.

Its own, because these tests stop and restart vLLM and probe every served version each second;
the session's shared stack must not see either. The health interval is 1 s; the stack is
shared by this package's test files and stopped after them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.tinymodel import TinyFleet
from tests.support.stacks import stop_control_plane_first

HEALTH_INTERVAL_S = 1.0
#: vLLM's --max-loras and --max-cpu-loras on the stack (warm-up's plan holds the second).
MAX_LORAS, MAX_CPU_LORAS = 2, 3


@pytest.fixture(scope="package")
def ops_stack(
    tiny_fleet: TinyFleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedStack]:
    stack = EmbeddedStack(
        workdir=tmp_path_factory.mktemp("ops-stack"),
        model_dir=tiny_fleet.model_dir,
        max_loras=MAX_LORAS,
        max_cpu_loras=MAX_CPU_LORAS,
        health_interval_s=HEALTH_INTERVAL_S,
    )
    stack.start()
    try:
        yield stack
    finally:
        stop_control_plane_first(stack)  # tests/support/stacks.py: why


def demo_adapter(fleet: TinyFleet, kind: str = "python-lora") -> Path:
    """The first demo adapter of ``kind`` (python-lora, math-lora)."""
    return next(path for key, path in sorted(fleet.adapters.items()) if key.startswith(kind))


def zeroed_copy(source: Path, target: Path) -> Path:
    """A copy of ``source`` whose LoRA B matrices are zero: a valid adapter with no effect."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target)
    weights = target / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    zeroed = {
        name: tensor.zero_() if "lora_B" in name else tensor for name, tensor in tensors.items()
    }
    save_file(zeroed, str(weights), metadata={"format": "pt"})
    return target
