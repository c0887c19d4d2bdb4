"""The Prometheus families our plugins record inside vLLM, and the one way to record them.

Families (all histograms of seconds; ``_count`` per label value counts the events):

- ``hi_moe_lora_resolver_duration_seconds{outcome}``: one resolve by our resolver, in vLLM's API
  server (registry look-up + checks + checksum). ``outcome``: ``resolved``, ``not_found``
  (registry 404), ``declined`` (base model, DoRA or path refused), ``checksum_mismatch`` (the
  files on this host are not the ones registered: tampering or corruption; the alert
  ``AdapterFilesNotAsRegistered`` fires on any) or
  ``error`` (registry unreachable / bad answer, unexpected exception).
- ``hi_moe_lora_vllm_adapter_load_seconds{outcome}``: one cold load of an adapter by vLLM's worker
  (``add_adapter`` calls that read the adapter from disk: read, CPU cache, activation into a
  device slot). ``outcome``: ``loaded`` or ``error``.
- ``hi_moe_lora_vllm_adapter_read_seconds{outcome}``: the disk-to-CPU part of that load alone
  (vLLM's ``_load_adapter``).

Counters of the artifact cache (:mod:`plugins.artifact_fetch`, API server; only with
``HI_MOE_LORA_ARTIFACT_CACHE_DIR``):

- ``hi_moe_lora_artifact_downloads_total{outcome}``: versions downloaded from the control plane.
  ``outcome``: ``downloaded``, ``checksum_mismatch`` (the files that arrived are not the
  registered ones: nothing kept; ``AdapterDownloadNotAsRegistered`` fires on any),
  ``too_large`` (one version over the budget) or
  ``error`` (HTTP/connection failure after the retries, or a cache that cannot be written).
- ``hi_moe_lora_artifact_download_bytes_total``: bytes transferred by those downloads (resumed
  parts included once).
- ``hi_moe_lora_artifact_cache_hits_total{source}``: resolves served without a download:
  ``cache`` (already in the cache) or ``local_path`` (the registry's path exists on this host
  and verified: a shared file system).
- ``hi_moe_lora_artifact_cache_evictions_total{kind}``: versions removed from the cache:
  ``unused`` (no name bound to it) or ``in_use`` (vLLM was made to forget its names first).

Counter of our kernels (:mod:`plugins.kernel_warmup`, vLLM's worker; GPU only):

- ``hi_moe_lora_kernel_late_compiles_total``: variants of our Triton kernels compiled after the
  kernel warm-up (:mod:`hi_moe_lora.kernels.late_compiles` logs each, with why). Each stalled
  vLLM's CUDA-graph capture, or a served step, for the compile's seconds
  (``KernelCompiledAfterWarmUp`` fires on any, in ``deploy/prometheus/alerts.yml``).

The families live in prometheus_client's default registry, which vLLM's API server serves at
``/metrics`` when it runs as one process. When ``PROMETHEUS_MULTIPROC_DIR`` is set in vLLM's
environment before it starts, every vLLM process writes its samples to files there and the API
server's ``/metrics`` merges all of them (``MultiProcessCollector``): that is how the worker's
families reach Prometheus. prometheus_client picks its mode when it is first imported, so this
module imports it only when a family is first used (vLLM has imported it long before).

A family is built on first use in the process that records it, with all its label values at
zero. Recording never raises: vLLM must not fail because a metric could not be written. The first
failure of each family is logged; a family that cannot be built stays off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Histogram

logger = logging.getLogger(__name__)

RESOLVER_DURATION = "hi_moe_lora_resolver_duration_seconds"
ADAPTER_LOAD = "hi_moe_lora_vllm_adapter_load_seconds"
ADAPTER_READ = "hi_moe_lora_vllm_adapter_read_seconds"

ARTIFACT_DOWNLOADS = "hi_moe_lora_artifact_downloads_total"
ARTIFACT_DOWNLOAD_BYTES = "hi_moe_lora_artifact_download_bytes_total"
ARTIFACT_CACHE_HITS = "hi_moe_lora_artifact_cache_hits_total"
ARTIFACT_EVICTIONS = "hi_moe_lora_artifact_cache_evictions_total"

KERNEL_LATE_COMPILES = "hi_moe_lora_kernel_late_compiles_total"

DownloadOutcome = Literal["downloaded", "checksum_mismatch", "too_large", "error"]
DOWNLOAD_OUTCOMES: tuple[DownloadOutcome, ...] = (
    "downloaded",
    "checksum_mismatch",
    "too_large",
    "error",
)
HitSource = Literal["cache", "local_path"]
HIT_SOURCES: tuple[HitSource, ...] = ("cache", "local_path")
EvictionKind = Literal["unused", "in_use"]
EVICTION_KINDS: tuple[EvictionKind, ...] = ("unused", "in_use")

ResolveOutcome = Literal["resolved", "not_found", "declined", "checksum_mismatch", "error"]
RESOLVE_OUTCOMES: tuple[ResolveOutcome, ...] = (
    "resolved",
    "not_found",
    "declined",
    "checksum_mismatch",
    "error",
)
LoadOutcome = Literal["loaded", "error"]
LOAD_OUTCOMES: tuple[LoadOutcome, ...] = ("loaded", "error")

#: From a cached checksum on a local registry (milliseconds) to a timed-out registry look-up or a
#: large adapter read from a network volume (tens of seconds).
BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class _Family:
    """One histogram with an ``outcome`` label, built on first use."""

    def __init__(self, name: str, documentation: str, outcomes: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.outcomes = tuple(outcomes)
        self.histogram: Histogram | None = None
        self.broken = False  # could not be built: stays off
        self.failure_logged = False


class _CounterFamily:
    """One counter with at most one label (``label`` and its ``values``), built on first use."""

    def __init__(self, name: str, documentation: str, label: str | None, values: Sequence[str]):
        self.name = name
        self.documentation = documentation
        self.label = label
        self.values = tuple(values)
        self.counter: Counter | None = None
        self.broken = False
        self.failure_logged = False


class PluginMetrics:
    """Our families in one registry (default: prometheus_client's global ``REGISTRY``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._resolver = _Family(
            RESOLVER_DURATION,
            "Time the hi-moe-lora resolver took for one adapter name in vLLM's API server "
            "(registry look-up, checks, checksum), by outcome.",
            RESOLVE_OUTCOMES,
        )
        self._load = _Family(
            ADAPTER_LOAD,
            "Time vLLM's worker took to load one adapter it did not hold (read from disk, CPU "
            "cache, activation into a device slot), by outcome.",
            LOAD_OUTCOMES,
        )
        self._read = _Family(
            ADAPTER_READ,
            "Time vLLM's worker took to read one adapter from disk into CPU memory, by outcome.",
            LOAD_OUTCOMES,
        )

        self._downloads = _CounterFamily(
            ARTIFACT_DOWNLOADS,
            "Adapter versions the resolver downloaded from the control plane, by outcome.",
            "outcome",
            DOWNLOAD_OUTCOMES,
        )
        self._download_bytes = _CounterFamily(
            ARTIFACT_DOWNLOAD_BYTES,
            "Bytes the resolver downloaded from the control plane's artifact endpoint.",
            None,
            (),
        )
        self._hits = _CounterFamily(
            ARTIFACT_CACHE_HITS,
            "Resolves whose adapter files were already on this host, by where they were.",
            "source",
            HIT_SOURCES,
        )
        self._evictions = _CounterFamily(
            ARTIFACT_EVICTIONS,
            "Adapter versions removed from the resolver's artifact cache, by kind.",
            "kind",
            EVICTION_KINDS,
        )
        self._late_compiles = _CounterFamily(
            KERNEL_LATE_COMPILES,
            "Variants of hi-moe-lora's Triton kernels compiled after its kernel warm-up in "
            "vLLM's worker; each stalled the CUDA-graph capture or a served step.",
            None,
            (),
        )

    def build_all(self) -> None:
        """Build every family now, each series at zero: what a scrape shows before any event
        (the deploy tests read the names the alerts may query from here); never raises."""
        for family in list(vars(self).values()):  # (every family the constructor declared)
            if isinstance(family, _Family):
                self._histogram(family)
            elif isinstance(family, _CounterFamily):
                self._counter(family)

    def count_late_compile(self) -> None:
        """Record one variant of our kernels compiled after the warm-up; never raises."""
        self._count(self._late_compiles, None, 1)

    def count_download(self, outcome: DownloadOutcome, transferred: int) -> None:
        """Record one version download (and the bytes it moved); never raises."""
        self._count(self._downloads, outcome, 1)
        if transferred > 0:
            self._count(self._download_bytes, None, transferred)

    def count_hit(self, source: HitSource) -> None:
        """Record one resolve served without a download; never raises."""
        self._count(self._hits, source, 1)

    def count_evictions(self, kind: EvictionKind, count: int) -> None:
        """Record ``count`` versions evicted from the cache; never raises."""
        if count > 0:
            self._count(self._evictions, kind, count)

    def _count(self, family: _CounterFamily, value: str | None, amount: float) -> None:
        try:
            if family.label is not None and value not in family.values:
                raise ValueError(f"{value!r} is not one of {family.values}")
            counter = self._counter(family)
            if counter is None:
                return
            if family.label is not None:
                counter.labels(**{family.label: value}).inc(amount)
            else:
                counter.inc(amount)
        except Exception as exc:
            self._failed(family, exc)

    def _counter(self, family: _CounterFamily) -> Counter | None:
        if family.counter is not None or family.broken:
            return family.counter
        with self._lock:
            if family.counter is None and not family.broken:
                try:
                    from prometheus_client import REGISTRY, Counter

                    counter = Counter(
                        family.name.removesuffix("_total"),
                        family.documentation,
                        labelnames=() if family.label is None else (family.label,),
                        registry=self._registry if self._registry is not None else REGISTRY,
                    )
                    for value in family.values:  # every series exists from the start, at zero
                        counter.labels(**{str(family.label): value})
                    family.counter = counter
                except Exception as exc:
                    family.broken = True
                    self._failed(family, exc)
        return family.counter

    def observe_resolve(self, outcome: ResolveOutcome, seconds: float) -> None:
        """Record one resolve; never raises."""
        self._observe(self._resolver, outcome, seconds)

    def observe_load(self, outcome: LoadOutcome, seconds: float) -> None:
        """Record one cold adapter load in vLLM's worker; never raises."""
        self._observe(self._load, outcome, seconds)

    def observe_read(self, outcome: LoadOutcome, seconds: float) -> None:
        """Record one disk-to-CPU adapter read in vLLM's worker; never raises."""
        self._observe(self._read, outcome, seconds)

    def _observe(self, family: _Family, outcome: str, seconds: float) -> None:
        try:
            if outcome not in family.outcomes:  # a fixed set: no series made up by mistake
                raise ValueError(f"{outcome!r} is not one of {family.outcomes}")
            histogram = self._histogram(family)
            if histogram is not None:
                histogram.labels(outcome=outcome).observe(max(seconds, 0.0))
        except Exception as exc:
            self._failed(family, exc)

    def _histogram(self, family: _Family) -> Histogram | None:
        if family.histogram is not None or family.broken:
            return family.histogram
        with self._lock:
            if family.histogram is None and not family.broken:
                try:
                    family.histogram = self._build(family)
                except Exception as exc:
                    family.broken = True
                    self._failed(family, exc)
        return family.histogram

    def _build(self, family: _Family) -> Histogram:
        from prometheus_client import REGISTRY, Histogram

        histogram = Histogram(
            family.name,
            family.documentation,
            labelnames=("outcome",),
            buckets=BUCKETS_S,
            registry=self._registry if self._registry is not None else REGISTRY,
        )
        for outcome in family.outcomes:  # every series exists from the start, at zero
            histogram.labels(outcome=outcome)
        return histogram

    def _failed(self, family: _Family | _CounterFamily, exc: Exception) -> None:
        if family.failure_logged:
            return
        family.failure_logged = True
        logger.warning(
            "hi-moe-lora metric %s cannot be recorded; vLLM goes on without it",
            family.name,
            exc_info=exc,
        )


_default: PluginMetrics | None = None
_default_lock = threading.Lock()


def plugin_metrics() -> PluginMetrics:
    """This process's families in prometheus_client's global registry (the one vLLM serves)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = PluginMetrics()
    return _default
