"""The fused Triton kernel against the float64 reference (interpreter on CPU, or a GPU)."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.config import TileConfig
from hi_moe_lora.kernels.fused.flavours import compile_for_target
from hi_moe_lora.kernels.reference_loops import lora_linear_reference
from hi_moe_lora.kernels.triton_kernel import (
    DoraEpilogue,
    FusedLoRAShapeError,
    _layer_key,
    launch_fused_lora,
)
from tests.support.ptx import element_loads

from .lora_cases import Problem, make_problem, tolerance

K = 40
SHAPES = {
    "o": [48],
    "qkv": [64, 16, 16],
    "gate_up": [40, 40],
}


def _slots(m: int, mix: str, n_slots: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if mix == "none":
        return torch.full((m,), -1, dtype=torch.int64)
    if mix == "one":
        return torch.full((m,), 1, dtype=torch.int64)
    return torch.randint(-1, n_slots, (m,), generator=gen)


def _run(p: Problem, scale: float, offset: int = 0, add_inputs: bool = True, **kw: object) -> None:
    launch_fused_lora(
        p.y,
        p.x,
        p.lora_a,
        p.lora_b,
        p.work.tiles,
        p.work.counters,
        scale,
        offset,
        add_inputs,
        **kw,  # type: ignore[arg-type]
    )
    assert int(p.work.counters.abs().sum()) == 0  # the kernel leaves its counters reset


def _err(p: Problem, ref: torch.Tensor) -> float:
    return float((p.y.double().cpu() - ref).abs().max())


# 256 is the largest call on the decode tiles (SMALL_M_LIMIT), 257 the smallest on the prefill ones.
@pytest.mark.parametrize("m", [1, 3, 16, 64, 256, 257])
@pytest.mark.parametrize("mix", ["none", "one", "many"])
def test_matches_reference_over_batch_sizes(m: int, mix: str, device: str) -> None:
    ranks = [8, 16, 64, 16]
    slots = _slots(m, mix, len(ranks), seed=m)
    p = make_problem(m, K, SHAPES["qkv"], ranks, slots, device=device, seed=m)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.75)
    _run(p, 0.75)
    assert _err(p, ref) <= tolerance(torch.float16, ref)
    if mix == "none":
        assert torch.equal(p.y.double().cpu(), ref)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("rank", [8, 16, 64])
@pytest.mark.parametrize("reduce_in_expand", [True, False])
def test_shapes_ranks_and_both_reductions(
    shape: str, rank: int, reduce_in_expand: bool, device: str
) -> None:
    slots = _slots(29, "many", 3, seed=rank)
    p = make_problem(29, K, SHAPES[shape], [rank] * 3, slots, device=device, seed=rank)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 2.0)
    _run(p, 2.0, reduce_in_expand=reduce_in_expand)
    assert _err(p, ref) <= tolerance(torch.float16, ref)


def test_real_rank_below_padding_is_exact_and_rank_bound_is_used(device: str) -> None:
    slots = _slots(20, "many", 2, seed=3)
    p = make_problem(20, K, [48], [8, 16], slots, max_rank=64, device=device, seed=3)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 1.0)
    y0 = p.y.clone()
    _run(p, 1.0)
    assert _err(p, ref) <= tolerance(torch.float16, ref)
    # A rank below the real one must change the result: the record's rank is really applied...
    p.y.copy_(y0)
    p.work.update(slots.numpy(), [4, 4])
    _run(p, 1.0)
    assert _err(p, ref) > tolerance(torch.float16, ref)
    # ... and min_rank lifts it back to exact.
    p.y.copy_(y0)
    _run(p, 1.0, min_rank=64)
    assert _err(p, ref) <= tolerance(torch.float16, ref)


def test_write_only_mode_and_column_offset_leave_other_cells(device: str) -> None:
    m = 33
    slots = _slots(m, "many", 3, seed=5)
    p = make_problem(m, K, [24, 24], [16, 8, 16], slots, device=device, extra_cols=10, seed=5)
    p.y.fill_(float("nan"))
    _run(p, 0.5, offset=6, add_inputs=False)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.5, 6, add_inputs=False)
    got = p.y.double().cpu()
    has = slots >= 0
    assert not torch.isnan(got[has][:, 6:54]).any()
    assert torch.isnan(got[~has]).all()
    assert torch.isnan(got[:, :6]).all()
    assert torch.isnan(got[:, 54:]).all()
    diff = (got[has][:, 6:54] - ref[has][:, 6:54]).abs().max().item()
    assert diff <= tolerance(torch.float16, ref[has][:, 6:54])


@pytest.mark.parametrize(
    ("wide_split", "split_jobs"), [(1, None), (2, 10**6), (4, 10**6), (4, "half"), (4, 0)]
)
@pytest.mark.parametrize(
    ("reduce_narrow", "reduce_wide"), [(True, True), (False, False), (True, False), (False, True)]
)
def test_narrow_and_wide_rank_widths_in_one_batch(
    reduce_narrow: bool,
    reduce_wide: bool,
    wide_split: int,
    split_jobs: int | str | None,
    device: str,
) -> None:
    """Ranks 8 and 16 fit the narrow 16-row width; 17, 40 (part-masked) and 64 take the whole
    padded rank of 64: the expand in four rank chunks, the shrink over 64 / wide_split rank rows
    per job in K steps of 16 rows' worth (input width 150: three K chunks of 64, the last one
    part-masked); the wide tiles' jobs split ``wide_split`` ways (rank parts past a rank of 17
    or 40 read nothing), in half as many parts or whole where the split would exceed
    ``split_jobs``; each width with its own reduction."""
    m = 40
    slots = _slots(m, "many", 5, seed=13)
    p = make_problem(
        m, 150, [40, 24], [40, 8, 64, 16, 17], slots, max_rank=64, device=device, seed=13
    )
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.5)
    cfg = TileConfig(16, 64, 64, 16, 1, 1, 4, 1, 64, wide_split)
    if split_jobs == "half":
        # Per wide tile, two slices of three K chunks and 40 + 24 output columns: 24 + 5 jobs
        # split four ways, 12 + 3 split two ways; room for the latter only.
        split_jobs = int(p.work.tiles[16][1]) * 20
    _run(
        p,
        0.5,
        config=cfg,
        reduce_in_expand=reduce_narrow,
        wide_reduce_in_expand=reduce_wide,
        wide_split_jobs=split_jobs,
    )
    assert _err(p, ref) <= tolerance(torch.float16, ref)


def test_rank_tiles_must_cover_the_stacked_rank(device: str) -> None:
    slots = _slots(8, "one", 2, seed=2)
    p = make_problem(8, K, [48], [8, 32], slots, device=device, seed=2)
    with pytest.raises(FusedLoRAShapeError, match="stacked rank"):
        _run(p, 1.0, config=TileConfig(16, 32, 16, 16, 1, 1, 4, 1, 16))


@pytest.mark.parametrize("reduce_in_expand", [True, False])
def test_bfloat16_prefill_config_with_k_iters_and_groups(
    reduce_in_expand: bool, device: str
) -> None:
    m = 150
    slots = _slots(m, "many", 4, seed=9)
    p = make_problem(
        m, 72, [100, 36], [16, 8, 32, 16], slots, dtype=torch.bfloat16, device=device, seed=9
    )
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 1.5)
    cfg = TileConfig(64, 32, 16, 32, 2, 2, 4, 2, 32)
    _run(p, 1.5, config=cfg, reduce_in_expand=reduce_in_expand)
    assert _err(p, ref) <= tolerance(torch.bfloat16, ref)


@pytest.mark.parametrize(
    ("block_k", "wide_step_k"), [(16, 0), (32, 16)], ids=["one-k-block", "wide-k-steps"]
)
@pytest.mark.parametrize("reduce_in_expand", [True, False])
def test_prefill_tiles_with_narrow_and_wide_adapters(
    reduce_in_expand: bool, block_k: int, wide_step_k: int, device: str
) -> None:
    """Prefill-sized tiles (K loop, output groups) under max rank 64: rank 16 narrow, ranks 24
    and 64 wide (the shrink at full width in its K loop, the expand in rank chunks). With
    ``wide_step_k`` the wide shrink takes each K block in steps of its own (two K chunks of
    two blocks: four steps a chunk), the narrow one whole."""
    m = 140
    slots = _slots(m, "many", 3, seed=21)
    p = make_problem(m, 100, [70, 30], [16, 24, 64], slots, max_rank=64, device=device, seed=21)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.75)
    cfg = TileConfig(64, 32, block_k, 16, 2, 2, 4, 2, 64, wide_step_k=wide_step_k)
    assert cfg.wide_k_steps == (block_k // wide_step_k if wide_step_k else 1)
    _run(p, 0.75, config=cfg, reduce_in_expand=reduce_in_expand)
    assert _err(p, ref) <= tolerance(torch.float16, ref)


@pytest.mark.parametrize("programs", [1, 3, 64])
@pytest.mark.parametrize("reduce_in_expand", [True, False])
@pytest.mark.parametrize("mix", ["many", "one", "none"])
def test_any_grid_size_completes_all_jobs(
    programs: int, reduce_in_expand: bool, mix: str, device: str
) -> None:
    """Whatever the grid, every job runs once and the counters end at zero. With one adapter
    (or none) the step has fewer jobs than the grid sized for its upper bound: the programs
    beyond take no ticket, and the last ticket is still the one that resets."""
    m = 40
    slots = _slots(m, mix, 3, seed=11)
    p = make_problem(m, K, [64], [16, 16, 16], slots, device=device, seed=11)
    cfg = TileConfig(16, 16, 16, 16, 1, 1, 4, 1, 16)  # K = 40: three K chunks per pair
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 1.0)
    _run(p, 1.0, max_programs=programs, config=cfg, reduce_in_expand=reduce_in_expand)
    assert _err(p, ref) <= tolerance(torch.float16, ref)
    # Counters (tickets, arrivals, ready flags) were reset: a second launch on the same
    # buffers is right too.
    y1 = p.y.clone()
    ref2 = lora_linear_reference(y1, p.x, p.lora_a, p.lora_b, slots, 1.0)
    _run(p, 1.0, max_programs=programs, config=cfg, reduce_in_expand=reduce_in_expand)
    assert _err(p, ref2) <= tolerance(torch.float16, ref2)


@pytest.mark.parametrize(
    ("slices", "cfg"),
    [
        (1, TileConfig(16, 256, 256, 16, 1, 1, 4, 1, 16)),
        (3, TileConfig(16, 128, 512, 16, 1, 1, 4, 1, 64)),
        (3, TileConfig(16, 128, 512, 16, 1, 1, 4, 1, 64, 4)),
        (2, TileConfig(64, 128, 128, 64, 4, 2, 4, 3, 64)),
        (2, TileConfig(64, 128, 64, 16, 4, 2, 4, 3, 64)),
    ],
)
@pytest.mark.parametrize(("reduce_in_expand", "add_inputs"), [(True, True), (False, False)])
def test_compiles_for_hopper(
    slices: int,
    cfg: TileConfig,
    reduce_in_expand: bool,
    add_inputs: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compiled flavour builds to a cubin for sm_90 (no GPU needed: Triton's own ptxas).

    The interpreter runs the kernel's Python; this checks what only the compiler sees (the
    constexpr parameters it finds, device function calls, loop-carried types) before a GPU
    host does. Every bf16 tile (x, A, B, y, intermediate) loads in vectors: a 2-byte global
    load means a mask or an offset kept Triton from vectorising one (B's rank mask once did,
    at a cost of up to 45 % on an H100).
    """
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compile, do not interpret
    kernel = compile_for_target(slices, cfg, reduce_in_expand, arch=90, add_inputs=add_inputs)
    assert kernel.asm["cubin"]
    ptx = kernel.asm["ptx"]
    assert ".acquire." in ptx  # the wait on the pair (an acquire load)
    assert element_loads(ptx) == 0


