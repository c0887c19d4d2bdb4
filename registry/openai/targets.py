"""Which model a request names: the base model, a specialist, or a pinned ``name@version``.

The front door always forwards a versioned adapter name to vLLM (vLLM caches a resolved name
forever, so a bare alias would keep serving the old version after a promotion). Base-model names
are the configured ``base_model`` and whatever vLLM serves as a base model (``--served-model-name``
or the model path), learnt from ``GET /v1/models`` and refreshed at most every
:data:`BASE_NAMES_TTL_S` seconds when an unknown name shows up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from registry.errors import NotFoundError
from registry.fleet.model_cards import base_model_ids, served_base_name
from registry.fleet.upstreams import UpstreamPool, UpstreamUnavailable
from registry.openai.errors import ModelNotFound
from registry.openai.versions import ServedVersion, VersionTable

logger = logging.getLogger(__name__)

BASE_NAMES_TTL_S = 30.0


@dataclass(frozen=True)
class Target:
    """Where one request goes: ``served_name`` is the ``model`` vLLM receives."""

    requested: str
    served_name: str
    adapter: str | None = None
    version: str | None = None

    @property
    def is_adapter(self) -> bool:
        return self.adapter is not None

    def headers(self) -> dict[str, str]:
        headers = {"X-HiMoE-Served-Model": self.served_name}
        if self.version is not None:
            headers["X-HiMoE-Adapter-Version"] = self.version
        return headers


class ModelRouter:
    """Turns a request's ``model`` into a :class:`Target`."""

    def __init__(
        self, versions: VersionTable, upstream: UpstreamPool, base_model: str | None = None
    ) -> None:
        self.versions = versions
        self._upstream = upstream
        self._configured_base = base_model
        self._upstream_bases: frozenset[str] = frozenset()
        self._bases_fetched_at = float("-inf")
        self._bases_lock = asyncio.Lock()

    @property
    def base_names(self) -> frozenset[str]:
        configured = {self._configured_base} if self._configured_base else set()
        return self._upstream_bases | configured

    def upstream_base_name(self) -> str | None:
        """The name vLLM serves its base model under, if known."""
        return served_base_name(self._upstream_bases, self._configured_base)

    async def route(self, model: str) -> Target:
        """Raises :class:`ModelNotFound` for a name that is neither base model nor adapter."""
        if model in self._upstream_bases:
            return Target(model, model)
        if model == self._configured_base:
            # vLLM may serve it under another name (a path, --served-model-name): learn it.
            await self.refresh_base_names()
            return self._base_target(model)
        try:
            resolved: ServedVersion = await self.versions.choose(model)
        except NotFoundError as exc:
            if "@" not in model:
                await self.refresh_base_names()
                if model in self.base_names:
                    return self._base_target(model)
            raise ModelNotFound(model, exc.detail) from None
        return Target(model, resolved.served_name, resolved.name, resolved.version)

    async def base_target(self, requested: str) -> Target:
        """The base model, for a request that named ``requested`` (``auto`` that fell back)."""
        if not self._upstream_bases:
            await self.refresh_base_names()
        served = self.upstream_base_name() or self._configured_base
        if served is None:
            raise ModelNotFound(requested, "no base model is known: vLLM did not list one")
        return Target(requested, served)

    def _base_target(self, model: str) -> Target:
        # Forward the name vLLM knows: the configured base_model may be a hub id vLLM serves
        # under a path (or a --served-model-name).
        served = model if model in self._upstream_bases else self.upstream_base_name() or model
        return Target(model, served)

    async def refresh_base_names(self, *, force: bool = False) -> frozenset[str]:
        """Ask vLLM which base models it serves (rate-limited unless ``force``)."""
        async with self._bases_lock:
            if not force and time.monotonic() - self._bases_fetched_at < BASE_NAMES_TTL_S:
                return self._upstream_bases
            self._bases_fetched_at = time.monotonic()
            try:
                response = await self._upstream.send("GET", "/v1/models")
                await response.aread()
            except UpstreamUnavailable as exc:
                logger.warning("cannot list vLLM's models: %s", exc.message)
                return self._upstream_bases
            if response.status_code != 200:
                logger.warning("vLLM's /v1/models answered HTTP %d", response.status_code)
                return self._upstream_bases
            self._upstream_bases = frozenset(base_model_ids(response.json()))
            return self._upstream_bases
