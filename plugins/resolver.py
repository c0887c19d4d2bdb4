"""vLLM LoRA resolver backed by the hi-moe-lora registry.

When a request names an adapter vLLM has not loaded (and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is
on), vLLM asks each registered resolver for a :class:`LoRARequest`. Ours asks the control plane
(``GET {registry}/admin/v1/resolve/{name}``), checks that the adapter directory it names exists on
this host and carries the registered checksum, and that it was trained for the base model vLLM
serves. Any doubt declines (``None``): the resolver never raises, since vLLM would turn an
exception into a 500 for the client.

Only the standard library is used (``urllib`` through :func:`asyncio.to_thread`): the plugin runs
in every vLLM process and must not pull in the control plane's dependencies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm.lora.request import LoRARequest
from vllm.lora.resolver import LoRAResolver, LoRAResolverRegistry

from hi_moe_lora.adapters.policy import base_models_match
from hi_moe_lora.cache import ChecksumCache
from plugins.logs import route_to_vllm_log
from plugins.settings import PluginSettings, PluginSettingsError

logger = logging.getLogger(__name__)

RESOLVER_NAME = "hi-moe-lora"
RESOLVE_PATH = "/admin/v1/resolve/"
_MAX_RESPONSE_BYTES = 1 << 20


class RegistryLookupError(Exception):
    """The registry could not be asked, or answered something unusable (not a 404)."""


class AdapterNotRegistered(Exception):
    """The registry answered 404: it knows no adapter by that name."""


@dataclass(frozen=True)
class ResolvedAdapter:
    """The registry's answer, reduced to what the resolver checks and returns."""

    served_name: str
    lora_int_id: int
    local_path: str
    sha256: str
    base_model: str | None
    variant: str

    @classmethod
    def from_json(cls, payload: Any) -> ResolvedAdapter:
        if not isinstance(payload, Mapping):
            raise RegistryLookupError("resolve answer is not a JSON object")
        try:
            lora_int_id = int(payload["lora_int_id"])
            local_path = str(payload["local_path"])
            sha256 = str(payload["sha256"])
        except (KeyError, TypeError, ValueError) as exc:
            raise RegistryLookupError(f"resolve answer lacks a usable field: {exc!r}") from None
        base_model = payload.get("base_model")
        return cls(
            served_name=str(payload.get("served_name") or ""),
            lora_int_id=lora_int_id,
            local_path=local_path,
            sha256=sha256,
            base_model=str(base_model) if base_model else None,
            variant=str(payload.get("variant") or "lora").lower(),
        )


