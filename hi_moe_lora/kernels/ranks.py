"""Real per-slot adapter ranks, so the kernel reads an adapter at its rank, not ``max_lora_rank``.

vLLM zero-pads every adapter to ``max_lora_rank`` in the stacked weights. The rank of a slot is
taken as one past the last row of ``A[slot]`` that is not all zero, maximised over every stacked
``A`` seen so far. Rows past that index are zero, so skipping them is exact whatever the
adapter: the detection never changes a result, it only saves reads.

Ranks start at ``max_lora_rank`` (always exact). ``refresh`` (from the wrapper's
``update_metadata``, eager, before the step's forward) recomputes on the device the ranks of the
slots whose adapter changed and, only then, copies them to the host, where the work list embeds
them in its tile records. The stacked ``A`` tensors are learnt from the custom op's eager calls
(``observe``; the op body is opaque to torch.compile, so this bookkeeping never enters a traced
graph). While weights have been seen that the ranks do not yet account for, the tracker is
``stale`` and the op runs every adapter at the full rank.

On a GPU the ranks of the changed slots are scanned in one launch over every stacked ``A``
(:mod:`.rank_scan`), and their narrow copies of ``B`` rewritten in one launch (:mod:`.narrow_copy`):
tensor by tensor that was about 1,570 and 450 small launches per new adapter on a
Llama-3-8B-shaped model, all on the host's critical path of the step that first serves it.
``HI_MOE_LORA_SLOT_REFRESH`` chooses (``auto``: both on CUDA, neither on a CPU; ``1``: both;
``0``: neither, for A/Bs).

The tracker also keeps the narrow copies of the stacked B tensors (:mod:`.narrow_b`), rewritten
for exactly the slots whose ranks it recomputes, so they hold the adapters the ranks describe.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

import torch

from .config import RANK_CHUNK
from .narrow_b import NarrowB
from .rank_scan import RankScan
from .reference_loops import stacked_view

logger = logging.getLogger(__name__)

ENV_SLOT_REFRESH = "HI_MOE_LORA_SLOT_REFRESH"
_TRACKERS: dict[int, SlotRanks] = {}
_LOCK = threading.Lock()


def detect_rank(a_stack: torch.Tensor, slot: int) -> torch.Tensor:
    """0-d int32 device tensor: one past the last non-zero row of ``A[slot]`` (0 if none)."""
    rows = stacked_view(a_stack)[slot]
    nonzero = (rows != 0).any(dim=1)
    positions = torch.arange(1, rows.shape[0] + 1, device=rows.device, dtype=torch.int32)
    return (positions * nonzero.to(torch.int32)).max()


def one_launch_default(env_value: str | None, device: torch.device | str) -> tuple[bool, bool]:
    """Whether a slot's refresh scans its ranks and rewrites its narrow copies in one launch
    each, from ``HI_MOE_LORA_SLOT_REFRESH``: ``auto`` (or unset) both on CUDA, ``1`` both, ``0``
    neither."""
    value = (env_value or "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True, True
    if value in ("0", "false", "no", "off"):
        return False, False
    if value not in ("", "auto"):
        raise ValueError(f"{ENV_SLOT_REFRESH}={env_value!r}: expected auto, 0 or 1")
    on_gpu = torch.device(device).type == "cuda"
    return on_gpu, on_gpu


class SlotRanks:
    """The ranks of one Punica wrapper's slots and the stacked weights they come from."""

    def __init__(
        self,
        num_slots: int,
        max_rank: int,
        device: torch.device | str,
        narrow_b: bool = True,
        one_launch: bool | None = None,
    ) -> None:
        """``one_launch``: scan the ranks and rewrite the narrow copies in one launch each
        (:mod:`.rank_scan`, :mod:`.narrow_copy`); None: as :func:`one_launch_default` reads
        the environment."""
        self.max_rank = max_rank
        if one_launch is None:
            one_launch, copy_in_one = one_launch_default(os.environ.get(ENV_SLOT_REFRESH), device)
        else:
            copy_in_one = one_launch
        self.narrow_b = NarrowB(enabled=narrow_b, one_launch=copy_in_one)
        self.ranks = torch.full((num_slots,), max_rank, dtype=torch.int32, device=device)
        self.host: list[int] = [max_rank] * num_slots
        self.stale = False
        self._seen: dict[int, torch.Tensor] = {}
        self._slot_ids: list[int | None] = [None] * num_slots
        self._one_launch = one_launch
        self._scan: RankScan | None = None
        self._scanned_tensors = 0  # how many of ``_seen`` the scan (or its refusal) describes
        with _LOCK:
            _TRACKERS[self.ranks.data_ptr()] = self

    def observe(self, lora_a: Sequence[torch.Tensor], lora_b: Sequence[torch.Tensor] = ()) -> None:
        """Remember stacked ``A`` tensors and copy ``B`` ones narrow; a new one of either makes
        the ranks stale until ``refresh``."""
        for t in lora_a:
            if t.data_ptr() not in self._seen:
                self._seen[t.data_ptr()] = t
                self.stale = True
        if self.narrow_b.observe(lora_b):
            self.stale = True

    def refresh(self, lora_index_to_id: Sequence[int | None]) -> list[int]:
        """Recompute the ranks of the slots whose adapter changed (all when stale); host list."""
        ids = list(lora_index_to_id)[: self.ranks.shape[0]]
        ids += [None] * (self.ranks.shape[0] - len(ids))
        if not self._seen:
            self._slot_ids = ids
            return self.host
        changed = [s for s, i in enumerate(ids) if self.stale or i != self._slot_ids[s]]
        live = [s for s in changed if ids[s] is not None]
        if live:
            self._recompute(live)
        was_stale = self.stale
        self.narrow_b.refresh(live)
        self._slot_ids = ids
        self.stale = False
        if changed:
            self.host = [int(r) for r in self.ranks.tolist()]
            logger.debug("LoRA ranks of slots %s refreshed: %s", changed, self.host)
        if was_stale and self.narrow_b.nbytes:
            logger.info(
                "narrow B copies for rank <= %d adapters: %.1f MiB", RANK_CHUNK,
                self.narrow_b.nbytes / 2**20,
            )  # fmt: skip
        return self.host

    def compile_refresh(self) -> None:
        """Inside :func:`.warm_compile.compiling` (the kernel warm-up): compile the one-launch
        rank scan and narrow-copy rewrite for the stacks seen so far, running nothing and
        changing no state. Without it they compiled when vLLM's capture loaded its first
        stand-in adapters, pausing the capture (an H200 start at max rank 64 compiled four;
        benchmarks/README.md, twenty-fourth window). The scan it describes is the one the next
        refresh launches."""
        scan = self._current_scan() if self._one_launch and self._seen else None
        if scan is not None:
            scan.compile_variant()
        self.narrow_b.compile_refresh()

    def _current_scan(self) -> RankScan | None:
        """The one-launch scan of every stacked ``A`` seen (None where it cannot take them),
        described once per set of tensors."""
        if self._scanned_tensors != len(self._seen):
            self._scan = RankScan.build(list(self._seen.values()))
            self._scanned_tensors = len(self._seen)
        return self._scan

    def _recompute(self, slots: list[int]) -> None:
        """Write the ranks of ``slots`` (holding adapters) from every stacked ``A`` seen."""
        if self._one_launch:
            scan = self._current_scan()
            if scan is not None:
                index = torch.tensor(slots, dtype=torch.long).to(self.ranks.device)
                self.ranks.index_copy_(0, index, scan.ranks(slots))
                return
        for slot in slots:
            best = torch.zeros((), dtype=torch.int32, device=self.ranks.device)
            for a_stack in self._seen.values():
                if stacked_view(a_stack).shape[0] > slot:
                    best = torch.maximum(best, detect_rank(a_stack, slot))
            self.ranks[slot : slot + 1].copy_(best.view(1))


def tracker_for(slot_rank: torch.Tensor) -> SlotRanks | None:
    """The tracker owning ``slot_rank``, if any."""
    tracker = _TRACKERS.get(slot_rank.data_ptr())
    return tracker if tracker is not None and tracker.ranks is slot_rank else None
