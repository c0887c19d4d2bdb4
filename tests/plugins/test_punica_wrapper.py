"""Our Punica wrapper inside vLLM's own machinery (LoRAConfig, LoRAMapping, update_metadata).

On CPU the fused kernel runs in the Triton interpreter (vLLM's CPU build disables its own Triton
ops, so the GPU wrapper's metadata class is supplied from vLLM's module); on a GPU the result is
also compared with vLLM's own ``PunicaWrapperGPU`` on the same inputs.
"""

from __future__ import annotations

from typing import Final

import pytest
import torch

punica_gpu = pytest.importorskip("vllm.lora.punica_wrapper.punica_gpu")

from vllm.config import LoRAConfig  # noqa: E402
from vllm.lora.layers import LoRAMapping  # noqa: E402
from vllm.lora.ops.triton_ops.lora_kernel_metadata import LoRAKernelMeta  # noqa: E402

from hi_moe_lora.kernels.reference_loops import lora_linear_reference  # noqa: E402
from tests.support.log_records import records_of  # noqa: E402

K = 48
WIDTHS = (32, 16, 16)
RANKS = {0: 8, 1: 16, 2: 4}  # slot -> real rank; slot 3 empty
IDS = [21, 22, 23, None]
MAX_RANK: Final = 16


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> str:
    if torch.cuda.is_available():
        return "cuda"
    monkeypatch.setattr(punica_gpu, "LoRAKernelMeta", LoRAKernelMeta, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return "cpu"


def _weights(device: str) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(7)
    a_list, b_list = [], []
    for n in WIDTHS:
        a = torch.zeros(4, 1, MAX_RANK, K)
        b = torch.zeros(4, 1, n, MAX_RANK)
        for slot, r in RANKS.items():
            a[slot, 0, :r] = torch.randn(r, K, generator=gen) / K**0.5
            b[slot, 0, :, :r] = torch.randn(n, r, generator=gen) / r**0.5
        a_list.append(a.to(torch.float16).to(device))
        b_list.append(b.to(torch.float16).to(device))
    return tuple(a_list), tuple(b_list)


def _wrapper(cls: type, device: str):  # type: ignore[no-untyped-def]
    cfg = LoRAConfig(max_loras=4, max_lora_rank=MAX_RANK)
    return cls(64, 8, device, lora_config=cfg)


def _mapping(m: int, seed: int) -> tuple[LoRAMapping, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    slots = torch.randint(-1, 3, (m,), generator=gen)
    ids = tuple(IDS[s] if s >= 0 else 0 for s in slots.tolist())
    return LoRAMapping(index_mapping=ids, prompt_mapping=ids, is_prefill=True), slots


def _two_steps(
    wrapper: object,
    mapping: LoRAMapping,
    ids: list[int | None],
    y: torch.Tensor,
    x: torch.Tensor,
    a: tuple[torch.Tensor, ...],
    b: tuple[torch.Tensor, ...],
    **kwargs: object,
) -> list[torch.Tensor]:
    """The outputs of two steps with the same batch: the first at full rank (the slots' weights
    not yet seen), the second with the ranks learnt from them. ``y`` is left as it is."""
    outputs = []
    for _ in range(2):
        wrapper.update_metadata(mapping, ids, 5, 128)  # type: ignore[attr-defined]
        out = y.clone()
        wrapper.add_lora_linear(out, x, a, b, 1.0, WIDTHS, **kwargs)  # type: ignore[attr-defined]
        outputs.append(out)
    return outputs


@pytest.mark.parametrize("m", [1, 5, 37])
def test_add_lora_linear_matches_reference_and_learns_ranks(m: int, device: str) -> None:
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    a, b = _weights(device)
    mapping, slots = _mapping(m, seed=m)
    gen = torch.Generator().manual_seed(m + 1)
    x = torch.randn(m, K, generator=gen).to(torch.float16).to(device)
    y = torch.randn(m, sum(WIDTHS), generator=gen).to(torch.float16).to(device)
    ref = lora_linear_reference(y, x, a, b, slots, 0.5)

    wrapper.update_metadata(mapping, IDS, 5, 128)
    assert wrapper._hm_ranks.ranks.tolist() == [MAX_RANK] * 4  # nothing seen yet: full rank
    out = y.clone()
    wrapper.add_lora_linear(out, x, a, b, 0.5, WIDTHS)
    tol = 6e-3 * max(1.0, ref.abs().max().item())
    assert (out.double().cpu() - ref).abs().max().item() <= tol

    # Next step: the weights have been seen, so the real ranks are used and the result holds.
    wrapper.update_metadata(mapping, IDS, 5, 128)
    assert wrapper._hm_ranks.ranks.tolist()[:3] == [RANKS[0], RANKS[1], RANKS[2]]
    out2 = y.clone()
    wrapper.add_lora_linear(out2, x, a, b, 0.5, WIDTHS)
    assert (out2.double().cpu() - ref).abs().max().item() <= tol

    if device == "cuda":
        native = _wrapper(punica_gpu.PunicaWrapperGPU, device)
        native.update_metadata(mapping, IDS, 5, 128)
        out3 = y.clone()
        native.add_lora_linear(out3, x, a, b, 0.5, WIDTHS)
        assert (out2.double() - out3.double()).abs().max().item() <= tol


def test_a_slot_reassignment_under_an_unchanged_mapping_keeps_each_token_on_its_adapter(
    device: str,
) -> None:
    """vLLM issue #47724's failure, at the wrapper: the batch (adapter ids per token) stays the
    same while adapter 22 moves from slot 1 to slot 3 and adapter 24 takes slot 1. vLLM 0.26 and
    0.32 call ``update_metadata`` when the slot layout changes; the work list and the ranks must
    then follow, so 22's tokens keep 22's weights and nothing of 24 leaks in."""
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    a, b = _weights(device)
    ids = (22, 21, 22, 0, 22)
    mapping = LoRAMapping(ids, ids, is_prefill=True)
    x = torch.randn(len(ids), K, generator=torch.Generator().manual_seed(30))
    x = x.to(torch.float16).to(device)
    y = torch.zeros(len(ids), sum(WIDTHS), dtype=torch.float16, device=device)
    want = lora_linear_reference(y, x, a, b, torch.tensor([1, 0, 1, -1, 1]), 1.0)
    tol = 6e-3 * max(1.0, want.abs().max().item())
    before = _two_steps(wrapper, mapping, IDS, y, x, a, b)[-1]
    assert (before.double().cpu() - want).abs().max().item() <= tol
    gen = torch.Generator().manual_seed(31)
    for a_slice, b_slice in zip(a, b, strict=True):  # vLLM's set_lora into slots 3 and 1
        a_slice[3].copy_(a_slice[1])
        b_slice[3].copy_(b_slice[1])
        a_slice[1].copy_(torch.randn(a_slice[1].shape, generator=gen).to(a_slice.dtype))
        b_slice[1].copy_(torch.randn(b_slice[1].shape, generator=gen).to(b_slice.dtype))
    for after in _two_steps(wrapper, mapping, [21, 24, 23, 22], y, x, a, b):
        assert (after.double().cpu() - want).abs().max().item() <= tol


@pytest.mark.parametrize(("narrow", "one_launch"), [("on", "0"), ("on", "1"), ("off", "1")])
def test_narrow_b_copies_under_max_rank_32_follow_a_new_adapter(
    narrow: str, one_launch: str, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``--max-lora-rank 32`` the wrapper keeps narrow copies of B (unless
    ``HI_MOE_LORA_NARROW_B=off``) that the narrow tiles read; when vLLM writes a new adapter into
    a slot, the next step's copies hold it, so the result follows the new weights. The slot's
    refresh runs tensor by tensor or in one launch each (``HI_MOE_LORA_SLOT_REFRESH``; on a CPU
    host through the interpreter)."""
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    monkeypatch.setenv("HI_MOE_LORA_NARROW_B", narrow)
    monkeypatch.setenv("HI_MOE_LORA_SLOT_REFRESH", one_launch)
    cfg = LoRAConfig(max_loras=4, max_lora_rank=32)
    wrapper = HiMoePunicaWrapperGPU(64, 8, device, lora_config=cfg)
    assert wrapper._hm_ranks.narrow_b.one_launch is (one_launch == "1")
    gen = torch.Generator().manual_seed(50)

    def adapter(t: torch.Tensor, slot: int, rank: int, rows: bool) -> None:
        t[slot].zero_()
        shape = (rank, t.shape[-1]) if rows else (t.shape[-2], rank)
        values = (torch.randn(shape, generator=gen) / max(shape) ** 0.5).to(t.dtype)
        if rows:
            t[slot, 0, :rank] = values.to(t.device)
        else:
            t[slot, 0, :, :rank] = values.to(t.device)

    a = tuple(torch.zeros(4, 1, 32, K, dtype=torch.float16, device=device) for _ in WIDTHS)
    b = tuple(torch.zeros(4, 1, n, 32, dtype=torch.float16, device=device) for n in WIDTHS)
    for slot, rank in {0: 8, 1: 16, 2: 24}.items():
        for a_s, b_s in zip(a, b, strict=True):
            adapter(a_s, slot, rank, rows=True)
            adapter(b_s, slot, rank, rows=False)
    _, slots = _mapping(37, seed=51)
    x = torch.randn(37, K, generator=gen).to(torch.float16).to(device)
    y = torch.randn(37, sum(WIDTHS), generator=gen).to(torch.float16).to(device)

    def check(ids: list[int | None]) -> None:
        ref = lora_linear_reference(y, x, a, b, slots, 1.0)
        tol = 6e-3 * max(1.0, ref.abs().max().item())
        per_token = tuple(ids[s] or 0 if s >= 0 else 0 for s in slots.tolist())
        mapping = LoRAMapping(per_token, per_token, is_prefill=True)
        for out in _two_steps(wrapper, mapping, ids, y, x, a, b):
            assert (out.double().cpu() - ref).abs().max().item() <= tol
        copies = wrapper._hm_ranks.narrow_b.copies_of(b)
        if narrow == "off":
            assert copies is None
        else:
            assert copies is not None
            for copy, b_s in zip(copies, b, strict=True):
                assert torch.equal(copy, b_s[:, 0, :, :16])

    check(IDS)
    for a_s, b_s in zip(a, b, strict=True):  # vLLM's set_lora of adapter 24 into slot 1
        adapter(a_s, 1, 12, rows=True)
        adapter(b_s, 1, 12, rows=False)
    check([21, 24, 23, None])


@pytest.mark.parametrize("m", [5, 37])
def test_row_parallel_shards_sum_to_the_unsharded_delta(m: int, device: str) -> None:
    """Tensor parallel, a row-parallel layer (o, down) at TP = 2: each GPU's wrapper runs on its
    half of the input and of A's columns, all of B, and the layer's all-reduce sums the partial
    outputs. The sum must be the unsharded LoRA delta (the expand is linear in the shrink)."""
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    a, b = _weights(device)
    mapping, slots = _mapping(m, seed=m + 40)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(m + 41))
    x = x.to(torch.float16).to(device)
    zeros = torch.zeros(m, sum(WIDTHS), dtype=torch.float16, device=device)
    want = lora_linear_reference(zeros, x, a, b, slots, 1.0)
    half = K // 2
    total = torch.zeros(m, sum(WIDTHS), dtype=torch.float64)
    for shard in (slice(0, half), slice(half, K)):
        rank_wrapper = _wrapper(HiMoePunicaWrapperGPU, device)  # one per GPU
        a_shard = tuple(t[..., shard].contiguous() for t in a)
        x_shard = x[:, shard].contiguous()
        partial = _two_steps(rank_wrapper, mapping, IDS, zeros, x_shard, a_shard, b)[-1]
        total += partial.double().cpu()
    tol = 1.2e-2 * max(1.0, want.abs().max().item())  # two fp16 partials, one rounding each
    assert (total - want).abs().max().item() <= tol


@pytest.mark.parametrize("m", [5, 37])
def test_dual_stream_call_writes_the_delta_into_a_zeroed_output(m: int, device: str) -> None:
    """vLLM's dual-stream LoRA (``VLLM_LORA_ENABLE_DUAL_STREAM``) calls ``add_lora_linear`` on a
    second stream with a zeroed output and ``add_inputs=False``, then adds that output to the
    base GEMM's: it must hold each token's own delta, and zeros for base-model tokens."""
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    a, b = _weights(device)
    mapping, slots = _mapping(m, seed=m + 20)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(m)).to(torch.float16).to(device)
    zeros = torch.zeros(m, sum(WIDTHS), dtype=torch.float16, device=device)
    ref = lora_linear_reference(zeros, x, a, b, slots, 1.0, add_inputs=False)
    tol = 6e-3 * max(1.0, ref.abs().max().item())
    for out in _two_steps(wrapper, mapping, IDS, zeros, x, a, b, add_inputs=False):
        assert (out.double().cpu() - ref).abs().max().item() <= tol
        assert not bool(out[slots.to(out.device) < 0].any())


@pytest.mark.parametrize("m", [5, 37])
def test_dora_scales_apply_to_dora_slots_tokens(m: int, device: str) -> None:
    """A call with DoRA scales gets ``g * (y + delta)`` for its DoRA slots' tokens (slot 1
    here; slots 0 and 2 hold LoRA adapters); a call without them stays plain."""
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    a, b = _weights(device)
    scales = 0.5 + torch.rand(5, sum(WIDTHS), generator=torch.Generator().manual_seed(m))
    live = torch.tensor([0, 1, 0, 0], dtype=torch.int32)
    mapping, slots = _mapping(m, seed=m)
    gen = torch.Generator().manual_seed(m + 2)
    x = torch.randn(m, K, generator=gen).to(torch.float16).to(device)
    y = torch.randn(m, sum(WIDTHS), generator=gen).to(torch.float16).to(device)
    ref = lora_linear_reference(y, x, a, b, slots, 0.5, dora_scales=scales, dora_live=live)
    plain = lora_linear_reference(y, x, a, b, slots, 0.5)
    wrapper.update_metadata(mapping, IDS, 5, 128)

    out = y.clone()
    wrapper.add_lora_linear(
        out, x, a, b, 0.5, WIDTHS, dora_scales=scales.to(device), dora_live=live.to(device)
    )
    other = y.clone()
    wrapper.add_lora_linear(other, x, a, b, 0.5, WIDTHS)

    tol = 6e-3 * max(1.0, ref.abs().max().item())
    assert (out.double().cpu() - ref).abs().max().item() <= tol
    assert (other.double().cpu() - plain).abs().max().item() <= tol
    assert bool((slots == 1).any()) == bool((ref - plain).abs().max() > tol)


@pytest.mark.parametrize("m", [1, 37])
def test_reference_wrapper_is_exact_lora_rounded_once(m: int, device: str) -> None:
    """HI_MOE_LORA_KERNELS=reference: vLLM's metadata, the dense path in float64."""
    from plugins.punica_wrapper import ReferencePunicaWrapperGPU

    wrapper = _wrapper(ReferencePunicaWrapperGPU, device)
    a, b = _weights(device)
    mapping, slots = _mapping(m, seed=m + 10)
    gen = torch.Generator().manual_seed(m + 11)
    x = torch.randn(m, K, generator=gen).to(torch.float16).to(device)
    y = torch.randn(m, sum(WIDTHS), generator=gen).to(torch.float16).to(device)
    ref = lora_linear_reference(y, x, a, b, slots, 0.5)
    wrapper.update_metadata(mapping, IDS, 5, 128)
    out = y.clone()
    wrapper.add_lora_linear(out, x, a, b, 0.5, WIDTHS)
    one_rounding = torch.finfo(torch.float16).eps * ref.abs()
    assert ((out.double().cpu() - ref).abs() <= one_rounding).all()


def test_logits_lora_runs_only_when_an_adapter_has_lm_head_weights(device: str) -> None:
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    vocab, m = 40, 3
    mapping, _ = _mapping(m, seed=5)
    wrapper.update_metadata(mapping, IDS, 5, vocab)
    x = torch.randn(m, K).to(torch.float16).to(device)
    logits = torch.randn(m, vocab, device=device)
    a = torch.zeros(4, 1, MAX_RANK, K, dtype=torch.float16, device=device)
    b = torch.zeros(4, 1, vocab, MAX_RANK, dtype=torch.float16, device=device)
    out = logits.clone()
    wrapper.add_lora_logits(out, x, a, b, 1.0)  # no kernel: nothing to add (CPU too)
    assert torch.equal(out, logits)
    if device != "cuda":
        pytest.skip("vLLM's logits kernels run on CUDA only")
    a[1, 0, :4] = torch.randn(4, K).to(torch.float16).to(device) / K**0.5
    b[1, 0, :, :4] = torch.randn(vocab, 4).to(torch.float16).to(device)
    native = _wrapper(punica_gpu.PunicaWrapperGPU, device)
    native.update_metadata(mapping, IDS, 5, vocab)
    want = logits.clone()
    native.add_lora_logits(want, x, a, b, 1.0)
    assert not torch.equal(want, logits)
    # Adapters with LM-head weights (a fresh wrapper: in vLLM an adapter id names fixed weights,
    # so the gate looks at a slot again only when another adapter lands in it): vLLM's path.
    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    wrapper.update_metadata(mapping, IDS, 5, vocab)
    wrapper.add_lora_logits(out, x, a, b, 1.0)
    assert torch.equal(out, want)


def _head(device: str, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """LM-head stacked A and B where only slot 1 (adapter 22) has LM-head weights."""
    gen = torch.Generator().manual_seed(11)
    a = torch.zeros(4, 1, MAX_RANK, K, dtype=torch.float16)
    b = torch.zeros(4, 1, vocab, MAX_RANK, dtype=torch.float16)
    a[1, 0, :4] = (torch.randn(4, K, generator=gen) / K**0.5).to(torch.float16)
    b[1, 0, :, :4] = torch.randn(vocab, 4, generator=gen).to(torch.float16)
    return a.to(device), b.to(device)


def test_prompt_rows_take_the_steps_one_adapter(device: str) -> None:
    """One request's prompt rows (prompt log-probabilities) in a step whose two requests both
    use adapter 22: every row gets its LM-head delta (vLLM's kernels map rows by request order:
    the first two rows would get it, the others nothing)."""
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    vocab, rows = 40, 9
    a, b = _head(device, vocab)
    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    wrapper.update_metadata(LoRAMapping((22, 22), (22, 22), is_prefill=False), IDS, 5, vocab)
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(rows, K, generator=gen).to(torch.float16).to(device)
    logits = torch.randn(rows, vocab, generator=gen).to(device)
    out = logits.clone()
    wrapper.add_lora_logits(out, x, a, b, 1.0)
    delta = (x.double() @ a[1, 0].double().T) @ b[1, 0].double().T
    assert torch.allclose(out.double(), logits.double() + delta, atol=1e-2)
    assert bool((out != logits).any(dim=1).all())


def test_prompt_rows_of_a_mixed_step_keep_the_base_logits(device: str) -> None:
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    vocab, rows = 40, 9
    a, b = _head(device, vocab)
    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    wrapper.update_metadata(LoRAMapping((22, 21), (22, 21), is_prefill=False), IDS, 5, vocab)
    x = torch.randn(rows, K).to(torch.float16).to(device)
    logits = torch.randn(rows, vocab).to(device)
    out = logits.clone()
    with records_of("hi_moe_lora.kernels.prompt_logits") as records:
        wrapper.add_lora_logits(out, x, a, b, 1.0)
        wrapper.add_lora_logits(out, x, a, b, 1.0)
    assert torch.equal(out, logits)
    assert len([r for r in records if "different adapters" in r.getMessage()]) == 1


def test_slot_change_refreshes_rank(device: str) -> None:
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    a, b = _weights(device)
    mapping, slots = _mapping(9, seed=3)
    x = torch.randn(9, K).to(torch.float16).to(device)
    y = torch.randn(9, sum(WIDTHS)).to(torch.float16).to(device)
    wrapper.update_metadata(mapping, IDS, 5, 128)
    wrapper.add_lora_linear(y.clone(), x, a, b, 1.0, WIDTHS)
    wrapper.update_metadata(mapping, IDS, 5, 128)
    assert wrapper._hm_ranks.ranks.tolist()[2] == RANKS[2]
    # A new adapter lands in slot 2 with a larger rank: the rank must follow.
    for t in a:
        t[2, 0, :12] = 0.01
    new_ids = [21, 22, 24, None]
    ids = tuple(new_ids[s] if s >= 0 else 0 for s in slots.tolist())
    wrapper.update_metadata(LoRAMapping(ids, ids, is_prefill=True), new_ids, 5, 128)
    assert wrapper._hm_ranks.ranks.tolist()[2] == 12


def test_batch_without_adapters_launches_nothing(device: str) -> None:
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    a, b = _weights(device)
    ids = (0,) * 6
    wrapper.update_metadata(LoRAMapping(ids, ids, is_prefill=False), IDS, 5, 128)
    assert bool(wrapper.token_mapping_meta.no_lora_flag_cpu.item())
    y = torch.randn(6, sum(WIDTHS)).to(torch.float16).to(device)
    out = y.clone()
    wrapper.add_lora_linear(out, torch.randn(6, K).to(torch.float16).to(device), a, b, 1.0, WIDTHS)
    assert torch.equal(out, y)


def test_our_wrapper_subclasses_vllms_final_wrapper() -> None:
    """vLLM (0.32 here; 0.33 too) marks ``PunicaWrapperGPU`` with ``typing.final``: a hint for
    type checkers, which Python does not enforce, so our subclass keeps working; vLLM finds it
    through the platform's wrapper name (``plugins.punica``), not by subclass lookup."""
    from vllm.lora.punica_wrapper.punica_gpu import PunicaWrapperGPU

    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    assert issubclass(HiMoePunicaWrapperGPU, PunicaWrapperGPU)
    assert HiMoePunicaWrapperGPU.add_lora_linear is not PunicaWrapperGPU.add_lora_linear


@pytest.mark.parametrize("m", [5, 40])  # cuBLAS then our launch; the fused GEMM (33-64 rows)
def test_base_and_lora_linear_serves_the_base_gemm_and_every_tokens_lora(
    m: int, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HI_MOE_LORA_FUSED_GEMM=on``: a layer's whole output, ``x W^T`` and each token's LoRA,
    from the wrapper's op; None where vLLM's path must run (a bias, a quantized base, off)."""
    from types import SimpleNamespace

    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    import hi_moe_lora.kernels.gemm_lora as gemm_lora
    from hi_moe_lora.kernels.gemm_tiles import default_plan
    from plugins.punica_wrapper import HiMoePunicaWrapperGPU

    monkeypatch.setenv("HI_MOE_LORA_FUSED_GEMM", "on")
    # (the test's small shape fused on every device, as the rule of thumb fuses it)
    monkeypatch.setattr(gemm_lora, "plan_for", lambda device, n, k: default_plan(n, k))
    k, widths = 128, (64, 32, 32)
    gen = torch.Generator().manual_seed(m)
    half = lambda t: t.to(torch.bfloat16).to(device)  # noqa: E731
    a = tuple(half(torch.randn(4, 1, MAX_RANK, k, generator=gen) / k**0.5) for _ in widths)
    b = tuple(half(torch.randn(4, 1, n, MAX_RANK, generator=gen) / 4) for n in widths)
    w = half(torch.randn(sum(widths), k, generator=gen) / k**0.5)
    x = half(torch.randn(m, k, generator=gen))
    base = SimpleNamespace(quant_method=UnquantizedLinearMethod(), weight=w)
    layer = SimpleNamespace(base_layer=base, lora_a_stacked=a, lora_b_stacked=b)
    wrapper = _wrapper(HiMoePunicaWrapperGPU, device)
    mapping, slots = _mapping(m, seed=m + 3)
    wrapper.update_metadata(mapping, IDS, 5, 128)

    out = wrapper.base_and_lora_linear(layer, x, None)

    assert out is not None
    y = (x.double() @ w.double().T).to(torch.bfloat16)
    ref = lora_linear_reference(y, x, a, b, slots, 1.0)
    assert (out.double().cpu() - ref).abs().max().item() <= 4e-2 * max(1.0, ref.abs().max().item())
    assert wrapper.base_and_lora_linear(layer, x, w[:, 0]) is None  # (a bias)
    quantized = SimpleNamespace(base_layer=SimpleNamespace(quant_method=object(), weight=w))
    assert wrapper.base_and_lora_linear(quantized, x, None) is None
    monkeypatch.setenv("HI_MOE_LORA_FUSED_GEMM", "off")
    assert _wrapper(HiMoePunicaWrapperGPU, device).base_and_lora_linear(layer, x, None) is None