class RegistryClient:
    """Blocking client of the registry's resolve endpoint (run it off the event loop)."""

    def __init__(self, base_url: str, timeout_s: float, api_key: str | None = None) -> None:
        self._base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._api_key = api_key

    def resolve_url(self, lora_name: str) -> str:
        return self._base_url + RESOLVE_PATH + urllib.parse.quote(lora_name, safe="@")

    def resolve(self, lora_name: str) -> ResolvedAdapter:
        """Ask the registry which adapter ``lora_name`` stands for.

        Raises :class:`AdapterNotRegistered` on 404, :class:`RegistryLookupError` otherwise.
        """
        request = urllib.request.Request(self.resolve_url(lora_name), method="GET")
        request.add_header("Accept", "application/json")
        if self._api_key:
            request.add_header("Authorization", f"Bearer {self._api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                body = response.read(_MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise AdapterNotRegistered(_error_detail(exc)) from None
            raise RegistryLookupError(f"HTTP {exc.code}: {_error_detail(exc)}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            # URLError wraps refused connections; TimeoutError/OSError the socket-level ones.
            raise RegistryLookupError(f"{type(exc).__name__}: {exc}") from None
        if len(body) > _MAX_RESPONSE_BYTES:
            raise RegistryLookupError("resolve answer too large")
        try:
            payload = json.loads(body)
        except ValueError:
            raise RegistryLookupError("resolve answer is not JSON") from None
        return ResolvedAdapter.from_json(payload)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(2048).decode("utf-8", "replace")
    except OSError:
        text = ""
    finally:
        exc.close()
    try:
        payload = json.loads(text)
    except ValueError:
        return text.strip() or str(exc.reason)
    if isinstance(payload, Mapping):
        return str(payload.get("detail") or payload.get("title") or text)
    return text


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
        client: RegistryClient | None = None,
        checksums: ChecksumCache | None = None,
    ) -> None:
        if settings.registry_url is None:
            raise PluginSettingsError("HI_MOE_LORA_REGISTRY_URL", "", "a registry URL")
        self._settings = settings
        self._client = (
            client
            if client is not None
            else RegistryClient(settings.registry_url, settings.resolver_timeout_s)
        )
        self._checksums = checksums if checksums is not None else ChecksumCache()

    async def resolve_lora(self, base_model_name: str, lora_name: str) -> LoRARequest | None:
        try:
            return await asyncio.to_thread(self._resolve_blocking, base_model_name, lora_name)
        except Exception:  # never let an exception reach vLLM: it would answer a 500
            logger.exception("hi-moe-lora resolver failed on %r; declining", lora_name)
            return None

    def _resolve_blocking(self, base_model_name: str, lora_name: str) -> LoRARequest | None:
        try:
            resolved = self._client.resolve(lora_name)
        except AdapterNotRegistered as exc:
            logger.info("LoRA %r is not in the hi-moe-lora registry (%s)", lora_name, exc)
            return None
        except RegistryLookupError as exc:
            logger.warning("hi-moe-lora registry lookup of %r failed: %s", lora_name, exc)
            return None
        # Loose, as at registration: equal ids, or equal last path component
        # (``meta-llama/Llama-3-8B`` matches ``/models/Llama-3-8B``).
        if resolved.base_model and not base_models_match(resolved.base_model, base_model_name):
            logger.info(
                "LoRA %r was trained for base model %r, vLLM serves %r; declining",
                lora_name,
                resolved.base_model,
                base_model_name,
            )
            return None
        if resolved.variant == "dora":
            # vLLM rejects DoRA, and our kernels do not have the magnitude epilogue yet: loading
            # it would only fail later with vLLM's generic 400.
            logger.warning(
                "LoRA %r is a DoRA adapter, which no serving kernel supports yet; declining",
                lora_name,
            )
            return None
        path = self._verified_path(lora_name, resolved)
        if path is None:
            return None
        logger.info(
            "Resolved LoRA %r to %s (%s)", lora_name, path, resolved.served_name or lora_name
        )
        # vLLM replaces lora_int_id with its own counter but rejects ids < 1.
        return make_lora_request(lora_name, max(resolved.lora_int_id, 1), str(path))

    def _verified_path(self, lora_name: str, resolved: ResolvedAdapter) -> Path | None:
        path = Path(resolved.local_path).expanduser()
        if not path.is_absolute():
            logger.warning(
                "LoRA %r: registry path %r is not absolute (vLLM would treat it as a hub id); "
                "declining",
                lora_name,
                resolved.local_path,
            )
            return None
        if not path.is_dir():
            logger.warning("LoRA %r: %s does not exist on this host; declining", lora_name, path)
            return None
        try:
            verified = self._checksums.verify(path, resolved.sha256)
        except OSError as exc:
            logger.warning("LoRA %r: cannot read %s (%s); declining", lora_name, path, exc)
            return None
        if not verified:
            logger.error(
                "LoRA %r: checksum of %s does not match the registry's %s; declining",
                lora_name,
                path,
                resolved.sha256,
            )
            return None
        return path.resolve()


_register_lock = threading.Lock()
_disabled_logged = False


def register() -> None:
    """Entry point (``vllm.general_plugins``): register the resolver once per process.

    Cheap and idempotent; does nothing (one INFO line) when ``HI_MOE_LORA_REGISTRY_URL`` is unset,
    and never raises, since vLLM calls it in every process it starts.
    """
    global _disabled_logged
    route_to_vllm_log()
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
