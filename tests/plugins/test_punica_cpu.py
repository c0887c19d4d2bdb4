"""The CPU Punica wrapper: base-model tokens of a mixed batch get no adapter's LoRA, and the
logits LoRA survives prompt log-probabilities (unit tests, then the real vLLM CPU server)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm.lora.layers.utils import LoRAMapping  # noqa: E402
from vllm.lora.punica_wrapper.punica_cpu import PunicaWrapperCPU  # noqa: E402

from hi_moe_lora.kernels.prompt_logits import MIXED_STEP_WARNING  # noqa: E402
from plugins.punica_cpu import IsolatedPunicaWrapperCPU, zero_tokens_without_adapter  # noqa: E402
from tests.support.log_records import records_of  # noqa: E402

SLOTS, RANK, HIDDEN = 3, 4, 8
#: adapter ids in slots 0, 1, 2; 0 in a mapping is the base model
SLOT_IDS = [7, 8, 9]


def weights() -> tuple[tuple[object, ...], tuple[object, ...]]:
    generator = torch.Generator().manual_seed(0)
    lora_a = (torch.randn(SLOTS, 1, RANK, HIDDEN, generator=generator),)
    lora_b = (torch.randn(SLOTS, 1, HIDDEN, RANK, generator=generator),)
    return lora_a, lora_b


def apply(wrapper_type: type, ids: tuple[int, ...], *, prefill: bool) -> tuple[object, object]:
    """``y`` after the wrapper's LoRA on tokens ``ids`` (one token per request), and ``x``."""
    lora_a, lora_b = weights()
    x = torch.randn(len(ids), HIDDEN, generator=torch.Generator().manual_seed(1))
    wrapper = wrapper_type(max_num_batched_tokens=16, max_batches=8, device="cpu")
    mapping = LoRAMapping(index_mapping=ids, prompt_mapping=ids, is_prefill=prefill)
    wrapper.update_metadata(mapping, SLOT_IDS, SLOTS + 1, 512)
    y = torch.zeros(len(ids), HIDDEN)
    wrapper.add_lora_linear(y, x, lora_a, lora_b, 1.0, (HIDDEN,))
    return y, x


def own_delta(x: object, slot: int) -> object:
    lora_a, lora_b = weights()
    return (x @ lora_a[0][slot, 0].T) @ lora_b[0][slot, 0].T  # type: ignore[operator]


@pytest.mark.parametrize("prefill", [True, False])
def test_base_model_tokens_get_nothing_and_adapter_tokens_their_own(prefill: bool) -> None:
    ids = (0, 7, 0, 9, 8, 0)
    y, x = apply(IsolatedPunicaWrapperCPU, ids, prefill=prefill)
    for row, adapter_id in enumerate(ids):
        if adapter_id == 0:
            assert float(y[row].abs().max()) == 0.0, f"base-model token {row} was changed"
        else:
            expected = own_delta(x[row], SLOT_IDS.index(adapter_id))
            assert torch.allclose(y[row], expected, atol=1e-5), f"token {row}"


def test_a_batch_of_the_base_model_alone_is_untouched() -> None:
    y, _x = apply(IsolatedPunicaWrapperCPU, (0, 0, 0), prefill=True)
    assert float(y.abs().max()) == 0.0


def test_vllms_own_cpu_wrapper_gives_base_model_tokens_the_last_slot() -> None:
    """Why the wrapper exists (vLLM 0.32.0): if this fails, vLLM fixed it and the wrapper may go."""
    y, x = apply(PunicaWrapperCPU, (0, 7), prefill=True)
    assert torch.allclose(y[0], own_delta(x[0], SLOTS - 1), atol=1e-5)


def test_zero_tokens_without_adapter_leaves_other_rows() -> None:
    shrunk = torch.ones(4, RANK)
    zero_tokens_without_adapter(shrunk, torch.tensor([0, -1, 2, -1, 5]))  # longer: padded
    assert shrunk.sum(dim=1).tolist() == [RANK, 0.0, RANK, 0.0]


VOCAB = 32


def logits_wrapper(ids: tuple[int, ...]) -> IsolatedPunicaWrapperCPU:
    """The wrapper after a step of one token per request, adapter ids ``ids`` (0: base model)."""
    wrapper = IsolatedPunicaWrapperCPU(max_num_batched_tokens=16, max_batches=8, device="cpu")
    mapping = LoRAMapping(index_mapping=ids, prompt_mapping=ids, is_prefill=False)
    wrapper.update_metadata(mapping, SLOT_IDS, SLOTS + 1, VOCAB)
    return wrapper


def head_weights(with_head: bool) -> tuple[Any, Any]:
    """LM-head stacked A and B; without ``with_head`` every adapter's A is zero (no LM-head)."""
    generator = torch.Generator().manual_seed(2)
    lora_a = torch.randn(SLOTS, 1, RANK, HIDDEN, generator=generator)
    lora_b = torch.randn(SLOTS, 1, VOCAB, RANK, generator=generator)
    return (lora_a if with_head else torch.zeros_like(lora_a)), lora_b


def head_delta(x: Any, slot: int) -> Any:
    lora_a, lora_b = head_weights(True)
    return (x @ lora_a[slot, 0].T) @ lora_b[slot, 0].T


def prompt_rows(rows: int) -> tuple[Any, Any]:
    return torch.randn(rows, HIDDEN, generator=torch.Generator().manual_seed(3)), torch.zeros(
        rows, VOCAB
    )


