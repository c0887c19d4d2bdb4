"""The real ranks of some slots over many stacked ``A`` tensors, in one Triton launch.

A slot's rank is one past the last row of ``A[slot]`` that is not all zero, maximised over every
stacked ``A`` of the model (:mod:`.ranks`). Worked out tensor by tensor, that is seven small torch
kernels for each of the 224 stacked ``A`` tensors of a Llama-3-8B-shaped model: about 1,570
launches every time an adapter enters a slot, all of them in the step that first serves it (under
slot churn, several a second; 18 ms on an H200 host against 0.3 ms in one launch,
``benchmarks/kernels/bench_slot_refresh.py``). Here one launch reads them all: the tensors are
described to the kernel by a table of element offsets from the lowest-addressed one
(:mod:`.tensor_table`), with their slot and row strides and their sizes, so the kernel needs one
pointer argument whatever the number of tensors. Every program scans one tensor's chunk of
:data:`ROWS` rank rows for one slot and stores the rank that chunk shows; a reduction over
tensors and chunks gives each slot's rank.

The table is built once per set of tensors (:class:`RankScan`), since vLLM allocates its stacked
weights once. Tensors must share one dtype and lie at whole elements from each other (vLLM's do);
:meth:`RankScan.build` returns None otherwise, and the caller scans tensor by tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from .kernel_flavour import compile_ahead
from .reference_loops import stacked_view
from .tensor_table import device_table, element_offsets
from .warm_compile import launch, require_compiling

#: rank rows a program scans
ROWS = 16
#: columns a program reads per step
BLOCK_COLS = 256
#: per tensor: element offset from the base, slot stride, row stride, slots, rows, width
TABLE_COLUMNS = 6


def _scan_kernel(  # type: ignore[no-untyped-def]
    base_ptr,
    table_ptr,
    slots_ptr,
    out_ptr,
    num_slots,
    num_chunks,
    TABLE_COLUMNS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    """Program (tensor, slot, chunk): one past the last non-zero row of the chunk, or 0.

    The reductions name Triton's own combine functions (what ``tl.sum`` and ``tl.max`` use):
    those two JIT functions cannot be called by the interpreter unless it was on when Triton was
    imported, but it recognises them in ``tl.reduce``."""
    tensor = tl.program_id(0)
    which = tl.program_id(1)
    chunk = tl.program_id(2)
    entry = table_ptr + tensor * TABLE_COLUMNS
    offset = tl.load(entry)
    slot_stride = tl.load(entry + 1)
    row_stride = tl.load(entry + 2)
    slots_in_tensor = tl.load(entry + 3)
    rows_in_tensor = tl.load(entry + 4)
    width = tl.load(entry + 5)
    slot = tl.load(slots_ptr + which).to(tl.int64)
    rows = chunk * ROWS + tl.arange(0, ROWS)
    has_slot = slot < slots_in_tensor  # else no row is read (the interpreter cannot & a scalar)
    row_ok = rows < tl.where(has_slot, rows_in_tensor, 0)
    slot = tl.where(has_slot, slot, 0)
    start = base_ptr + offset + slot * slot_stride + rows.to(tl.int64)[:, None] * row_stride
    nonzero = tl.full((ROWS,), 0, tl.int32)
    for col in range(0, width, BLOCK_COLS):
        cols = col + tl.arange(0, BLOCK_COLS)
        mask = row_ok[:, None] & (cols[None, :] < width)
        values = tl.load(start + cols[None, :], mask=mask, other=0.0)
        nonzero += tl.reduce((values != 0.0).to(tl.int32), 1, tl.standard._sum_combine)
    ranks = tl.where(nonzero > 0, rows + 1, 0)
    out = (tensor * num_slots + which) * num_chunks + chunk
    tl.store(out_ptr + out, tl.reduce(ranks, 0, tl.standard._elementwise_max))


#: Integer arguments Triton must not specialize on their value: the count of slots refreshed
#: at once varies with each step's new adapters, and 1, a multiple of 16 and any other count
#: would each compile their own variant, some in the middle of serving (an H200 start compiled
#: two before this; benchmarks/README.md, twenty-fourth window).
UNSPECIALIZED = ("num_slots", "num_chunks")


@functools.cache
def _compiled() -> Any:
    return triton.jit(_scan_kernel, do_not_specialize=UNSPECIALIZED)


def compile_for_target(arch: int = 90, dtype: str = "bf16") -> Any:
    """The scan compiled ahead of time for CUDA ``sm_<arch>`` (no GPU needed; tests)."""
    constexprs = {"TABLE_COLUMNS": TABLE_COLUMNS, "ROWS": ROWS, "BLOCK_COLS": BLOCK_COLS}
    types = {"base_ptr": f"*{dtype}", "table_ptr": "*i64", "slots_ptr": "*i32", "out_ptr": "*i32"}
    return compile_ahead(_compiled(), types, constexprs, arch)


@functools.cache
def _interpreted() -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(_scan_kernel)


class RankScan:
    """One launch's description of a fixed set of stacked ``A`` tensors."""

    def __init__(self, tensors: Sequence[torch.Tensor], base: torch.Tensor, table: torch.Tensor):
        self.tensors = list(tensors)  # kept alive: the table holds their addresses
        self.base = base
        self.table = table
        self.num_chunks = triton.cdiv(max(stacked_view(t).shape[1] for t in tensors), ROWS)

    @classmethod
    def build(cls, tensors: Sequence[torch.Tensor]) -> RankScan | None:
        """The scan of ``tensors`` (stacked ``A``: ``[slots, (1,) rows, in]``, columns unit
        strided), or None when they do not fit one table (none, several dtypes or devices, an
        address not a whole element from the others, strided columns)."""
        located = element_offsets(tensors)
        views = [stacked_view(t) for t in tensors]
        if located is None or any(v.shape[2] > 1 and v.stride(2) != 1 for v in views):
            return None
        base, offsets = located
        rows = [[o, *v.stride()[:2], *v.shape] for o, v in zip(offsets, views, strict=True)]
        table = device_table(rows, base.device)
        return cls(tensors, base, table)

    def ranks(self, slots: Sequence[int]) -> torch.Tensor:
        """Each of ``slots``' rank over every tensor that has the slot, as an int32 device
        tensor (one launch and its reduction)."""
        out = self._launch(slots)
        return out.amax(dim=(0, 2))

    def compile_variant(self) -> None:
        """Inside :func:`.warm_compile.compiling`: compile the variant every scan of these
        tensors launches (whatever its slots: their count is not specialized), running nothing;
        vLLM's first adapters then find it compiled instead of pausing its capture for it."""
        require_compiling("compile_variant()")
        self._launch([0])

    def _launch(self, slots: Sequence[int]) -> torch.Tensor:
        """The scan's launch for ``slots`` (through :func:`.warm_compile.launch`); its output,
        one rank per (tensor, slot, chunk)."""
        count = len(slots)
        device = self.base.device
        wanted = torch.tensor(list(slots), dtype=torch.int32).to(device)
        out = torch.empty(
            (len(self.tensors), count, self.num_chunks), dtype=torch.int32, device=device
        )
        kernel = _compiled() if device.type == "cuda" else _interpreted()
        grid = (len(self.tensors), count, self.num_chunks)
        launch(
            kernel, grid, self.base, self.table, wanted, out, count, self.num_chunks,
            TABLE_COLUMNS=TABLE_COLUMNS, ROWS=ROWS, BLOCK_COLS=BLOCK_COLS,
        )  # fmt: skip
        return out
