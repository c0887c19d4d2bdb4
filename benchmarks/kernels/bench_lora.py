"""Microbenchmark: our fused LoRA linear vs vLLM's lora_shrink + lora_expand (GPU only).

Per-layer set of a Llama-3-8B decoder layer (qkv 4096->4096+1024+1024, o 4096->4096, gate_up
4096->2x14336, down 14336->4096), bf16, 8 adapter slots. For each case both implementations run
inside one CUDA graph over a rotating pool of copies (inputs, outputs and weights) larger than
L2, so every call reads from HBM; the figure is the median over replays divided by the pool size.
vLLM's side is what ``PunicaWrapperGPU.add_lora_linear`` does: float32 buffer zeroed by the
shrink op, shrink, expand. The memory floor (x read once, y read+written, the active adapters'
weights read once at their real rank) is computed at ``--hbm-tbs``. Before timing, both results
are checked against the float64 reference.

Usage: python benchmarks/kernels/bench_lora.py --out DIR [--quick]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.kernels.llama_shapes import PROJECTIONS  # noqa: E402
from hi_moe_lora.kernels.reference_loops import lora_linear_reference  # noqa: E402
from hi_moe_lora.kernels.triton_kernel import launch_fused_lora  # noqa: E402
from hi_moe_lora.kernels.worklist import WorkListBuffers  # noqa: E402

SHAPES: dict[str, tuple[int, list[int]]] = {
    name: (k, list(slices)) for name, (k, slices) in PROJECTIONS.items()
}
SLOTS = 8
Copy = tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor]]
L2_BYTES = 50 * 2**20


@dataclass
class Result:
    shape: str
    m: int
    rank: int
    max_rank: int
    adapters: int
    ours_us: float
    vllm_us: float
    floor_us: float
    ours_err: float
    vllm_err: float
    ref_max: float


def parse_case(text: str) -> tuple[str, int, int, int, int]:
    """``shape:M:rank[/max_rank]:adapters`` -> (shape, M, rank, max rank, adapters).

    ``ab_kernels.py`` also takes ``rank/max_rank b<r>`` (``16/64b16``): B stored at rank ``r``
    beside A padded to the max rank (:func:`parse_case_with_stored_b`); vLLM's kernels cannot
    take that layout, so this benchmark refuses it."""
    case, b_rank = parse_case_with_stored_b(text)
    if b_rank is not None:
        raise ValueError(f"{text}: a B stored at its own rank is for ab_kernels.py only")
    return case


def parse_case_with_stored_b(text: str) -> tuple[tuple[str, int, int, int, int], int | None]:
    """A case as :func:`parse_case` gives it, and the rank B is stored at (``.../<max>b<r>``;
    None: the max rank)."""
    shape, m, ranks, adapters = text.split(":")
    rank, _, padded = ranks.partition("/")
    max_rank, _, stored = padded.partition("b")
    case = (shape, int(m), int(rank), int(max_rank or rank), int(adapters))
    return case, int(stored) if stored else None


def _slots_for(m: int, adapters: int) -> torch.Tensor:
    if adapters == 1:
        return torch.zeros(m, dtype=torch.int64)
    return torch.arange(m, dtype=torch.int64) % adapters


def _make_copy(
    k: int,
    widths: list[int],
    rank: int,
    max_rank: int,
    m: int,
    gen: torch.Generator,
    b_rank: int | None = None,
) -> Copy:
    """One copy of a case's tensors; B stored at ``b_rank`` (at least ``rank``) when given."""
    dev = "cuda"
    b_cols = b_rank or max_rank
    if not rank <= b_cols <= max_rank:
        raise ValueError(f"B stored at rank {b_cols}: needs {rank} <= it <= {max_rank}")
    x = torch.randn(m, k, generator=gen, device=dev).to(torch.bfloat16)
    y = torch.randn(m, sum(widths), generator=gen, device=dev).to(torch.bfloat16)
    a, b = [], []
    for n in widths:
        at = torch.zeros(SLOTS, 1, max_rank, k, device=dev, dtype=torch.bfloat16)
        bt = torch.zeros(SLOTS, 1, n, b_cols, device=dev, dtype=torch.bfloat16)
        at[:, :, :rank] = (torch.randn(SLOTS, 1, rank, k, generator=gen, device=dev) / k**0.5).to(
            torch.bfloat16
        )
        bt[:, :, :, :rank] = (
            torch.randn(SLOTS, 1, n, rank, generator=gen, device=dev) / rank**0.5
        ).to(torch.bfloat16)
        a.append(at)
        b.append(bt)
    return x, y, a, b


