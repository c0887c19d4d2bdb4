"""The fused multi-LoRA Triton kernel: shrink and expand in one launch per wrapped linear.

One launch does all of a wrapped linear's LoRA, every slice of a packed layer (qkv, gate_up)
included. Its programs take jobs from a ticket counter, in this order:

1. shrink jobs, one per (token tile, slice, K chunk): gather the tile's token rows of ``x``,
   multiply by the chunk of ``A[slot]``, store the float32 partial and count the arrival for
   the (tile, slice) pair;
2. expand jobs, one per (token tile, output tile group): load B and y first, wait for the
   pair, sum its partials in a fixed order (deterministic, no float atomics), scale, round to
   the weights' dtype, multiply by ``B[slot]`` and add into ``y``.
Both take a tile's adapter at one of two rank widths, chosen per tile from its real rank (read
from the tile record): ``BLOCK_R`` rows when the rank fits (a rank-16 adapter costs the same
under any ``max_lora_rank``), else the whole padded rank ``RANK_PAD``, in steps no larger than
the narrow ones (see ``kernel.run_job``). The rank-sized scratch tiles are ``RANK_PAD`` wide. At
decode sizes a wide tile's jobs may be split (``WIDE_SPLIT`` parts, or half as many): each
shrink job takes a part of its rank rows, each expand job a part of a narrow job's columns; the
kernel picks the most parts for which all wide jobs fit ``split_jobs``. The work list puts the
wide tiles first, and the tickets go: wide tiles' shrink jobs, narrow ones', wide expand jobs,
narrow ones'. When re-reading the partials in every expand job would cost too much (wide layers
at high rank), the shrink job that arrives last sums them once into a rank-sized intermediate
and raises the pair's ready flag instead (``REDUCE_IN_EXPAND`` off; chosen for each rank width,
since a wide tile's partials are ``RANK_PAD / BLOCK_R`` times larger:
``WIDE_REDUCE_IN_EXPAND``).

Tickets are taken in order, so every shrink job is held by a running program before any expand
job is handed out: the wait cannot deadlock whatever the grid or the occupancy. Only as many
programs as the step has jobs take tickets (the grid is sized for the most a step can have), and
tickets are relaxed atomics: they order nothing but themselves. The taker that takes the very
last ticket (all others have then finished) resets the counters to zero, so no memset is needed
before the next launch. The intermediate never leaves L2-sized scratch (a few KiB per tile);
there is no separate buffer-zeroing launch and no split-K atomics on data.

The grid is sized from static values only (token count of the call, slot count, layer widths);
the number of tiles present this step is read from the work list on the device, so a CUDA
graph captured once stays valid for every step.

Written for both Triton 3.6 (GPU hosts) and 3.9 (the CPU interpreter of CI). The 3.9
interpreter miscomputes ``tl.dot`` on bfloat16 operands, so on CPU bfloat16 products are taken in
float32 after the same rounding points (``UPCAST_DOT``); the GPU path multiplies in bfloat16.

Modules: :mod:`.records` (tile records, job counts, the counters' reset), :mod:`.scratch` (the
partials and intermediate shared by both job kinds, the product), :mod:`.shrink` and
:mod:`.expand` (the two job kinds), :mod:`.kernel` (the ticket loop), :mod:`.flavours` (JIT,
interpreter, ahead of time); the launcher is :mod:`hi_moe_lora.kernels.triton_kernel`.
"""