def _dora(p: Problem, live: list[int], seed: int) -> DoraEpilogue:
    """Scales in [0.5, 1.5) for every slot (a last row for base tokens, as the plugin keeps)."""
    gen = torch.Generator().manual_seed(seed)
    scales = 0.5 + torch.rand(len(live) + 1, p.y.shape[1], generator=gen)
    flags = torch.tensor(live, dtype=torch.int32)
    return DoraEpilogue(scales.to(p.y.device), flags.to(p.y.device))


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("m", [5, 64, 257])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dora_epilogue_in_a_batch_of_dora_lora_and_base_tokens(
    shape: str, m: int, dtype: torch.dtype, device: str
) -> None:
    """DoRA slots (narrow and wide ranks), LoRA slots and base-model tokens in one launch,
    against the float64 reference: ``g * (y + delta)`` for DoRA tokens only."""
    ranks, live = [8, 64, 16, 4], [1, 1, 0, 0]
    slots = _slots(m, "many", len(ranks), seed=m)
    p = make_problem(m, K, SHAPES[shape], ranks, slots, dtype=dtype, device=device, seed=m)
    dora = _dora(p, live, seed=m)
    ref = lora_linear_reference(
        p.y, p.x, p.lora_a, p.lora_b, slots, 0.5, dora_scales=dora.scales, dora_live=dora.live
    )
    plain = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.5)
    _run(p, 0.5, dora=dora)
    assert _err(p, ref) <= tolerance(dtype, ref)
    assert float((ref - plain).abs().max()) > 3 * tolerance(dtype, ref)  # the scale shows


