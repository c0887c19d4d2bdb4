"""The fused GEMM's kernels compiled for sm_90 on a CPU (Triton's own ptxas; no GPU): every
form, every shipped plan in its route's form, the helpers' own launch."""

from __future__ import annotations

from typing import get_args

import pytest

from hi_moe_lora.kernels.gemm_compile import (
    ROUTE_FORMS,
    ExpandForm,
    compile_gemm_for_target,
    compile_helpers_for_target,
)
from hi_moe_lora.kernels.gemm_tiles import TABLE_FILE, GemmPlan, GemmTile, load_table
from tests.support.ptx import element_loads

#: Every form: none (a one-adapter or plain launch), then the split forms.
FORMS: tuple[ExpandForm, ...] = get_args(ExpandForm)


#: The compiled cases: every form on two tiles in rank-16 slots (one of them as a step known to
#: serve several adapters launches it), and in rank-64 slots the one-adapter form and the
#: shrink inside (whose rank parts, the shrink's and the expand's, take the longest to compile:
#: about 25 s each on a 2-core CPU).
COMPILED = [
    *((form, GemmTile(64, 128, 4), 16, True) for form in FORMS),
    *((form, GemmTile(64, 128, 4, split_k=2), 16, False) for form in FORMS),
    ("none", GemmTile(64, 64, 6), 64, True),
    ("inside", GemmTile(64, 64, 6, split_k=2), 64, False),
]


@pytest.mark.parametrize(("form", "tile", "slot_rank", "may_fuse"), COMPILED)
def test_every_form_compiles_for_hopper(
    form: ExpandForm,
    tile: GemmTile,
    slot_rank: int,
    may_fuse: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What only the compiler sees, before a GPU host does (a launch without the shrink once
    compiled the helpers' branch and failed on one); rank-64 slots compile the shrink's and the
    expand's later rank parts, ``may_fuse=False`` a step known to serve several adapters. Every
    bf16 tile loads in vectors, as in the served variant (its arguments specialised as multiples
    of 16), except the fused slot's B in the epilogue, masked by the adapter's own rank: one
    element a load, once a program. More 2-byte global loads mean the compile lost that
    specialisation (it once did, and the SASS and spill reports read a kernel that no call
    launches: 360 such loads at 8 rows) or a mask lost a vector."""
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compile, do not interpret
    kernel = compile_gemm_for_target(tile, form, slot_rank=slot_rank, may_fuse=may_fuse)
    assert kernel.asm["cubin"]
    fused_b_per_thread = slot_rank * tile.block_n // (32 * tile.warps) if may_fuse else 0
    assert element_loads(kernel.asm["ptx"]) <= fused_b_per_thread
    if form in ("inside", "beside"):
        assert ".acquire." in kernel.asm["ptx"]  # (the epilogue's wait on the shrink's sums)


SHIPPED_PLANS = sorted(
    (device, key, plan)
    for device, plans in load_table(TABLE_FILE).items()
    for key, plan in plans.items()
)  # (device and key are unique: the plans are never compared)


@pytest.mark.parametrize(
    ("device", "key", "plan"), SHIPPED_PLANS, ids=[f"{d}-{k}" for d, k, _ in SHIPPED_PLANS]
)
def test_every_shipped_plan_compiles_for_hopper_in_its_route(
    device: str, key: str, plan: GemmPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tile a table ships (down's changed in the eighteenth window, the few-rows tiles in the
    thirtieth and gate_up's in the thirty-first) compiles in the form its route launches, its
    few-rows tile as calls of 8, 16 and 32 rows launch it, before a GPU host serves it."""
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert compile_gemm_for_target(plan.lora_tile, ROUTE_FORMS[plan.several]).asm["cubin"]
    if plan.plain_tile is not None:
        assert compile_gemm_for_target(plan.plain_tile, "none").asm["cubin"]
    few = plan.few_rows
    if few is not None and few.tile is not None:
        for rows in (8, 16, 32):  # (one few-rows tile serves every call of 8-32 rows)
            kernel = compile_gemm_for_target(
                few.tile, ROUTE_FORMS[few.several], may_fuse=False, rows=rows
            )
            assert kernel.asm["cubin"]
            # (bf16 tiles loaded whole: no fused slot's rank-masked B, so no element-wise load)
            assert element_loads(kernel.asm["ptx"]) == 0, rows


def test_the_helpers_beside_the_gemm_hold_a_fraction_of_its_shared_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The point of their own launch: a program small enough to share an SM with the GEMM's."""
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    helpers = compile_helpers_for_target()
    gemm = compile_gemm_for_target(GemmTile(64, 128, 4), "beside")
    assert helpers.asm["cubin"]
    assert helpers.metadata.shared <= 16 * 1024
    assert helpers.metadata.shared < gemm.metadata.shared
