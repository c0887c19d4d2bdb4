"""Real per-slot adapter ranks, so the kernel reads an adapter at its rank, not ``max_lora_rank``.

vLLM zero-pads every adapter to ``max_lora_rank`` in the stacked weights. The rank of a slot is
taken as one past the last row of ``A[slot]`` that is not all zero, maximised over every stacked
``A`` seen so far. Rows past that index are zero, so skipping them is exact whatever the
adapter: the detection never changes a result, it only saves reads.

The ranks live in one persistent int32 device tensor per Punica wrapper (the kernel reads it, a
captured CUDA graph keeps pointing at it). They start at ``max_lora_rank`` (always exact) and are
recomputed, on the device and without a host sync, for the slots whose adapter changed in a step
(``refresh``, called from the wrapper's ``update_metadata``). The stacked ``A`` tensors are
learnt from the custom op's eager calls (``observe``): the op body is opaque to torch.compile, so
this bookkeeping never enters a traced graph. A stacked ``A`` first seen after ranks were lowered
puts every slot back to the full rank until the next refresh.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import torch

from .reference import stacked_view

logger = logging.getLogger(__name__)

_TRACKERS: dict[int, SlotRanks] = {}
_LOCK = threading.Lock()


def detect_rank(a_stack: torch.Tensor, slot: int) -> torch.Tensor:
    """0-d int32 device tensor: one past the last non-zero row of ``A[slot]`` (0 if none)."""
    rows = stacked_view(a_stack)[slot]
    nonzero = (rows != 0).any(dim=1)
    positions = torch.arange(1, rows.shape[0] + 1, device=rows.device, dtype=torch.int32)
    return (positions * nonzero.to(torch.int32)).max()


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class SlotRanks:
    """The rank tensor of one Punica wrapper and the stacked weights it was derived from."""

    def __init__(self, num_slots: int, max_rank: int, device: torch.device | str) -> None:
        self.max_rank = max_rank
        self.ranks = torch.full((num_slots,), max_rank, dtype=torch.int32, device=device)
        self._seen: dict[int, torch.Tensor] = {}
        self._slot_ids: list[int | None] = [None] * num_slots
        self._stale = False
        with _LOCK:
            _TRACKERS[self.ranks.data_ptr()] = self

    def observe(self, lora_a: Sequence[torch.Tensor]) -> None:
        """Remember stacked ``A`` tensors; a new one resets the ranks to the full rank."""
        new = [t for t in lora_a if t.data_ptr() not in self._seen]
        if not new:
            return
        for t in new:
            self._seen[t.data_ptr()] = t
        if _capturing():
            self._stale = True
            return
        self.ranks.fill_(self.max_rank)
        self._stale = True

    def refresh(self, lora_index_to_id: Sequence[int | None]) -> None:
        """Recompute the ranks of the slots whose adapter changed (all of them when stale)."""
        ids = list(lora_index_to_id)[: self.ranks.shape[0]]
        ids += [None] * (self.ranks.shape[0] - len(ids))
        if not self._seen:
            self._slot_ids = ids
            return
        changed = [
            s for s, lora_id in enumerate(ids) if self._stale or lora_id != self._slot_ids[s]
        ]
        for slot in changed:
            if ids[slot] is None:
                continue
            best = torch.zeros((), dtype=torch.int32, device=self.ranks.device)
            for a_stack in self._seen.values():
                if stacked_view(a_stack).shape[0] > slot:
                    best = torch.maximum(best, detect_rank(a_stack, slot))
            self.ranks[slot : slot + 1].copy_(best.view(1))
        self._slot_ids = ids
        self._stale = False
        if changed:
            logger.debug("refreshed LoRA ranks of slots %s", changed)


def observe(slot_rank: torch.Tensor, lora_a: Sequence[torch.Tensor]) -> None:
    """Forward stacked ``A`` tensors to the tracker owning ``slot_rank`` (if any)."""
    tracker = _TRACKERS.get(slot_rank.data_ptr())
    if tracker is not None and tracker.ranks is slot_rank:
        tracker.observe(lora_a)