def test_dora_epilogue_needs_the_base_output_and_matching_scales(device: str) -> None:
    slots = _slots(6, "many", 2, seed=2)
    p = make_problem(6, K, SHAPES["o"], [8, 8], slots, device=device, seed=2)
    dora = _dora(p, [1, 0], seed=2)
    with pytest.raises(FusedLoRAShapeError, match="add_inputs"):
        _run(p, 1.0, add_inputs=False, dora=dora)
    narrow = DoraEpilogue(dora.scales[:, :-1], dora.live)
    with pytest.raises(FusedLoRAShapeError, match="do not cover"):
        _run(p, 1.0, dora=narrow)
    with pytest.raises(FusedLoRAShapeError, match="int32"):
        _run(p, 1.0, dora=DoraEpilogue(dora.scales, dora.live.to(torch.int64)))


def test_dora_epilogue_compiles_for_hopper(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DoRA variant builds for sm_90 and keeps every bf16 tile load vectorised."""
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cfg = TileConfig(16, 128, 512, 16, 1, 1, 4, 1, 64, 4)
    kernel = compile_for_target(3, cfg, True, arch=90, dora=True)
    assert kernel.asm["cubin"]
    assert element_loads(kernel.asm["ptx"]) == 0


@pytest.mark.parametrize("m", [16, 64, 257])
def test_b_stored_at_a_lower_rank_than_a(m: int, device: str) -> None:
    """vLLM pads B to ``max_lora_rank``; a B kept at rank 16 beside an A padded to 64 gives the
    padded B's result for adapters of rank <= 16, and the first 16 rank columns' for wider ones
    (the columns it lacks count as zero), on the decode tiles and the prefill ones."""
    ranks = [8, 16, 64, 16]
    slots = _slots(m, "many", len(ranks), seed=m + 1)
    p = make_problem(m, K, SHAPES["qkv"], ranks, slots, device=device, seed=m + 1)
    b_narrow = [t[..., :16].contiguous() for t in p.lora_b]
    b_zeroed = [t.clone() for t in p.lora_b]
    for t in b_zeroed:
        t[..., 16:] = 0
    ref = lora_linear_reference(p.y, p.x, p.lora_a, b_zeroed, slots, 0.5)
    launch_fused_lora(p.y, p.x, p.lora_a, b_narrow, p.work.tiles, p.work.counters, 0.5)
    assert _err(p, ref) <= tolerance(torch.float16, ref)
    assert int(p.work.counters.abs().sum()) == 0


@pytest.mark.parametrize("m", [3, 64, 300])
def test_narrow_tiles_read_the_narrow_copies_and_wide_tiles_read_b(m: int, device: str) -> None:
    """With B's narrow copies (first 16 rank columns, whole rows) the result is the padded B's;
    with copies of zeros, the tokens of adapters of rank <= 16 get nothing added and those of
    the rank-64 adapter get all of it: narrow tiles read the copies, wide ones B, on the decode
    tiles and the prefill ones."""
    ranks = [8, 16, 64, 16]
    slots = _slots(m, "many", len(ranks), seed=m + 2)
    p = make_problem(m, K, SHAPES["qkv"], ranks, slots, device=device, seed=m + 2)
    y0 = p.y.clone()
    copies = [t[..., :16].contiguous() for t in p.lora_b]
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.5)
    _run(p, 0.5, narrow_b=copies)
    assert _err(p, ref) <= tolerance(torch.float16, ref)

    p.y.copy_(y0)
    wide_only = [t.clone() for t in p.lora_b]
    for t in wide_only:
        t[[0, 1, 3]] = 0
    ref_wide = lora_linear_reference(p.y, p.x, p.lora_a, wide_only, slots, 0.5)
    _run(p, 0.5, narrow_b=[torch.zeros_like(t) for t in copies])
    assert _err(p, ref_wide) <= tolerance(torch.float16, ref_wide)
    narrow_rows = (slots >= 0) & (slots != 2)
    assert torch.equal(p.y.cpu()[narrow_rows], y0.cpu()[narrow_rows])


def test_rejects_narrow_copies_of_another_layout(device: str) -> None:
    slots = _slots(4, "one", 2, seed=1)
    p = make_problem(4, K, [16, 8], [8, 32], slots, device=device)
    good = [t[..., :16].contiguous() for t in p.lora_b]
    with pytest.raises(FusedLoRAShapeError, match="2 narrow B copies for 1 slices"):
        launch_fused_lora(
            p.y[:, :16], p.x, p.lora_a[:1], p.lora_b[:1], p.work.tiles, p.work.counters, 1.0,
            narrow_b=good,
        )  # fmt: skip
    for bad in (
        [good[0], t8 := good[1][..., :8].contiguous()],
        [good[0], good[1].to(torch.float32)],
        [good[0], torch.zeros(2, 16, 8, dtype=t8.dtype, device=device).transpose(1, 2)],
    ):
        with pytest.raises(FusedLoRAShapeError, match="is not a contiguous"):
            launch_fused_lora(
                p.y, p.x, p.lora_a, p.lora_b, p.work.tiles, p.work.counters, 1.0, narrow_b=bad
            )


def test_rejects_b_stored_above_a_rank_or_unevenly(device: str) -> None:
    slots = _slots(4, "one", 2, seed=1)
    p = make_problem(4, K, [16, 16], [8, 16], slots, device=device)
    wider = [torch.zeros(*t.shape[:-1], 32, dtype=t.dtype, device=device) for t in p.lora_b]
    with pytest.raises(FusedLoRAShapeError, match="stored rank at most"):
        launch_fused_lora(p.y, p.x, p.lora_a, wider, p.work.tiles, p.work.counters, 1.0)
    uneven = [p.lora_b[0], p.lora_b[1][..., :8].contiguous()]
    with pytest.raises(FusedLoRAShapeError, match="rank 8 in one slice and 16"):
        launch_fused_lora(p.y, p.x, p.lora_a, uneven, p.work.tiles, p.work.counters, 1.0)


def test_rejects_mismatched_layout(device: str) -> None:
    slots = _slots(4, "one", 2, seed=1)
    p = make_problem(4, K, [16], [8, 8], slots, device=device)
    with pytest.raises(FusedLoRAShapeError):
        launch_fused_lora(p.y, p.x[:, :-1], p.lora_a, p.lora_b, p.work.tiles, p.work.counters, 1.0)
    with pytest.raises(FusedLoRAShapeError):
        launch_fused_lora(
            p.y, p.x, p.lora_a, p.lora_b, p.work.tiles, p.work.counters, 1.0, offset_start=1
        )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiles for the local GPU")
def test_prefill_variants_are_compiled_with_the_first_call() -> None:
    """After a decode-sized first call, a prefill-sized one compiles nothing during serving."""
    from hi_moe_lora.kernels.fused.flavours import compiled_kernel

    widths = [72, 40]  # a layer shape no other test uses
    p = make_problem(20, 56, widths, [16, 8], _slots(20, "many", 2, seed=4), device="cuda")
    _run(p, 1.0)
    kernel = compiled_kernel()
    compiled = sum(len(cache[0]) for cache in kernel.device_caches.values())
    m = 1500  # bucket 4096: met by neither the first call nor a CUDA graph size
    big = make_problem(m, 56, widths, [16, 8], _slots(m, "many", 2, seed=6), device="cuda")
    ref = lora_linear_reference(big.y, big.x, big.lora_a, big.lora_b, big.token_slots, 1.0)
    _run(big, 1.0)
    assert _err(big, ref) <= tolerance(torch.float16, ref)
    assert sum(len(cache[0]) for cache in kernel.device_caches.values()) == compiled


def test_layer_key_tells_apart_weights_that_reuse_an_address() -> None:
    """The precompile's per-layer key: a freed address handed to weights of another layout (the
    caching allocator does) must not count as the same layer."""
    storage = torch.zeros(4 * 16 * 64)
    x = torch.zeros(3, 64)
    a = [storage[: 2 * 16 * 64].view(2, 16, 64)]
    b = [torch.zeros(2, 48, 16)]
    key = _layer_key(x, a, b, True)
    assert _layer_key(x, list(a), b, True) == key  # the same layer's next call
    narrower = [storage[: 2 * 8 * 64].view(2, 8, 64)]  # same address, another rank
    assert narrower[0].data_ptr() == a[0].data_ptr()
    assert _layer_key(x, narrower, b, True) != key
    assert _layer_key(x, a, [torch.zeros(2, 40, 16)], True) != key  # another output width
    assert _layer_key(x, a, b, False) != key  # write-only launches
