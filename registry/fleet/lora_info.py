"""Which adapters a vLLM engine is running or queueing, read from its ``/metrics``.

vLLM's API server exports ``vllm:lora_requests_info``, a gauge whose value is the time of the
engine's last scheduler report and whose labels ``running_lora_adapters`` and
``waiting_lora_adapters`` list (comma-separated) the LoRA names in that report's batch and
queue. The newest sample is the engine's current state. Those names are loaded (or being
loaded) on that replica: the health monitor adds them to
:class:`registry.fleet.loaded.LoadedAdapters` beside what ``/v1/models`` lists, for the
routing's adapter affinity. vLLM started without LoRA, or without the gauge, yields nothing.
"""

from __future__ import annotations

import logging

from prometheus_client.parser import text_string_to_metric_families

logger = logging.getLogger(__name__)

LORA_INFO = "vllm:lora_requests_info"
_LABELS = ("running_lora_adapters", "waiting_lora_adapters")


def active_adapters(exposition: str) -> frozenset[str]:
    """The adapter names of the newest ``vllm:lora_requests_info`` sample (empty if none)."""
    newest: tuple[float, dict[str, str]] | None = None
    try:
        for family in text_string_to_metric_families(exposition):
            if family.name != LORA_INFO:
                continue
            for sample in family.samples:
                if newest is None or sample.value > newest[0]:
                    newest = (sample.value, sample.labels)
    except ValueError as exc:  # not Prometheus text: say so once per call, read nothing
        logger.debug("vLLM /metrics is not Prometheus text: %s", exc)
        return frozenset()
    if newest is None:
        return frozenset()
    names = (name.strip() for label in _LABELS for name in newest[1].get(label, "").split(","))
    return frozenset(name for name in names if name)
