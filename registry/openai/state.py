"""The front door's per-app objects and their life cycle.

:func:`install` creates the upstream pool at once (no I/O) and binds the rest to the adapter
service as soon as there is one (at install time if ``app.state.adapters`` is set, else when the
app's lifespan has started it, else at the first request). Shutdown drains pending outcome writes
and closes the HTTP client.
"""

from __future__ import annotations

import logging
import threading

from starlette.applications import Starlette

from registry.openai.invalidation import BareNameInvalidator
from registry.openai.outcomes import OutcomeRecorder
from registry.openai.proxy import FrontDoor
from registry.openai.routing import ModelRouter
from registry.openai.upstream import UpstreamPool
from registry.openai.versions import VersionTable
from registry.services.adapters import AdapterService

logger = logging.getLogger(__name__)

STATE_ATTRIBUTE = "openai_front_door"


class FrontDoorState:
    """Holds the upstream pool and, once bound, the :class:`FrontDoor`."""

    def __init__(self, upstream: UpstreamPool, base_model: str | None) -> None:
        self.upstream = upstream
        self.base_model = base_model
        self._door: FrontDoor | None = None
        self._lock = threading.Lock()

    @property
    def door(self) -> FrontDoor | None:
        return self._door

    def bind(self, adapters: AdapterService) -> FrontDoor:
        """Bind to the adapter service (once; later calls return the same door)."""
        with self._lock:
            if self._door is None or self._door.adapters is not adapters:
                versions = VersionTable(adapters)
                router = ModelRouter(versions, self.upstream, self.base_model)
                self._door = FrontDoor(adapters, router, self.upstream, OutcomeRecorder(adapters))
                adapters.add_active_changed_listener(
                    ActiveVersionChanged(versions, BareNameInvalidator(self.upstream))
                )
            return self._door

    async def aclose(self) -> None:
        if self._door is not None:
            await self._door.outcomes.drain()
        await self.upstream.aclose()


class ActiveVersionChanged:
    """``on_active_changed``: route the adapter afresh, then make vLLM forget its bare name."""

    def __init__(self, versions: VersionTable, invalidator: BareNameInvalidator) -> None:
        self._versions = versions
        self._invalidator = invalidator

    async def __call__(self, name: str) -> None:
        self._versions.forget(name)
        await self._invalidator(name)


def state_of(app: Starlette) -> FrontDoorState:
    state = getattr(app.state, STATE_ATTRIBUTE, None)
    if not isinstance(state, FrontDoorState):
        raise RuntimeError("the OpenAI front door is not installed on this app")
    return state


def front_door_of(app: Starlette) -> FrontDoor:
    state = state_of(app)
    door = state.door
    if door is None:
        door = state.bind(app.state.adapters)
    return door
