"""Narrow copies of vLLM's stacked B weights, so a small adapter's B is read in whole rows.

vLLM stores B as ``(slots, out, max_lora_rank)``. The kernel's narrow tiles (adapters of rank at
most :data:`.config.RANK_CHUNK`) read only the first ``RANK_CHUNK`` columns of each row: under
``--max-lora-rank 64`` that is 32 bytes of every 128-byte row, and on an H100 gate_up with eight
rank-16 adapters took 18.7 µs against 14.5 µs under max rank 16 (15.3 µs with B in whole rows;
``benchmarks/README.md``). A narrow copy is ``(slots, out, RANK_CHUNK)``: every slot's first
``RANK_CHUNK`` rank columns of B, contiguous. The kernel's narrow tiles read it, wide tiles
read vLLM's B.

It costs ``RANK_CHUNK / max_lora_rank`` of B's memory again (a quarter under max rank 64), so
there are copies only where B is stored wider than ``RANK_CHUNK``, and only while enabled
(``HI_MOE_LORA_NARROW_B=off`` in the plugin turns them off).

A copy is made on the first sight of a stacked B (zeroed; the rank tracker is then stale, so no
tile is narrow until it refreshes) and rewritten for a slot whenever the ranks of that slot are
recomputed (:class:`.ranks.SlotRanks`, on a new adapter in the slot), which vLLM does after
writing the adapter's weights; on CUDA in one launch for every copy (:mod:`.narrow_copy`). So
whenever the ranks call a slot narrow, its copy holds what vLLM's B holds in those columns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import torch

from .config import RANK_CHUNK
from .narrow_copy import NarrowCopy
from .reference_loops import stacked_view

logger = logging.getLogger(__name__)


class NarrowB:
    """The narrow copies of the stacked B tensors one Punica wrapper has seen."""

    def __init__(self, enabled: bool = True, one_launch: bool = False) -> None:
        """``one_launch``: rewrite every copy's slots in one launch (:mod:`.narrow_copy`)."""
        self.enabled = enabled
        self.one_launch = one_launch
        self._copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._launch: NarrowCopy | None = None
        self._launch_copies = 0  # how many of ``_copies`` the launch (or its refusal) describes

    @property
    def nbytes(self) -> int:
        """Memory the copies hold."""
        return sum(copy.numel() * copy.element_size() for _, copy in self._copies.values())

    def observe(self, lora_b: Sequence[torch.Tensor]) -> bool:
        """Make copies of the stacked B tensors not seen before; True if one was made."""
        made = False
        if not self.enabled:
            return made
        for b in lora_b:
            # Called on every op call: the checks need no view (B's last dimension is its rank).
            if b.shape[-1] <= RANK_CHUNK or b.data_ptr() in self._copies:
                continue
            view = stacked_view(b)
            copy = torch.zeros(
                (view.shape[0], view.shape[1], RANK_CHUNK), dtype=b.dtype, device=b.device
            )
            self._copies[b.data_ptr()] = (b, copy)
            made = True
        return made

    def copies_of(self, lora_b: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        """The narrow copies of ``lora_b``'s slices, or None unless every slice has one."""
        copies = []
        for b in lora_b:
            entry = self._copies.get(b.data_ptr())
            if entry is None or entry[0].shape != b.shape or entry[0].dtype != b.dtype:
                return None
            copies.append(entry[1])
        return copies

    def compile_refresh(self) -> None:
        """Inside :func:`.warm_compile.compiling`: compile the one-launch rewrite of the copies
        made so far (nothing where there are none or the rewrite goes tensor by tensor)."""
        launch = self._current_launch() if self.one_launch and self._copies else None
        if launch is not None:
            launch.compile_variant()

    def _current_launch(self) -> NarrowCopy | None:
        """The one-launch rewrite of every copy (None where it cannot take them), described once
        per set of copies."""
        if self._launch_copies != len(self._copies):
            self._launch = NarrowCopy.build(list(self._copies.values()))
            self._launch_copies = len(self._copies)
        return self._launch

    def refresh(self, slots: Iterable[int]) -> None:
        """Rewrite ``slots``' rows of every copy from vLLM's B (after it wrote new adapters)."""
        wanted = list(slots)
        if not wanted or not self._copies:
            return
        if self.one_launch:
            launch = self._current_launch()
            if launch is not None:
                launch.copy(wanted)
                return
        index = torch.tensor(wanted, dtype=torch.long)
        for b, copy in self._copies.values():
            view = stacked_view(b)
            index = index.to(view.device)
            copy.index_copy_(0, index, view[:, :, :RANK_CHUNK].index_select(0, index))
