"""Some slots' narrow copies of many stacked ``B`` tensors rewritten in one Triton launch.

A narrow copy (:mod:`.narrow_b`) holds every slot's first :data:`.config.RANK_CHUNK` rank columns
of one stacked ``B``. When an adapter enters a slot, the slot's rows of every copy are rewritten
from vLLM's ``B``; tensor by tensor that is an ``index_select`` and an ``index_copy_`` for each of
the 224 stacked ``B`` tensors of a Llama-3-8B-shaped model, about 450 launches in the step that
first serves the adapter. Here one launch copies them all: sources and copies are described by a
table of element offsets from the lowest-addressed of each (:mod:`.tensor_table`), with their
strides and sizes, and every program copies one block of rows of one slot of one tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from .config import RANK_CHUNK
from .kernel_flavour import compile_ahead
from .reference_loops import stacked_view
from .tensor_table import device_table, element_offsets
from .warm_compile import launch, require_compiling

#: output rows a program copies
BLOCK_ROWS = 256
#: per tensor: the source's offset, slot and row strides; the copy's; the slots and rows
TABLE_COLUMNS = 8


def _copy_kernel(  # type: ignore[no-untyped-def]
    src_ptr,
    dst_ptr,
    table_ptr,
    slots_ptr,
    TABLE_COLUMNS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    COLUMNS: tl.constexpr,
):
    """Program (tensor, slot, row block): ``copy[slot, rows] = B[slot, rows, :COLUMNS]``."""
    tensor = tl.program_id(0)
    which = tl.program_id(1)
    block = tl.program_id(2)
    entry = table_ptr + tensor * TABLE_COLUMNS
    src_offset = tl.load(entry)
    src_slot_stride = tl.load(entry + 1)
    src_row_stride = tl.load(entry + 2)
    dst_offset = tl.load(entry + 3)
    dst_slot_stride = tl.load(entry + 4)
    dst_row_stride = tl.load(entry + 5)
    slots_in_tensor = tl.load(entry + 6)
    rows_in_tensor = tl.load(entry + 7)
    slot = tl.load(slots_ptr + which).to(tl.int64)
    has_slot = slot < slots_in_tensor  # else no row is copied (the interpreter cannot & a scalar)
    rows = block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < tl.where(has_slot, rows_in_tensor, 0)
    slot = tl.where(has_slot, slot, 0)
    rows64 = rows.to(tl.int64)[:, None]
    cols = tl.arange(0, COLUMNS)[None, :]
    mask = row_ok[:, None] & (cols < COLUMNS)  # (always true: the mask at the tile's full shape)
    src = src_ptr + src_offset + slot * src_slot_stride + rows64 * src_row_stride + cols
    dst = dst_ptr + dst_offset + slot * dst_slot_stride + rows64 * dst_row_stride + cols
    tl.store(dst, tl.load(src, mask=mask, other=0.0), mask=mask)


@functools.cache
def _compiled() -> Any:
    return triton.jit(_copy_kernel)


@functools.cache
def _interpreted() -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(_copy_kernel)


def compile_for_target(arch: int = 90, dtype: str = "bf16") -> Any:
    """The copy compiled ahead of time for CUDA ``sm_<arch>`` (no GPU needed; tests)."""
    constexprs = {"TABLE_COLUMNS": TABLE_COLUMNS, "BLOCK_ROWS": BLOCK_ROWS, "COLUMNS": RANK_CHUNK}
    types = {"src_ptr": f"*{dtype}", "dst_ptr": f"*{dtype}", "table_ptr": "*i64"}
    return compile_ahead(_compiled(), types, constexprs, arch, default_type="*i32")


class NarrowCopy:
    """One launch's description of fixed pairs of stacked ``B`` tensors and their narrow copies."""

    def __init__(
        self,
        pairs: Sequence[tuple[torch.Tensor, torch.Tensor]],
        src_base: torch.Tensor,
        dst_base: torch.Tensor,
        table: torch.Tensor,
    ) -> None:
        self.pairs = list(pairs)  # kept alive: the table holds their addresses
        self.src_base = src_base
        self.dst_base = dst_base
        self.table = table
        self.row_blocks = triton.cdiv(max(copy.shape[1] for _, copy in pairs), BLOCK_ROWS)

    @classmethod
    def build(cls, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> NarrowCopy | None:
        """The copy of ``pairs`` (stacked ``B`` ``[slots, (1,) out, rank]`` with unit-strided
        rank columns, and its narrow copy ``[slots, out, RANK_CHUNK]``), or None when they do
        not fit one table (see :func:`.tensor_table.element_offsets`)."""
        if not pairs:
            return None
        sources = [stacked_view(b) for b, _ in pairs]
        copies = [copy for _, copy in pairs]
        if any(v.stride(2) != 1 or v.shape[2] < RANK_CHUNK for v in sources):
            return None
        if any(c.stride(2) != 1 or c.shape[2] != RANK_CHUNK for c in copies):
            return None
        if any(v.shape[:2] != c.shape[:2] for v, c in zip(sources, copies, strict=True)):
            return None
        src_located = element_offsets(sources)
        dst_located = element_offsets(copies)
        if src_located is None or dst_located is None or sources[0].dtype != copies[0].dtype:
            return None
        (src_base, src_offsets), (dst_base, dst_offsets) = src_located, dst_located
        rows = [
            [so, *v.stride()[:2], do, *c.stride()[:2], *c.shape[:2]]
            for so, v, do, c in zip(src_offsets, sources, dst_offsets, copies, strict=True)
        ]
        return cls(pairs, src_base, dst_base, device_table(rows, src_base.device))

    def copy(self, slots: Sequence[int]) -> None:
        """Rewrite ``slots``' rows of every copy from its ``B`` (one launch)."""
        device = self.src_base.device
        wanted = torch.tensor(list(slots), dtype=torch.int32).to(device)
        kernel = _compiled() if device.type == "cuda" else _interpreted()
        grid = (len(self.pairs), len(slots), self.row_blocks)
        launch(
            kernel, grid, self.src_base, self.dst_base, self.table, wanted,
            TABLE_COLUMNS=TABLE_COLUMNS, BLOCK_ROWS=BLOCK_ROWS, COLUMNS=RANK_CHUNK,
        )  # fmt: skip

    def compile_variant(self) -> None:
        """Inside :func:`.warm_compile.compiling`: compile the variant every copy of these
        pairs launches, running nothing (see :meth:`.rank_scan.RankScan.compile_variant`)."""
        require_compiling("compile_variant()")
        self.copy([0])