def test_prompt_rows_without_lm_head_weights_are_skipped_exactly() -> None:
    """More rows than the step's requests (prompt log-probabilities): vLLM's own wrapper raises;
    with no LM-head weights loaded the delta is zero and ours adds nothing."""
    x, y = prompt_rows(7)
    lora_a, lora_b = head_weights(False)
    plain = PunicaWrapperCPU(max_num_batched_tokens=16, max_batches=8, device="cpu")
    mapping = LoRAMapping(index_mapping=(7, 8), prompt_mapping=(7, 8), is_prefill=False)
    plain.update_metadata(mapping, SLOT_IDS, SLOTS + 1, VOCAB)
    with pytest.raises(RuntimeError):
        plain.add_lora_logits(y, x, lora_a, lora_b, 1.0)
    logits_wrapper((7, 8)).add_lora_logits(y, x, lora_a, lora_b, 1.0)
    assert float(y.abs().max()) == 0.0


def test_prompt_rows_of_a_one_adapter_step_get_that_adapter() -> None:
    x, y = prompt_rows(5)
    lora_a, lora_b = head_weights(True)
    logits_wrapper((8, 8)).add_lora_logits(y, x, lora_a, lora_b, 1.0)
    assert torch.allclose(y, head_delta(x, SLOT_IDS.index(8)), atol=1e-4)


def test_prompt_rows_of_a_mixed_step_keep_the_base_logits_and_warn_once() -> None:
    x, y = prompt_rows(5)
    lora_a, lora_b = head_weights(True)
    wrapper = logits_wrapper((7, 9))
    with records_of("hi_moe_lora.kernels.prompt_logits") as records:
        wrapper.add_lora_logits(y, x, lora_a, lora_b, 1.0)
        wrapper.add_lora_logits(y, x, lora_a, lora_b, 1.0)
    assert float(y.abs().max()) == 0.0
    assert [r.getMessage() for r in records] == [MIXED_STEP_WARNING % (5, 2)]


def test_prompt_rows_of_a_base_model_step_get_nothing() -> None:
    x, y = prompt_rows(5)
    lora_a, lora_b = head_weights(True)
    logits_wrapper((0, 0)).add_lora_logits(y, x, lora_a, lora_b, 1.0)
    assert float(y.abs().max()) == 0.0


def test_sampled_rows_get_their_own_lm_head_delta_and_base_rows_none() -> None:
    ids = (7, 0, 9)
    x, y = prompt_rows(len(ids))
    lora_a, lora_b = head_weights(True)
    logits_wrapper(ids).add_lora_logits(y, x, lora_a, lora_b, 1.0)
    assert float(y[1].abs().max()) == 0.0
    for row in (0, 2):
        assert torch.allclose(y[row], head_delta(x[row], SLOT_IDS.index(ids[row])), atol=1e-4)


# ------------------------------------------------------------------ the real vLLM (CPU)

#: token ids scored teacher-forced (inside the tiny model's vocabulary of 512)
FORCED_IDS = [10 + (i * 37 + 5) % 400 for i in range(60)]


def _prompt_logprobs(client: httpx.Client, model: str) -> list[float]:
    body = {"model": model, "prompt": FORCED_IDS, "max_tokens": 1, "echo": True, "logprobs": 1}
    answer = client.post("/v1/completions", json=body)
    assert answer.status_code == 200, answer.text
    logprobs = answer.json()["choices"][0]["logprobs"]["token_logprobs"]
    values: list[float] = logprobs[1 : len(FORCED_IDS)]  # not the first token, nor the answer
    return values


@pytest.mark.vllm
def test_prompt_logprobs_beside_running_adapter_requests_keep_the_engine_serving(
    vllm_server: Any, fresh_name: Any
) -> None:
    """An adapter's prompt log-probabilities asked while other adapters' requests run: vLLM
    0.32's CPU wrapper raised inside the engine, which then answered every request with 500."""
    names = [fresh_name("prompt-logprobs") for _ in range(2)]
    sources = [vllm_server.adapters["python-lora"][0], vllm_server.adapters["math-lora"][0]]
    headers = vllm_server.stack.vllm_headers
    with httpx.Client(base_url=vllm_server.url, headers=headers, timeout=300) as client:
        for name, source in zip(names, sources, strict=True):
            body = {"lora_name": name, "lora_path": str(source)}
            assert client.post("/v1/load_lora_adapter", json=body).status_code == 200
        alone = _prompt_logprobs(client, names[0])

        started = [threading.Event() for _ in range(4)]
        probed = threading.Event()

        def load_until_probed(index: int) -> list[tuple[int, float]]:
            """Streams long answers one after another until the probe has finished (so one of
            them is running while the probe runs, however fast this machine is); sets its event
            at the first token (a request is then in vLLM's batch) and returns each answer's
            status and the time its stream ended."""
            body = {
                "model": names[index % 2],
                "prompt": "def f(x):",
                "max_tokens": 480,
                "ignore_eos": True,
                "stream": True,
            }
            answers: list[tuple[int, float]] = []
            while not answers or not probed.is_set():
                with client.stream("POST", "/v1/completions", json=body) as answer:
                    for line in answer.iter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            started[index].set()
                    answers.append((answer.status_code, time.monotonic()))
            return answers

        with ThreadPoolExecutor(4) as pool:
            load = [pool.submit(load_until_probed, index) for index in range(4)]
            try:
                for event in started:
                    assert event.wait(120), "an adapter request never produced a token"
                beside = _prompt_logprobs(client, names[0])
                probe_done = time.monotonic()
            finally:
                probed.set()  # (the load stops after its running answers, whatever happened)
            results = [answer for future in load for answer in future.result()]
    statuses = {status for status, _ in results}
    # the probe ran inside the load: every load request started before it, one ended after it
    assert max(ended for _, ended in results) > probe_done, "the load ended before the probe"
    assert statuses == {200}
    assert len(beside) == len(alone) == len(FORCED_IDS) - 1
    assert max(abs(a - b) for a, b in zip(alone, beside, strict=True)) < 1e-3
