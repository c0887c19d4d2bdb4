"""Embedded stacks for tests that do not exercise the dispatcher's tier 3.

A control plane with tier 3 on loads the embedding model and encodes the catalogue's exemplars
when it starts: 10-20 s on both cores of a 2-core machine, while vLLM (three processes that each
import it) starts beside it. Stacks whose tests never send ``model="auto"`` nor ask the
dispatcher anything start faster without it, and test nothing less. The session's stack
(tests/conftest.py) and the operations stack keep it on: their tests dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass

from hi_moe_lora.app.embedded import EmbeddedStack


@dataclass
class StackWithoutTier3(EmbeddedStack):
    """:class:`EmbeddedStack` whose control plane runs with ``dispatch_embeddings`` off."""

    def control_plane_env(self) -> dict[str, str]:
        return {**super().control_plane_env(), "HI_MOE_LORA_DISPATCH_EMBEDDINGS": "false"}
