"""Embedded stacks for tests that do not exercise the dispatcher's tier 3, and a quick stop for
stacks whose health monitor probes often.

A control plane with tier 3 on loads the embedding model and encodes the catalogue's exemplars
when it starts: 10-20 s on both cores of a 2-core machine, while vLLM (three processes that each
import it) starts beside it. Stacks whose tests never send ``model="auto"`` nor ask the
dispatcher anything start faster without it, and test nothing less. The session's stack
(tests/conftest.py) and the operations stack keep it on: their tests dispatch.

:meth:`EmbeddedStack.stop` stops vLLM before the control plane. vLLM's HTTP server then waits for
its open requests, which its stopped engine never answers: a health probe the control plane has
in flight holds the stop until the probe's timeout (10 s, once per vLLM process). The fixtures
whose stacks probe every second end them with :func:`stop_control_plane_first`: the probe's
connection closes with the control plane, and vLLM stops at once. The order of a stop is
:mod:`tests.app.test_embedded`'s subject, not theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from hi_moe_lora.app.embedded import EmbeddedStack


@dataclass
class StackWithoutTier3(EmbeddedStack):
    """:class:`EmbeddedStack` whose control plane runs with ``dispatch_embeddings`` off."""

    def control_plane_env(self) -> dict[str, str]:
        return {**super().control_plane_env(), "HI_MOE_LORA_DISPATCH_EMBEDDINGS": "false"}


def stop_control_plane_first(stack: EmbeddedStack) -> None:
    """Stop ``stack``'s control plane, then the rest of it (:meth:`EmbeddedStack.stop`)."""
    stack.stop_control_plane()
    stack.stop()