def _copy_pool(
    k: int,
    widths: list[int],
    rank: int,
    max_rank: int,
    m: int,
    gen: torch.Generator,
    b_rank: int | None = None,
) -> list[Copy]:
    """Copies of one case's tensors, together over twice L2, so every call reads HBM."""
    one = _make_copy(k, widths, rank, max_rank, m, gen, b_rank)
    per_copy = sum(t.numel() * t.element_size() for t in [one[0], one[1], *one[2], *one[3]])
    pool = max(2, min(64, -(-2 * L2_BYTES // per_copy)))
    return [one] + [_make_copy(k, widths, rank, max_rank, m, gen, b_rank) for _ in range(pool - 1)]


def narrow_kwargs(launch: Any, b: list[torch.Tensor]) -> dict[str, Any]:
    """What serving passes ``launch`` beside B: the narrow copies the plugin keeps of it
    (:class:`hi_moe_lora.kernels.narrow_b.NarrowB`, every slot filled; none for B stored at
    16 or less); nothing for a launcher from before them (``ab_kernels.py`` times older trees)."""
    if "narrow_b" not in inspect.signature(launch).parameters:
        return {}
    from hi_moe_lora.kernels.narrow_b import NarrowB  # the timed tree's own (ab_kernels.py)

    narrow = NarrowB()
    narrow.observe(b)
    narrow.refresh(range(b[0].shape[0]))
    copies = narrow.copies_of(b)
    return {} if copies is None else {"narrow_b": copies}


def _graph_time(fn_list: list[Any], replays: int) -> float:
    """Median µs per call of the captured sequence."""
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fn_list:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fn_list:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / len(fn_list))
    return float(statistics.median(times))


def run_case(
    shape: str,
    m: int,
    rank: int,
    max_rank: int,
    adapters: int,
    replays: int,
    hbm: float,
    with_vllm: bool = True,
) -> Result:

    k, widths = SHAPES[shape]
    adapters = min(adapters, m)
    slots = _slots_for(m, adapters)
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + rank)
    copies = _copy_pool(k, widths, rank, max_rank, m, gen)
    one = copies[0]

    work = WorkListBuffers(max(m, 16), SLOTS, "cuda")
    work.update(slots.numpy(), [rank] * SLOTS)
    margs: Any = None
    if with_vllm:
        from vllm.lora.ops.triton_ops import LoRAKernelMeta

        meta = LoRAKernelMeta.make(SLOTS, max(m, 16), "cuda")
        meta.prepare_tensors(slots.to(device="cuda"))
        margs = meta.meta_args(m, False)
    buffers = [
        torch.empty(len(widths), m, max_rank, dtype=torch.float32, device="cuda") for _ in copies
    ]

    def ours(c: Any) -> Any:
        x, y, a, b = c
        kw = narrow_kwargs(launch_fused_lora, b)
        return lambda: launch_fused_lora(y, x, a, b, work.tiles, work.counters, 1.0, 0, True, **kw)

    def vllm(c: Any, buf: torch.Tensor) -> Any:
        x, y, a, b = c

        def call() -> None:
            torch.ops.vllm.lora_shrink(x, a, buf, *margs, 1.0)
            torch.ops.vllm.lora_expand(buf, b, y, *margs, offset_start=0, add_inputs=True)

        return call

    x, y, a, b = one
    y0 = y.clone()
    ref = lora_linear_reference(y0, x, a, b, slots, 1.0)
    ours(one)()
    ours_err = (y.double().cpu() - ref).abs().max().item()
    y.copy_(y0)
    vllm_err = float("nan")
    t_vllm = float("nan")
    if with_vllm:
        vllm(one, buffers[0])()
        vllm_err = (y.double().cpu() - ref).abs().max().item()
        y.copy_(y0)
    t_ours = _graph_time([ours(c) for c in copies], replays)
    if with_vllm:
        t_vllm = _graph_time([vllm(c, buffers[i]) for i, c in enumerate(copies)], replays)
    n_total = sum(widths)
    weight_bytes = adapters * rank * (k * len(widths) + n_total) * 2
    floor_bytes = m * k * 2 + 2 * m * n_total * 2 + weight_bytes
    return Result(
        shape,
        m,
        rank,
        max_rank,
        adapters,
        t_ours,
        t_vllm,
        floor_bytes / (hbm * 1e12) * 1e6,
        ours_err,
        vllm_err,
        ref.abs().max().item(),
    )


#: ``wide_split_jobs`` that always splits the wide tiles (the sweep times every split).
ALWAYS_SPLIT = 1 << 30


def _wide_configs(base: Any) -> list[tuple[Any, bool, int]]:
    """(config, wide tiles' reduce_in_expand, programs per SM) candidates for the wide-rank
    path of one decode-sized case: how many parts its jobs are split into (always, whatever
    the tile count), and its reduction."""
    import dataclasses

    from hi_moe_lora.kernels.config import MAX_WIDE_SPLIT

    splits = [s for s in (1, 2, 4, 8) if s <= min(MAX_WIDE_SPLIT, base.rank_pad // base.block_r)]
    return [
        (dataclasses.replace(base, wide_split=split), red, 2)
        for split in splits
        for red in (True, False)
    ]


def _sweep_configs(m: int, k: int, base: Any) -> list[tuple[Any, bool, int]]:
    """(config, reduce_in_expand, programs per SM) candidates for one decode-sized case."""
    from hi_moe_lora.kernels.config import TileConfig

    block_ks = (512, 1024) if k > 8192 else (256, 512)
    out = []
    for block_n in (64, 128, 256, 512):
        for block_k in block_ks:
            for red in (True, False):
                for warps in (4, 8):
                    cfg = TileConfig(
                        16, block_n, block_k, base.block_r, 1, 1, warps, 1, base.rank_pad,
                        base.wide_split,
                    )  # fmt: skip
                    out.append((cfg, red, 2))
    out.append((base, True, 4))  # the default tiles with more programs per SM
    return out


def sweep(
    shape: str, m: int, rank: int, max_rank: int, adapters: int, replays: int, wide: bool
) -> None:
    """Time tile configurations for one decode-sized case (tuning aid; one line per case).
    ``wide``: the wide-rank path's options instead of the tiles."""
    from hi_moe_lora.kernels.config import choose_config

    k, widths = SHAPES[shape]
    adapters = min(adapters, m)
    slots = _slots_for(m, adapters)
    gen = torch.Generator(device="cuda").manual_seed(3)
    copies = _copy_pool(k, widths, rank, max_rank, m, gen)
    work = WorkListBuffers(max(m, 16), SLOTS, "cuda")
    work.update(slots.numpy(), [rank] * SLOTS)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    base = choose_config(m, k, sum(widths), max_rank, sms, SLOTS)
    results = []
    candidates = _wide_configs(base) if wide else _sweep_configs(m, k, base)
    for cfg, red, pps in candidates:

        def call(c: Any, cfg: Any = cfg, red: bool = red, pps: int = pps) -> Any:
            x, y, a, b = c
            reductions: dict[str, Any] = (
                {"wide_reduce_in_expand": red, "wide_split_jobs": ALWAYS_SPLIT}
                if wide
                else {"reduce_in_expand": red}
            )
            return lambda: launch_fused_lora(
                y,
                x,
                a,
                b,
                work.tiles,
                work.counters,
                1.0,
                0,
                True,
                config=cfg,
                max_programs=pps * sms,
                **reductions,
            )

        t = _graph_time([call(c) for c in copies], replays)
        results.append((t, cfg, red, pps))
    default = _graph_time(
        [
            (lambda c=c: launch_fused_lora(c[1], c[0], c[2], c[3], work.tiles, work.counters, 1.0))
            for c in copies
        ],
        replays,
    )
    results.sort(key=lambda r: r[0])
    best = " | ".join(
        f"{t:.1f}us bn{cfg.block_n} bk{cfg.block_k} w{cfg.num_warps} ws{cfg.wide_split} "
        f"red{int(red)} pps{pps}"
        for t, cfg, red, pps in results[: 4 if wide else 3]
    )
    print(
        f"sweep {shape} M={m} r{rank}/{max_rank} a{adapters}: "
        f"default(bn{base.block_n} bk{base.block_k} w{base.num_warps}) "
        f"{default:.1f}us; best: {best}",
        flush=True,
    )


def launch_floor(replays: int) -> float:
    """µs per launch of an empty Triton kernel, timed like the cases (context for the table)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _empty(ptr):  # type: ignore[no-untyped-def]
        tl.store(ptr + tl.program_id(0), 1)

    buf = torch.zeros(1024, dtype=torch.int32, device="cuda")
    return _graph_time([lambda: _empty[(132,)](buf) for _ in range(32)], replays)


def markdown(results: list[Result]) -> str:
    lines = [
        "| shape | rank (max) | adapters | M | ours µs | vLLM µs | ours/vLLM | floor µs |"
        " max err ours / vLLM |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.shape} | {r.rank} ({r.max_rank}) | {r.adapters} | {r.m} | {r.ours_us:.1f} | "
            f"{r.vllm_us:.1f} | {r.ours_us / r.vllm_us:.2f} | {r.floor_us:.2f} | "
            f"{r.ours_err:.3g} / {r.vllm_err:.3g} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--hbm-tbs", type=float, default=3.0, help="HBM bandwidth, TB/s")
    parser.add_argument("--budget-s", type=float, default=330.0)
    parser.add_argument("--ours-only", action="store_true", help="no vLLM kit: time ours only")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--sweep", action="store_true", help="time tile configs (decode sizes)")
    parser.add_argument(
        "--sweep-wide", action="store_true", help="with --sweep: the wide-rank path's options"
    )
    parser.add_argument(
        "--sweep-cases",
        default="o:1:16:1,down:1:16:1,qkv:1:16:1,gate_up:1:16:1,o:16:16:8,down:16:16:8,"
        "o:4:64:1,down:4:64:1,qkv:64:16:1,o:64:16:1,gate_up:64:16:1,down:64:16:1,"
        "qkv:64:16:8,o:64:16:8,gate_up:64:16:8,down:64:16:8",
        help="shape:M:rank[/max_rank]:adapters,... for --sweep",
    )
    args = parser.parse_args()
    if not args.ours_only:
        import vllm.lora.ops.triton_ops  # noqa: F401  (registers torch.ops.vllm.lora_*)
    print(f"empty Triton kernel in a CUDA graph: {launch_floor(args.replays):.2f} us/launch")
    if args.sweep:
        for case in args.sweep_cases.split(","):
            sweep(*parse_case(case), args.replays, args.sweep_wide)
        return 0

    ms = [1, 16, 64, 256] if args.quick else [1, 4, 16, 64, 256, 1024]
    ranks = [(16, 16), (64, 64), (16, 64)]
    began = time.time()
    results: list[Result] = []
    args.out.mkdir(parents=True, exist_ok=True)
    for shape in args.shapes.split(","):
        for rank, max_rank in ranks:
            for adapters in (1, 8):
                for m in ms:
                    if adapters > 1 and m == 1:
                        continue
                    if time.time() - began > args.budget_s:
                        print("time budget reached; stopping", flush=True)
                        break
                    r = run_case(
                        shape,
                        m,
                        rank,
                        max_rank,
                        adapters,
                        args.replays,
                        args.hbm_tbs,
                        not args.ours_only,
                    )
                    results.append(r)
                    print(
                        f"{shape:8s} r{rank:<3d}/{max_rank:<3d} a{r.adapters} M={m:<5d} "
                        f"ours {r.ours_us:7.1f}  vllm {r.vllm_us:7.1f}  "
                        f"ratio {r.ours_us / r.vllm_us:5.2f}  floor {r.floor_us:6.2f}  "
                        f"err {r.ours_err:.3g}/{r.vllm_err:.3g}",
                        flush=True,
                    )
                    (args.out / "bench_lora.json").write_text(
                        json.dumps([asdict(x) for x in results], indent=1)
                    )
    (args.out / "bench_lora.md").write_text(markdown(results) + "\n")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
