"""Work list: every adapter token in exactly one tile of its slot, none for slot -1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hi_moe_lora.kernels.config import RANK_CHUNK
from hi_moe_lora.kernels.worklist import (
    HEADER_SIZE,
    WorkListBuffers,
    WorkListError,
    build_worklist,
    record_size,
    single_slot,
    tile_capacity,
    token_slots_from_mapping,
    upper_bound_tiles,
)


@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiles_cover_each_adapter_token_once(block_m: int, seed: int) -> None:
    """... with the wide adapters' tiles first, counted in the header."""
    rng = np.random.default_rng(seed)
    slots = rng.integers(-1, 5, size=300)
    ranks = [8, 16, 64, 4, 32]
    work = build_worklist(slots, ranks, (block_m,))
    tiles = work.tiles[block_m]
    count, n_wide = int(tiles[0]), int(tiles[1])
    width = record_size(block_m)
    seen = []
    wide_flags = []
    for t in range(count):
        record = tiles[HEADER_SIZE + width * t : HEADER_SIZE + width * (t + 1)]
        slot, rank, length = record[:3]
        wide_flags.append(bool(rank > RANK_CHUNK))
        assert 1 <= length <= block_m
        assert rank == ranks[slot]
        rows = record[3 : 3 + length]
        assert (slots[rows] == slot).all()
        assert (record[3 + length :] == 0).all()
        seen.extend(rows.tolist())
    assert sorted(seen) == sorted(np.nonzero(slots >= 0)[0].tolist())
    assert count <= upper_bound_tiles(300, 5, block_m)
    assert wide_flags == [True] * n_wide + [False] * (count - n_wide)
    assert 0 < n_wide < count


def test_no_adapter_tokens_give_no_tiles() -> None:
    work = build_worklist(np.full(10, -1), [16], (16,))
    assert work.tiles[16][:HEADER_SIZE].tolist() == [0, 0]
    assert work.token_indices.size == 0


def test_mapping_from_vllm_ids() -> None:
    slots = token_slots_from_mapping((0, 7, 9, 7, 5), [9, None, 7])
    assert slots.tolist() == [-1, 2, 0, 2, -1]


def test_buffers_update_in_place_and_reject_overflow() -> None:
    bufs = WorkListBuffers(32, 3, "cpu")
    before = bufs.tiles[16].data_ptr()
    bufs.update(np.array([2, 0, -1, 2]), [8, 8, 8])
    assert bufs.tiles[16].data_ptr() == before
    assert bufs.tiles[16][0].item() == 2
    assert bufs.tiles[16].numel() == HEADER_SIZE + record_size(16) * tile_capacity(32, 3, 16)
    with pytest.raises(WorkListError):
        bufs.update(np.zeros(33, dtype=np.int64), [8, 8, 8])
    with pytest.raises(WorkListError):
        bufs.update(np.array([3]), [8, 8, 8])
    with pytest.raises(WorkListError):
        bufs.update(np.array([0]), [8])


def test_the_single_slot_is_the_one_slot_of_every_adapter_token() -> None:
    assert single_slot([2, -1, 2, 2]) == 2
    assert single_slot([2, 0, 2]) == -1  # (several adapters)
    assert single_slot([-1, -1]) == -1
    assert single_slot([]) == -1


def test_with_a_fused_slot_the_rest_lists_every_other_slots_tokens() -> None:
    bufs = WorkListBuffers(32, 3, "cpu", fused_slot=True)
    assert bufs.fused_slot is not None
    bufs.update(np.array([1, 1, -1, 1]), [8, 16, 8])  # one adapter: an empty rest
    assert bufs.fused_slot.tolist() == [1, 16]  # (the slot, then its adapter's rank)
    assert int(bufs.tiles[16][0]) == 1
    assert int(bufs.rest_tiles[16][0]) == 0
    assert int(bufs.rest_tiles[64][0]) == 0
    bufs.update(np.array([2, 0, -1, 2, 1]), [8, 8, 8])  # several: all of them in the rest
    assert bufs.fused_slot.tolist() == [-1, 0]
    for bm in (16, 64):
        assert torch.equal(bufs.rest_tiles[bm], bufs.tiles[bm])
    bufs.update(np.array([-1]), [8, 8, 8])
    assert bufs.fused_slot.tolist() == [-1, 0]


def test_without_a_fused_slot_there_is_no_rest() -> None:
    bufs = WorkListBuffers(32, 3, "cpu")
    assert bufs.fused_slot is None
    assert bufs.rest_tiles == {}
