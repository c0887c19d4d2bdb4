"""The resolver's artifact cache: adapter versions fetched from the control plane (vLLM API server).

With ``HI_MOE_LORA_ARTIFACT_CACHE_DIR`` set, a version whose registered path does not exist on
this host (or does not verify) is downloaded from ``GET /admin/v1/artifacts/{name}/{version}/
{file}`` into :class:`hi_moe_lora.fetching.ArtifactCache` (``<dir>/<sha256>/``, verified before
vLLM sees it, budget ``HI_MOE_LORA_ARTIFACT_CACHE_BYTES``) and the cached path is returned.

"In use" (never evicted): the versions whose directory a name loaded in vLLM points at, read
from vLLM's ``OpenAIServingModels.lora_requests`` (name -> ``LoRARequest``). The resolver is
called by that object's ``resolve_lora``; :meth:`VllmModels.find` finds it by walking up from
our ``resolve_lora`` to the first caller whose ``self`` holds ``lora_requests`` and lists this
resolver among its ``lora_resolvers`` (duck-typed, so it works on vLLM 0.26 and 0.32 alike), and
keeps a weak reference. A version returned in the last :data:`GRACE_S` seconds is in use too
(vLLM loads it after we answer). When vLLM's object cannot be found, everything this process
resolved counts as in use (the cache then only evicts other processes' or earlier runs' entries,
and warns when it cannot keep to the budget).

When only in-use versions remain over budget, the least recently used one is released: vLLM's
``unload_lora_adapter`` is run on its event loop for every name bound to it, so vLLM never loads
again from a deleted path (the next request for such a name resolves it afresh), then it is
deleted. Counted in :mod:`plugins.metrics` (downloads, bytes, hits, evictions).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hi_moe_lora.adapters.checksum import CONFIG_FILE
from hi_moe_lora.control_api import ControlPlaneClient, ResolvedAdapter, paths
from hi_moe_lora.fetching import (
    ArtifactCache,
    ChecksumMismatch,
    DownloadError,
    EntryTooLarge,
    FetchError,
    RemoteFile,
    download_file,
)
from plugins.metrics import PluginMetrics

logger = logging.getLogger(__name__)

#: A version returned this recently is in use even if vLLM has not bound a name to it yet.
GRACE_S = 120.0
#: How long releasing one version may wait for vLLM's unload.
UNLOAD_TIMEOUT_S = 30.0
#: Files fetched when the resolve answer does not list them (an older control plane).
DEFAULT_FILES = (CONFIG_FILE, "adapter_model.safetensors")
_FRAMES_UP = 8


def request_path(request: Any) -> str | None:
    """The local path of a vLLM ``LoRARequest``, whichever attribute this vLLM uses."""
    for attribute in ("lora_path", "lora_local_path", "path"):
        value = getattr(request, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


class VllmModels:
    """A weak view of vLLM's ``OpenAIServingModels`` and the event loop it runs on."""

    def __init__(self, models: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._models = weakref.ref(models)
        self._loop = loop

    @classmethod
    def find(cls, resolver: object) -> VllmModels | None:
        """vLLM's object that called ``resolver``, from the current call stack (call it from
        the resolver's ``resolve_lora``); None when no caller looks like it."""
        try:
            frame = sys._getframe(1)
            loop = asyncio.get_running_loop()
        except (ValueError, RuntimeError):
            return None
        for _ in range(_FRAMES_UP):
            frame = frame.f_back  # type: ignore[assignment]
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            loaded = getattr(candidate, "lora_requests", None)
            resolvers = getattr(candidate, "lora_resolvers", None)
            if (
                isinstance(loaded, dict)
                and isinstance(resolvers, list)
                and any(r is resolver for r in resolvers)
            ):
                try:
                    return cls(candidate, loop)
                except TypeError:  # cannot be weakly referenced
                    return None
        return None

    def alive(self) -> bool:
        return self._models() is not None and not self._loop.is_closed()

    def bound_paths(self) -> dict[str, str]:
        """Name -> path of every adapter vLLM has loaded (a snapshot; any thread)."""
        models = self._models()
        if models is None:
            return {}
        for _ in range(3):
            try:
                items = list(models.lora_requests.items())
            except RuntimeError:  # changed size while copied: try again
                continue
            return {name: path for name, req in items if (path := request_path(req)) is not None}
        return {}

    def forget(self, names: list[str]) -> bool:
        """Make vLLM unload ``names`` (from a worker thread, never the loop's); True if done."""
        models = self._models()
        if models is None:
            return True
        future = asyncio.run_coroutine_threadsafe(_unload(models, names), self._loop)
        try:
            return future.result(timeout=UNLOAD_TIMEOUT_S)
        except Exception as exc:
            future.cancel()
            logger.warning("vLLM did not unload %s: %s", ", ".join(names), exc)
            return False


async def _unload(models: Any, names: list[str]) -> bool:
    request_type = _unload_request_type()
    done = True
    for name in names:
        if request_type is not None and hasattr(models, "unload_lora_adapter"):
            answer = await models.unload_lora_adapter(request_type(lora_name=name))
            if not isinstance(answer, str) and name in models.lora_requests:
                logger.warning("vLLM refused to unload %r: %s", name, answer)
                done = False
                continue
        else:  # no public unload in this vLLM: forget the name the way it does
            models.lora_requests.pop(name, None)
        logger.info("made vLLM forget LoRA %r: its cached files are being evicted", name)
    return done


def _unload_request_type() -> Any:
    for module in (
        "vllm.entrypoints.serve.lora.protocol",  # 0.32
        "vllm.entrypoints.openai.protocol",  # older releases
    ):
        with contextlib.suppress(ImportError):
            found = getattr(__import__(module, fromlist=["_"]), "UnloadLoRAAdapterRequest", None)
            if found is not None:
                return found
    return None


class ArtifactFetcher:
    """Fetches resolved versions into the cache (blocking: run it in a worker thread)."""

    def __init__(
        self,
        cache: ArtifactCache,
        client: ControlPlaneClient,
        metrics: PluginMetrics,
        *,
        token: str | None,
        timeout_s: float,
        grace_s: float = GRACE_S,
    ) -> None:
        self.cache = cache
        self._client = client
        self._metrics = metrics
        self._token = token
        self._timeout_s = timeout_s
        self._grace_s = grace_s
        self._lock = threading.Lock()
        #: sha256 -> when this process last returned it (monotonic seconds)
        self._returned: dict[str, float] = {}

    def fetch(self, resolved: ResolvedAdapter, models: VllmModels | None) -> Path:
        """The cached, verified directory of ``resolved``; raises :class:`FetchError` (or
        :class:`DownloadError`) when it cannot be had. Counts the outcome."""
        view = models if models is not None and models.alive() else None
        files = (
            [RemoteFile(f.name, f.size) for f in resolved.files]
            if resolved.files
            else [RemoteFile(name) for name in DEFAULT_FILES]
        )

        def download(remote: RemoteFile, destination: Path) -> int:
            url = self._client.url(
                paths.ARTIFACT, name=resolved.name, version=resolved.version, file=remote.name
            )
            done = download_file(
                url,
                destination,
                token=self._token,
                timeout_s=self._timeout_s,
                expected_size=remote.size,
            )
            return done.transferred

        try:
            result = self.cache.fetch(
                resolved.sha256,
                files,
                download,
                in_use=self._in_use(view),
                evict_in_use=None if view is None else self._releaser(view),
            )
        except ChecksumMismatch:
            self._metrics.count_download("checksum_mismatch", 0)
            raise
        except EntryTooLarge:
            self._metrics.count_download("too_large", 0)
            raise
        except (FetchError, DownloadError, OSError):
            self._metrics.count_download("error", 0)
            raise
        with self._lock:
            self._returned[resolved.sha256] = time.monotonic()
        if result.hit:
            self._metrics.count_hit("cache")
        else:
            self._metrics.count_download("downloaded", result.downloaded_bytes)
        self._metrics.count_evictions("in_use", len(result.evicted_in_use))
        self._metrics.count_evictions("unused", len(result.evicted) - len(result.evicted_in_use))
        return result.path

    def _in_use(self, view: VllmModels | None) -> set[str]:
        now = time.monotonic()
        with self._lock:
            if view is None:  # cannot see what vLLM has loaded: all we returned may be
                return set(self._returned)
            for sha, when in list(self._returned.items()):
                if now - when > self._grace_s:
                    del self._returned[sha]
            recent = set(self._returned)
        return recent | set(self._entries_of(view.bound_paths()).values())

    def _entries_of(self, bound: Mapping[str, str]) -> dict[str, str]:
        """Name -> sha256 of the loaded names whose path is an entry of this cache."""
        entries = {}
        for name, raw in bound.items():
            path = Path(raw)
            if path.parent == self.cache.root:
                entries[name] = path.name
        return entries

    def _releaser(self, view: VllmModels) -> Any:
        def release(sha256: str) -> bool:
            names = [n for n, sha in self._entries_of(view.bound_paths()).items() if sha == sha256]
            if not names:  # in use because it was just returned: vLLM is loading it
                return False
            if not view.forget(names):
                return False
            with self._lock:
                self._returned.pop(sha256, None)
            logger.warning(
                "artifact cache over budget with only loaded versions: released %s (%s)",
                sha256,
                ", ".join(names),
            )
            return True

        return release
