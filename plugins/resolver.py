"""vLLM LoRA resolver backed by the hi-moe-lora registry.

When a request names an adapter vLLM has not loaded (and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is
on), vLLM asks each registered resolver for a :class:`LoRARequest`. Ours asks the control plane
(``GET {registry}/admin/v1/resolve/{name}``, through the shared
:class:`hi_moe_lora.control_api.ControlPlaneClient`, with the resolver token
``HI_MOE_LORA_RESOLVER_TOKEN`` when set), checks that the adapter directory it names
exists on this host and carries the registered checksum, and that it was trained for the base
model vLLM serves. Any doubt declines (``None``): the resolver never raises, since vLLM would
turn an exception into a 500 for the client.

With ``HI_MOE_LORA_ARTIFACT_CACHE_DIR`` set, a version whose registered path is not on this
host (or does not verify) is downloaded from the control plane into a local cache and the
cached, verified path is returned (:mod:`plugins.artifact_fetch`); a path that exists here and
verifies is still used as it is (shared file system).

The lookup is blocking ``urllib`` run through :func:`asyncio.to_thread`: the plugin runs in every
vLLM process and must not pull in the control plane's dependencies. Each resolve is timed into
``hi_moe_lora_resolver_duration_seconds{outcome}`` (:mod:`plugins.metrics`).

:func:`register` also installs :mod:`plugins.load_timing`, which times vLLM's own adapter loads in
the worker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

from vllm.lora.request import LoRARequest
from vllm.lora.resolver import LoRAResolver, LoRAResolverRegistry

from hi_moe_lora.adapters.policy import base_models_match
from hi_moe_lora.cache import ChecksumCache
from hi_moe_lora.control_api import (
    AnswerError,
    ControlPlaneClient,
    ControlPlaneError,
    NotFound,
    ResolvedAdapter,
)
from hi_moe_lora.fetching import ArtifactCache, ChecksumMismatch, DownloadError, FetchError
from plugins import dora, load_timing
from plugins.artifact_fetch import ArtifactFetcher, VllmModels
from plugins.logs import route_to_vllm_log
from plugins.metrics import PluginMetrics, ResolveOutcome, plugin_metrics
from plugins.settings import ENV_REGISTRY_URL, PluginSettings, PluginSettingsError

logger = logging.getLogger(__name__)

RESOLVER_NAME = "hi-moe-lora"


def make_lora_request(lora_name: str, lora_int_id: int, path: str) -> LoRARequest:
    """A :class:`LoRARequest`, whichever keyword this vLLM uses for the local path."""
    fields = getattr(LoRARequest, "__struct_fields__", ())
    if "lora_path" in fields or not fields:
        return LoRARequest(lora_name=lora_name, lora_int_id=lora_int_id, lora_path=path)
    legacy: dict[str, Any] = {"lora_local_path": path}  # vLLM versions without ``lora_path``
    return LoRARequest(lora_name=lora_name, lora_int_id=lora_int_id, **legacy)


class HiMoeLoraResolver(LoRAResolver):
    """Resolves adapter names (``name`` or ``name@version``) through the registry."""

    def __init__(
        self,
        settings: PluginSettings,
        checksums: ChecksumCache | None = None,
        metrics: PluginMetrics | None = None,
    ) -> None:
        if settings.registry_url is None:
            raise PluginSettingsError(ENV_REGISTRY_URL, "", "a registry URL")
        self._client = ControlPlaneClient(
            settings.registry_url,
            timeout_s=settings.resolver_timeout_s,
            token=settings.resolver_token,
        )
        self._checksums = checksums if checksums is not None else ChecksumCache()
        self._metrics = metrics if metrics is not None else plugin_metrics()
        self._fetcher: ArtifactFetcher | None = None
        if settings.artifact_cache_dir is not None:
            cache = ArtifactCache(Path(settings.artifact_cache_dir), settings.artifact_cache_bytes)
            self._fetcher = ArtifactFetcher(
                cache,
                self._client,
                self._metrics,
                token=settings.resolver_token,
                timeout_s=settings.resolver_timeout_s,
            )
        self._models: VllmModels | None = None

    @property
    def fetcher(self) -> ArtifactFetcher | None:
        """The artifact cache's fetcher, when ``HI_MOE_LORA_ARTIFACT_CACHE_DIR`` is set."""
        return self._fetcher

    async def resolve_lora(self, base_model_name: str, lora_name: str) -> LoRARequest | None:
        started = time.perf_counter()
        outcome: ResolveOutcome = "error"
        request: LoRARequest | None = None
        try:
            if self._fetcher is not None and (self._models is None or not self._models.alive()):
                self._models = VllmModels.find(self)  # vLLM's loaded names: the cache's in-use
            outcome, request = await asyncio.to_thread(
                self._resolve_blocking, base_model_name, lora_name, self._models
            )
        except Exception:  # never let an exception reach vLLM: it would answer a 500
            logger.exception("hi-moe-lora resolver failed on %r; declining", lora_name)
        finally:  # also when the request is cancelled (client gone) while the thread works
            self._metrics.observe_resolve(outcome, time.perf_counter() - started)
        return request

    def _resolve_blocking(
        self, base_model_name: str, lora_name: str, models: VllmModels | None = None
    ) -> tuple[ResolveOutcome, LoRARequest | None]:
        try:
            resolved = self._client.resolve(lora_name)
        except NotFound as exc:
            logger.info("LoRA %r is not in the hi-moe-lora registry (%s)", lora_name, exc.detail)
            return "not_found", None
        except (ControlPlaneError, AnswerError) as exc:
            logger.warning("hi-moe-lora registry lookup of %r failed: %s", lora_name, exc)
            return "error", None
        # Full identity, as at registration: the same hub id or the same normalised local path.
        if not base_models_match(resolved.base_model, base_model_name):
            logger.info(
                "LoRA %r was trained for base model %r, vLLM serves %r; declining",
                lora_name,
                resolved.base_model,
                base_model_name,
            )
            return "declined", None
        if resolved.variant == "dora" and not dora.is_installed():
            # Only the CPU build serves DoRA (plugins.dora); on CUDA our fused kernel has no
            # magnitude epilogue yet, and loading it would fail with vLLM's generic 400.
            logger.warning(
                "LoRA %r is a DoRA adapter, served only on the CPU platform so far; declining",
                lora_name,
            )
            return "declined", None
        outcome, path = self._verified_path(lora_name, resolved)
        if path is None and self._fetcher is not None and outcome != "error":
            outcome, path = self._fetched_path(lora_name, resolved, models)
        elif path is not None and self._fetcher is not None:
            self._metrics.count_hit("local_path")
        if path is None:
            return outcome, None
        logger.info("Resolved LoRA %r to %s (%s)", lora_name, path, resolved.served_name)
        # vLLM replaces lora_int_id with its own counter but rejects ids < 1.
        return "resolved", make_lora_request(lora_name, max(resolved.lora_int_id, 1), str(path))

    def _verified_path(
        self, lora_name: str, resolved: ResolvedAdapter
    ) -> tuple[ResolveOutcome, Path | None]:
        path = Path(resolved.local_path).expanduser()
        if not path.is_absolute():
            logger.warning(
                "LoRA %r: registry path %r is not absolute (vLLM would treat it as a hub id); "
                "declining",
                lora_name,
                resolved.local_path,
            )
            return "declined", None
        if not path.is_dir():
            if self._fetcher is not None:
                logger.info("LoRA %r: %s is not on this host; fetching it", lora_name, path)
                return "declined", None
            logger.warning("LoRA %r: %s does not exist on this host; declining", lora_name, path)
            return "declined", None
        try:
            verified = self._checksums.verify(path, resolved.sha256)
        except OSError as exc:
            logger.warning("LoRA %r: cannot read %s (%s); declining", lora_name, path, exc)
            return "declined", None
        if not verified:
            logger.error(
                "LoRA %r: checksum of %s does not match the registry's %s; declining",
                lora_name,
                path,
                resolved.sha256,
            )
            return "checksum_mismatch", None
        return "resolved", path.resolve()

    def _fetched_path(
        self, lora_name: str, resolved: ResolvedAdapter, models: VllmModels | None
    ) -> tuple[ResolveOutcome, Path | None]:
        assert self._fetcher is not None
        try:
            path = self._fetcher.fetch(resolved, models)
        except ChecksumMismatch as exc:
            logger.error(
                "LoRA %r: the files downloaded from the control plane are not the registered "
                "ones (%s); declining",
                lora_name,
                exc,
            )
            return "checksum_mismatch", None
        except (FetchError, DownloadError, OSError) as exc:
            logger.warning("LoRA %r: cannot fetch its files (%s); declining", lora_name, exc)
            return "error", None
        return "resolved", path


