"""The naming rules of the control plane's metrics: the prefix and the bounded label values."""

from __future__ import annotations

from typing import Final, Literal

PREFIX: Final = "hi_moe_lora_"
#: The specialist label of a request served by the base model (an adapter name cannot start
#: with ``_``, so these never collide with one).
SPECIALIST_BASE: Final = "_base"
#: The specialist label of a request that failed before it was routed (bad body, unknown model).
SPECIALIST_NONE: Final = "_none"

RequestOutcome = Literal["success", "client_error", "server_error", "unavailable"]
LoadSource = Literal["warmup", "request"]
WarmupOutcome = Literal["loaded", "failed"]
#: A bare name unloaded on one replica after a promote/rollback (``not_loaded``: nothing to do).
UnloadOutcome = Literal["unloaded", "not_loaded", "failed"]


def outcome_of(status: int) -> RequestOutcome:
    """The outcome label of an HTTP status the front door answered: ``unavailable`` when vLLM
    could not be reached or did not answer in time (502, 503, 504)."""
    if status < 400:
        return "success"
    if status in (502, 503, 504):
        return "unavailable"
    return "client_error" if status < 500 else "server_error"
