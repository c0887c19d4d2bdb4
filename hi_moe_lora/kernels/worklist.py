"""The per-step work list of the fused kernel: (adapter slot, token tile) entries.

Built once per engine step on the host from the token -> slot mapping, then copied into
persistent device buffers that every launch of that step reads (and that a captured CUDA graph
keeps pointing at). Tokens are grouped by slot (a stable sort), each slot's tokens are cut into
tiles of ``block_m`` rows, tokens without an adapter (slot -1) get no tile at all.

Buffer layout (int32):
- ``tiles[0]``: number of tiles T; ``tiles[1]``: how many of them are wide (their adapter's rank
  exceeds :data:`.config.RANK_CHUNK`), listed first; then T records of ``3 + block_m`` values:
  (slot, rank, length, token row 0 .. token row block_m-1), so one load gives a program all it
  needs about its tile (the adapter's real rank included, see :mod:`.ranks`). With the wide
  tiles first, the kernel maps a job to its tile arithmetically although wide tiles have more
  jobs than narrow ones.
A list is built for every token-tile height in :data:`.config.BLOCK_M_CHOICES`; a launch reads
the one that matches its tile configuration.

The buffers also hold the kernel's synchronisation counters (``counters``: a job ticket, a spare
value, the ready counts of the (tile, slice) pairs, then their arrival counts, one per part of a
wide tile's shrink). They start at zero and every launch leaves them at zero again (the program
that takes the launch's last ticket resets them), so they are never written here.

With the fused GEMM on (:mod:`.gemm_lora`), the buffers also hold the step's *fused slot* (the
slot of every LoRA token when the step serves one adapter, else -1: its LoRA rides in the base
GEMM), followed by that slot's real rank (0 without one), and a second set of tile lists, the
*rest*, for the launch after that GEMM: every other slot's tokens, which is no tile in a
one-adapter step (only the header, a count of zero, is copied then) and the whole list
otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .config import BLOCK_M_CHOICES, MAX_WIDE_SPLIT, RANK_CHUNK

if TYPE_CHECKING:
    import torch

IntArray = npt.NDArray[np.int32]


class WorkListError(ValueError):
    """The mapping does not fit the buffers or names an unknown slot."""


def tile_capacity(max_tokens: int, max_slots: int, block_m: int) -> int:
    """Most tiles a step can produce: each slot's partial tile adds at most one."""
    return -(-max_tokens // block_m) + max_slots


MAX_SLICES = 3


#: int32 values of the counters buffer per (tile, slice) pair: a ready count and an arrival
#: count per part of a wide tile.
COUNTERS_PER_PAIR = 1 + MAX_WIDE_SPLIT
#: int32 values before the first tile record: tile count, wide-tile count.
HEADER_SIZE = 2


def counter_size(max_tokens: int, max_slots: int) -> int:
    """Length of the counters buffer: ticket, spare, then the per-pair counters."""
    return 2 + COUNTERS_PER_PAIR * pair_capacity(max_tokens, max_slots)


def pairs_in_counters(counters_len: int) -> int:
    """How many (tile, slice) pairs a counters buffer of ``counters_len`` values serves."""
    return (counters_len - 2) // COUNTERS_PER_PAIR


def pair_capacity(max_tokens: int, max_slots: int) -> int:
    """Most (tile, slice) pairs one launch can meet."""
    return MAX_SLICES * tile_capacity(max_tokens, max_slots, min(BLOCK_M_CHOICES))


def upper_bound_tiles(m: int, num_slots: int, block_m: int) -> int:
    """Most tiles a call with ``m`` token rows can meet (sizes the launch grid)."""
    return max(1, -(-m // block_m) + min(num_slots, m) - 1)


def token_slots_from_mapping(
    index_mapping: Sequence[int], lora_index_to_id: Sequence[int | None]
) -> IntArray:
    """Per-token slot (-1: no adapter) from vLLM's token -> LoRA-id mapping and slot table."""
    ids = np.asarray(index_mapping, dtype=np.int64)
    slots = np.full(ids.shape[0], -1, dtype=np.int32)
    for slot, lora_id in enumerate(lora_index_to_id):
        if lora_id is not None and lora_id > 0:
            slots[ids == lora_id] = slot
    return slots


def single_slot(token_slots: npt.ArrayLike) -> int:
    """The slot of every adapter token when they share one, else -1 (none, or several)."""
    slots = np.unique(np.asarray(token_slots, dtype=np.int64))
    slots = slots[slots >= 0]
    return int(slots[0]) if slots.size == 1 else -1


def record_size(block_m: int) -> int:
    """int32 values per tile record."""
    return 3 + block_m


@dataclass(frozen=True)
class WorkList:
    """Host copy of one step's work list."""

    token_indices: IntArray
    tiles: dict[int, IntArray]


def build_worklist(
    token_slots: npt.ArrayLike,
    slot_ranks: Sequence[int],
    block_ms: Sequence[int] = BLOCK_M_CHOICES,
) -> WorkList:
    """Group tokens by slot and cut each group into tiles for every tile height (the tiles of
    adapters wider than :data:`.config.RANK_CHUNK` first)."""
    ranks = np.asarray(slot_ranks, dtype=np.int64)
    slots = np.asarray(token_slots, dtype=np.int64)
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    first = int(np.searchsorted(sorted_slots, 0, side="left"))
    token_indices = order[first:].astype(np.int32)
    active = sorted_slots[first:]
    uniq, starts, counts = np.unique(active, return_index=True, return_counts=True)
    tiles: dict[int, IntArray] = {}
    for block_m in block_ms:
        per_seg = -(-counts // block_m)
        seg_of_tile = np.repeat(np.arange(uniq.shape[0]), per_seg)
        first_tile = np.cumsum(per_seg) - per_seg
        within = np.arange(seg_of_tile.shape[0]) - first_tile[seg_of_tile]
        tile_start = starts[seg_of_tile] + within * block_m
        tile_len = np.minimum(block_m, counts[seg_of_tile] - within * block_m)
        # Wide tiles first (a stable order otherwise: by slot, then by token position).
        wide = (ranks[uniq[seg_of_tile]] if seg_of_tile.size else seg_of_tile) > RANK_CHUNK
        order_t = np.argsort(~wide, kind="stable")
        seg_of_tile, tile_start, tile_len = (
            seg_of_tile[order_t],
            tile_start[order_t],
            tile_len[order_t],
        )
        n_tiles = seg_of_tile.shape[0]
        body = np.zeros((n_tiles, record_size(block_m)), dtype=np.int64)
        body[:, 0] = uniq[seg_of_tile]
        body[:, 1] = ranks[uniq[seg_of_tile]] if n_tiles else 0
        body[:, 2] = tile_len
        if n_tiles:
            cols = np.arange(block_m)
            idx = tile_start[:, None] + cols[None, :]
            valid = cols[None, :] < tile_len[:, None]
            body[:, 3:] = np.where(valid, token_indices[np.minimum(idx, len(token_indices) - 1)], 0)
        header = [n_tiles, int(wide.sum())]
        tiles[block_m] = np.concatenate([header, body.reshape(-1)]).astype(np.int32)
    return WorkList(token_indices=token_indices, tiles=tiles)


#: Arrival counters a K-split launch of the fused GEMM may use (one per column block).
GEMM_ARRIVALS = 8192


def arrival_counters(device: torch.device | str) -> torch.Tensor:
    """Zeroed counters for :func:`.gemm_lora.launch_gemm_lora`'s K splits; each launch leaves
    them zero. Allocate them before a CUDA graph is captured (the work list holds the served
    ones)."""
    import torch

    return torch.zeros(GEMM_ARRIVALS, dtype=torch.int32, device=device)


class WorkListBuffers:
    """Persistent device buffers holding the current step's work list.

    Both tile lists live in one device tensor. On CUDA the host copy goes through a small ring of
    pinned staging buffers with asynchronous copies, so ``update`` never waits for the GPU to
    drain (a pageable copy would, and vLLM prepares step N+1 while step N runs); a staging
    buffer is reused only after the event of its previous copy has completed.
    """

    RING = 3

    def __init__(
        self,
        max_tokens: int,
        max_slots: int,
        device: torch.device | str,
        fused_slot: bool = False,
    ) -> None:
        import torch

        self.max_tokens = max_tokens
        self.max_slots = max_slots
        sizes = [
            HEADER_SIZE + record_size(bm) * tile_capacity(max_tokens, max_slots, bm)
            for bm in BLOCK_M_CHOICES
        ]
        lists = len(sizes)
        if fused_slot:  # (the rest's lists, then the fused slot and its rank)
            sizes = [*sizes, *sizes, 2]
        starts = np.cumsum([0, *sizes[:-1]]).tolist()
        self._offsets = dict(zip(BLOCK_M_CHOICES, starts[:lists], strict=True))
        self._dev = torch.zeros(sum(sizes), dtype=torch.int32, device=device)
        self.tiles: dict[int, torch.Tensor] = {
            bm: self._dev[off : off + size]
            for (bm, off), size in zip(self._offsets.items(), sizes, strict=False)
        }
        #: The rest's tile lists, the fused slot (then its adapter's real rank) and the fused
        #: GEMM's arrival counters (for its tiles that split K), ``fused_slot=True`` only.
        self.rest_tiles: dict[int, torch.Tensor] = {}
        self.fused_slot: torch.Tensor | None = None
        self.gemm_arrivals: torch.Tensor | None = None
        self._rest_offsets: dict[int, int] = {}
        if fused_slot:
            self._rest_offsets = dict(zip(BLOCK_M_CHOICES, starts[lists:-1], strict=True))
            self.rest_tiles = {
                bm: self._dev[off : off + size]
                for (bm, off), size in zip(self._rest_offsets.items(), sizes[lists:], strict=False)
            }
            self.fused_slot = self._dev[starts[-1] : starts[-1] + 2]
            self._fused_offset = starts[-1]
            self.gemm_arrivals = arrival_counters(device)
        self.counters = torch.zeros(
            counter_size(max_tokens, max_slots), dtype=torch.int32, device=device
        )
        self._pinned = self._dev.device.type == "cuda"
        self._ring = [
            torch.zeros(sum(sizes), dtype=torch.int32, pin_memory=self._pinned)
            for _ in range(self.RING if self._pinned else 1)
        ]
        self._events: list[torch.cuda.Event | None] = [None] * len(self._ring)
        self._next = 0

    def update(self, token_slots: npt.ArrayLike, slot_ranks: Sequence[int]) -> WorkList:
        """Rebuild the work list in place (the device tensors keep their storage)."""
        import torch

        slots = np.asarray(token_slots, dtype=np.int64)
        if slots.shape[0] > self.max_tokens:
            raise WorkListError(f"{slots.shape[0]} tokens > capacity {self.max_tokens}")
        if slots.size and int(slots.max()) >= self.max_slots:
            raise WorkListError(f"slot {int(slots.max())} >= {self.max_slots} slots")
        if len(slot_ranks) < self.max_slots:
            raise WorkListError(f"{len(slot_ranks)} ranks for {self.max_slots} slots")
        work = build_worklist(slots, slot_ranks)
        index = self._next
        self._next = (index + 1) % len(self._ring)
        event = self._events[index]
        if event is not None:
            event.synchronize()
        staging = self._ring[index]
        for bm, host in work.tiles.items():
            self._copy_in(staging, self._offsets[bm], host)
        if self.fused_slot is not None:
            fused = single_slot(slots)
            no_tiles = np.zeros(HEADER_SIZE, dtype=np.int32)
            for bm, host in work.tiles.items():
                self._copy_in(staging, self._rest_offsets[bm], host if fused < 0 else no_tiles)
            own_rank = int(slot_ranks[fused]) if fused >= 0 else 0
            self._copy_in(staging, self._fused_offset, np.array([fused, own_rank], np.int32))
        if self._pinned:
            done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            done.record()
            self._events[index] = done
        return work

    def _copy_in(self, staging: torch.Tensor, offset: int, host: IntArray) -> None:
        """``host`` into the device buffer at ``offset``, through this step's staging buffer."""
        import torch

        end = offset + host.shape[0]
        staging[offset:end].copy_(torch.from_numpy(host))
        self._dev[offset:end].copy_(staging[offset:end], non_blocking=self._pinned)