_register_lock = threading.Lock()
_disabled_logged = False


def register() -> None:
    """Entry point (``vllm.general_plugins``): register the resolver once per process.

    Cheap and idempotent; does nothing (one INFO line) when ``HI_MOE_LORA_REGISTRY_URL`` is unset,
    and never raises, since vLLM calls it in every process it starts. Whatever the settings, it
    times vLLM's own adapter loads (:func:`plugins.load_timing.install`): adapters reach the
    worker through other resolvers and ``--lora-modules`` too.
    """
    global _disabled_logged
    route_to_vllm_log()
    load_timing.install()
    try:
        settings = PluginSettings.from_env()
    except PluginSettingsError as exc:
        logger.error("hi-moe-lora resolver not registered: %s", exc)
        return
    with _register_lock:
        if not settings.resolver_enabled:
            if not _disabled_logged:
                _disabled_logged = True
                logger.info("hi-moe-lora resolver off: HI_MOE_LORA_REGISTRY_URL is not set")
            return
        if RESOLVER_NAME in LoRAResolverRegistry.get_supported_resolvers():
            return
        LoRAResolverRegistry.register_resolver(RESOLVER_NAME, HiMoeLoraResolver(settings))
    logger.info("hi-moe-lora resolver registered (registry %s)", settings.registry_url)
