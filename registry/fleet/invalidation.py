"""Make vLLM forget a bare adapter name after its active version changed.

A client that talks to vLLM directly with a bare name (``model="python-lora"``) gets the version
the resolver plugin found at the first request, and vLLM keeps that mapping. After a promotion or
rollback the control plane calls ``POST /v1/unload_lora_adapter`` for the bare name on every
replica, so that the next such request goes to the resolver again. Versioned names
(``name@version``) need nothing: they never change meaning.
"""

from __future__ import annotations

import logging

from registry.fleet.upstreams import UpstreamPool, UpstreamUnavailable, describe_failure

logger = logging.getLogger(__name__)

UNLOAD_PATH = "/v1/unload_lora_adapter"


class BareNameInvalidator:
    """``on_active_changed`` hook of the adapter service."""

    def __init__(self, upstream: UpstreamPool) -> None:
        self._upstream = upstream

    async def __call__(self, name: str) -> None:
        """Unload ``name`` on every replica; never raises (the promotion already committed)."""
        try:
            results = await self._upstream.broadcast("POST", UNLOAD_PATH, {"lora_name": name})
        except Exception:
            logger.exception("could not ask vLLM to forget adapter %r", name)
            return
        for replica, result in results:
            if isinstance(result, Exception):
                logger.warning(
                    "vLLM %s: unloading %r failed: %s", replica.url, name, _describe(result)
                )
            elif result.status_code == 200:
                logger.info("vLLM %s forgot adapter %r", replica.url, name)
            elif result.status_code == 404:
                # never loaded under its bare name on this replica: nothing to forget
                logger.debug("vLLM %s had not loaded %r", replica.url, name)
            else:
                logger.warning(
                    "vLLM %s: unloading %r answered HTTP %d: %s",
                    replica.url,
                    name,
                    result.status_code,
                    result.text[:500],
                )


def _describe(exc: Exception) -> str:
    if isinstance(exc, UpstreamUnavailable):
        return exc.message
    return describe_failure(exc)
