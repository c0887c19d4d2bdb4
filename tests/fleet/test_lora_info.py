"""active_adapters: the engine's running and waiting adapters from vLLM's /metrics text."""

from __future__ import annotations

from registry.fleet.lora_info import active_adapters

EXPOSITION = """\
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="old@1",waiting_lora_adapters=""} 1.7e9
vllm:lora_requests_info{running_lora_adapters="a@1,b@2",waiting_lora_adapters="c@1"} 1.8e9
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.75e9
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
"""


def test_the_newest_sample_names_running_and_waiting_adapters() -> None:
    assert active_adapters(EXPOSITION) == {"a@1", "b@2", "c@1"}


def test_nothing_without_the_gauge_or_with_garbage() -> None:
    assert active_adapters("# TYPE x gauge\nx 1\n") == frozenset()
    assert active_adapters("") == frozenset()
    assert active_adapters("this { is not prometheus") == frozenset()
