"""The one-launch rank scan against the per-tensor detection, through the interpreter on CPU."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.rank_scan import RankScan, compile_for_target
from hi_moe_lora.kernels.ranks import SlotRanks, detect_rank, one_launch_default
from hi_moe_lora.kernels.warm_compile import compiling
from tests.support.triton_launches import binder_specialization, jit_function, record_launches


def _stack(ranks: list[int], pad: int, width: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    a = torch.zeros(len(ranks), 1, pad, width, dtype=dtype)
    for slot, rank in enumerate(ranks):
        a[slot, 0, :rank] = torch.randn(rank, width).to(dtype)
    return a.to(device)


def _expected(stacks: list[torch.Tensor], slots: list[int]) -> list[int]:
    return [max(int(detect_rank(a, slot)) for a in stacks if a.shape[0] > slot) for slot in slots]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_scan_matches_detection_over_tensors_of_different_widths(
    dtype: torch.dtype, device: str
) -> None:
    torch.manual_seed(0)
    stacks = [
        _stack([3, 16, 0, 9], 16, 40, dtype, device),
        _stack([5, 2, 0, 12], 16, 300, dtype, device),  # wider than a column block
        _stack([1, 1, 0, 1], 16, 8, dtype, device),
    ]
    stacks[1][3, 0, 13, 299] = 1.0  # one non-zero element in the last column raises slot 3
    scan = RankScan.build(stacks)
    assert scan is not None
    slots = [3, 0, 1, 2]
    assert scan.ranks(slots).tolist() == _expected(stacks, slots) == [14, 5, 16, 0]


def test_scan_covers_ranks_past_one_chunk_and_nan_rows(device: str) -> None:
    a = _stack([40, 64, 17], 64, 24, torch.bfloat16, device)
    a[2, 0, 50, 3] = float("nan")  # not zero: counts, as in detect_rank
    scan = RankScan.build([a])
    assert scan is not None
    assert scan.ranks([0, 1, 2]).tolist() == _expected([a], [0, 1, 2]) == [40, 64, 51]


def test_scan_skips_tensors_without_the_slot_and_reads_3d_and_strided_stacks(device: str) -> None:
    big = _stack([2, 4, 6], 16, 16, torch.float32, device)
    small = _stack([9], 16, 16, torch.float32, device)  # slot 0 only
    rows_strided = _stack([3, 3, 11], 32, 16, torch.float32, device)[:, :, ::2]  # rows of 2
    squeezed = _stack([7, 1, 1], 16, 16, torch.float32, device)[:, 0]  # [slots, rows, in]
    stacks = [big, small, rows_strided, squeezed]
    scan = RankScan.build(stacks)
    assert scan is not None
    assert scan.ranks([2, 1, 0]).tolist() == _expected(stacks, [2, 1, 0])


def test_scan_declines_what_one_table_cannot_describe() -> None:
    a = _stack([1], 16, 8, torch.float32, "cpu")
    assert RankScan.build([]) is None
    assert RankScan.build([a, _stack([1], 16, 8, torch.bfloat16, "cpu")]) is None
    assert RankScan.build([a[:, :, :, ::2]]) is None  # strided columns
    memory = bytearray(2 * 256 * 2 + 2)
    even, odd = (
        torch.frombuffer(memory, dtype=torch.bfloat16, offset=o, count=256) for o in (0, 1)
    )
    assert RankScan.build([even.view(2, 1, 16, 8), odd.view(2, 1, 16, 8)]) is None  # 1 byte apart


@pytest.mark.parametrize("one_launch", [True, False])
def test_the_tracker_gives_the_same_ranks_either_way(one_launch: bool, device: str) -> None:
    torch.manual_seed(1)
    tracker = SlotRanks(3, 16, device, one_launch=one_launch)
    first = _stack([3, 5, 0], 16, 32, torch.bfloat16, device)
    tracker.observe([first])
    assert tracker.refresh([1, 2, None]) == [3, 5, 16]
    tracker.observe([_stack([4, 1, 12], 16, 48, torch.bfloat16, device)])  # stale: rebuilt
    assert tracker.refresh([1, 2, None]) == [4, 5, 16]
    first[2, 0, :7] = 1.0  # a new adapter in slot 2
    assert tracker.refresh([1, 2, 7]) == [4, 5, 12]


def test_the_environment_chooses_the_scan() -> None:
    assert one_launch_default(None, "cuda") == (True, True)
    assert one_launch_default("auto", "cpu") == (False, False)
    assert one_launch_default("1", "cpu") == (True, True)
    assert one_launch_default("off", "cuda") == (False, False)
    with pytest.raises(ValueError, match="HI_MOE_LORA_SLOT_REFRESH"):
        one_launch_default("sometimes", "cuda")


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_the_scan_compiles_for_sm90(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the GPU's JIT will do, done here: a CPU-only test suite never runs the compiler."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # else triton.jit interprets
    assert compile_for_target(90, dtype).asm["ptx"]


def test_the_count_of_slots_scanned_picks_no_variant_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One specialization whatever the count of slots and chunks: 1, 5 and 16 would otherwise
    compile three variants."""
    from hi_moe_lora.kernels import rank_scan

    table = torch.zeros(8, dtype=torch.int32)
    constexprs = (rank_scan.TABLE_COLUMNS, rank_scan.ROWS, rank_scan.BLOCK_COLS)
    kernel = jit_function(monkeypatch, rank_scan._compiled)
    specializations = [
        binder_specialization(kernel, (table,) * 4 + (count, count) + constexprs, {})
        for count in (1, 5, 16)
    ]
    assert specializations[0] == specializations[1] == specializations[2]


def test_the_warm_up_compiles_the_variant_every_scan_launches(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compile_variant`` (inside a compiling block only) launches what scans of any slots
    launch, by Triton's binder; it writes no rank anywhere."""
    from hi_moe_lora.kernels import rank_scan

    stacks = [
        _stack([3, 0, 7], 16, 40, torch.bfloat16, device),
        _stack([1, 2], 32, 24, torch.bfloat16, device),
    ]
    scan = RankScan.build(stacks)
    assert scan is not None
    launches = record_launches(monkeypatch, rank_scan)
    with pytest.raises(RuntimeError, match="compiling"):
        scan.compile_variant()
    with compiling(1):
        scan.compile_variant()
    assert scan.ranks([2]).tolist() == [7]
    assert scan.ranks([0, 1, 2]).tolist() == [3, 2, 7]
    assert len(launches) == 3
    kernel = jit_function(monkeypatch, rank_scan._compiled)
    assert len({binder_specialization(kernel, *launch) for launch in launches}) == 1
