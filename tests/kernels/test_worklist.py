"""Work list: every adapter token in exactly one tile of its slot, none for slot -1."""

from __future__ import annotations

import numpy as np
import pytest

from hi_moe_lora.kernels.worklist import (
    WorkListBuffers,
    WorkListError,
    build_worklist,
    tile_capacity,
    token_slots_from_mapping,
    upper_bound_tiles,
)


@pytest.mark.parametrize("block_m", [16, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiles_cover_each_adapter_token_once(block_m: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    slots = rng.integers(-1, 5, size=300)
    work = build_worklist(slots, (block_m,))
    tiles = work.tiles[block_m]
    count = int(tiles[0])
    seen = []
    for t in range(count):
        slot, start, length = tiles[1 + 3 * t : 4 + 3 * t]
        assert 1 <= length <= block_m
        rows = work.token_indices[start : start + length]
        assert (slots[rows] == slot).all()
        seen.extend(rows.tolist())
    assert sorted(seen) == sorted(np.nonzero(slots >= 0)[0].tolist())
    assert count <= upper_bound_tiles(300, 5, block_m)


def test_no_adapter_tokens_give_no_tiles() -> None:
    work = build_worklist(np.full(10, -1), (16,))
    assert work.tiles[16][0] == 0
    assert work.token_indices.size == 0


def test_mapping_from_vllm_ids() -> None:
    slots = token_slots_from_mapping((0, 7, 9, 7, 5), [9, None, 7])
    assert slots.tolist() == [-1, 2, 0, 2, -1]


def test_buffers_update_in_place_and_reject_overflow() -> None:
    bufs = WorkListBuffers(32, 3, "cpu")
    before = bufs.tiles[16].data_ptr()
    bufs.update(np.array([2, 0, -1, 2]))
    assert bufs.tiles[16].data_ptr() == before
    assert bufs.tiles[16][0].item() == 2
    assert bufs.tiles[16].numel() == 1 + 3 * tile_capacity(32, 3, 16)
    with pytest.raises(WorkListError):
        bufs.update(np.zeros(33, dtype=np.int64))
    with pytest.raises(WorkListError):
        bufs.update(np.array([3]))
