"""What LoRA adds to a decode step's linear layers, with and without programmatic dependent
launch (GPU, sm_90; on the CPU only ``--help`` and the table code run).

vLLM runs each LoRA layer as the base GEMM, then our launch on the same stream. This replays
that chain for the Llama-3-8B decoder's four LoRA projections (qkv, o, gate_up, down; bf16, 16
slots, rank 16) over ``--layers`` layers with their own weights (together beyond L2), captured
in one CUDA graph, and times it as:

- ``base``: the GEMMs alone;
- ``off``, ``launch``, ``overlap``: each GEMM followed by our launch, in that PDL mode
  (:mod:`hi_moe_lora.kernels.pdl`).

Rounds interleave the four graphs; each figure is the median over rounds of the median replay.
Reported per LoRA launch: the time LoRA adds (``mode - base``, µs) and the chain's ratio
``base / mode`` (the share of a decode step's linear layers that LoRA leaves). Before timing,
every mode's output is checked bit for bit against ``off``'s and against the float64 reference.

    python benchmarks/kernels/bench_pdl.py [--tokens 8 64] [--adapters 1 16] [--layers 8]
        [--rounds 5] [--replays 30] [--out pdl.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: (input width, output widths of the slices) of the Llama-3-8B decoder's LoRA projections.
PROJECTIONS: dict[str, tuple[int, list[int]]] = {
    "qkv": (4096, [4096, 1024, 1024]),
    "o": (4096, [4096]),
    "gate_up": (4096, [14336, 14336]),
    "down": (14336, [4096]),
}
SLOTS, RANK = 16, 16
VARIANTS = ("base", "off", "launch", "overlap")


def summarise(per_chain_us: dict[str, float], launches: int) -> dict[str, Any]:
    """From each variant's median µs for the whole chain: µs per launch, the µs LoRA adds per
    launch in each mode, and the chain's ratio to ``base``."""
    base = per_chain_us["base"]
    modes = [v for v in VARIANTS if v != "base" and v in per_chain_us]
    return {
        "us_per_launch": {v: per_chain_us[v] / launches for v in per_chain_us},
        "lora_us_per_launch": {v: (per_chain_us[v] - base) / launches for v in modes},
        "ratio_to_base": {v: base / per_chain_us[v] for v in modes},
    }


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one row per (tokens, adapters) with each mode's added µs and ratio."""
    modes = [v for v in VARIANTS if v != "base"]
    head = "| tokens | adapters | base µs / GEMM | " + " | ".join(
        f"{m}: LoRA µs / launch (ratio)" for m in modes
    )
    lines = [head + " |", "|" + "---|" * (3 + len(modes))]
    for row in rows:
        s = row["summary"]
        cells = [f"{s['lora_us_per_launch'][m]:.2f} ({s['ratio_to_base'][m]:.3f})" for m in modes]
        base = s["us_per_launch"]["base"]
        lines.append(
            f"| {row['tokens']} | {row['adapters']} | {base:.2f} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def build_chain(tokens: int, adapters: int, layers: int, seed: int) -> dict[str, Any]:
    """The layers' tensors and the work list: every token on one of ``adapters`` slots."""
    import torch

    from hi_moe_lora.kernels.worklist import WorkListBuffers

    gen = torch.Generator(device="cuda").manual_seed(seed)
    dev, bf16 = "cuda", torch.bfloat16
    slots = torch.arange(tokens, dtype=torch.int64) % adapters
    work = WorkListBuffers(max(tokens, 16), SLOTS, dev)
    work.update(slots.numpy(), [RANK] * SLOTS)
    chain = []
    for _ in range(layers):
        for k, widths in PROJECTIONS.values():
            n = sum(widths)
            chain.append(
                {
                    "x": torch.randn(tokens, k, generator=gen, device=dev).to(bf16),
                    "y": torch.empty(tokens, n, device=dev, dtype=bf16),
                    "w": (torch.randn(n, k, generator=gen, device=dev) / k**0.5).to(bf16),
                    "a": [
                        (torch.randn(SLOTS, 1, RANK, k, generator=gen, device=dev) / k**0.5).to(
                            bf16
                        )
                        for _ in widths
                    ],
                    "b": [
                        (torch.randn(SLOTS, 1, w, RANK, generator=gen, device=dev) / RANK**0.5).to(
                            bf16
                        )
                        for w in widths
                    ],
                }
            )
    return {"chain": chain, "work": work, "slots": slots}


def run_chain(built: dict[str, Any], with_lora: bool) -> None:
    import torch

    from hi_moe_lora.kernels.triton_kernel import launch_fused_lora

    work = built["work"]
    for layer in built["chain"]:
        torch.mm(layer["x"], layer["w"].t(), out=layer["y"])
        if with_lora:
            launch_fused_lora(
                layer["y"], layer["x"], layer["a"], layer["b"], work.tiles, work.counters, 1.0
            )


def check_modes(built: dict[str, Any]) -> None:
    """Every mode gives ``off``'s output bit for bit, and the first layer the reference's."""
    import torch

    from hi_moe_lora.kernels import pdl
    from hi_moe_lora.kernels.reference_loops import lora_linear_reference

    outputs = {}
    for mode in pdl.PdlMode:
        pdl.SWITCH.set(mode)
        run_chain(built, True)
        torch.cuda.synchronize()
        outputs[mode] = [layer["y"].clone() for layer in built["chain"]]
    for mode, ys in outputs.items():
        for got, want in zip(ys, outputs[pdl.PdlMode.OFF], strict=True):
            if not torch.equal(got, want):
                raise SystemExit(f"PDL mode {mode.name} differs from a plain launch")
    first = built["chain"][0]
    base = torch.mm(first["x"], first["w"].t())
    ref = lora_linear_reference(base, first["x"], first["a"], first["b"], built["slots"], 1.0)
    err = float((outputs[pdl.PdlMode.OFF][0].double().cpu() - ref.cpu()).abs().max())
    if err > 4e-2 * max(1.0, float(ref.abs().max())):
        raise SystemExit(f"our launch is {err} from the float64 reference")


def capture(built: dict[str, Any], variant: str) -> Any:
    """The chain captured as a CUDA graph in one variant (its kernels compiled first)."""
    import torch

    from hi_moe_lora.kernels import pdl

    with_lora = variant != "base"
    if with_lora:
        pdl.SWITCH.set(pdl.PdlMode[variant.upper()])
    run_chain(built, with_lora)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_chain(built, with_lora)
    graph.replay()
    torch.cuda.synchronize()
    return graph


def replay_us(graph: Any, replays: int) -> float:
    """Median µs of one replay of the whole chain."""
    import torch

    times = []
    for _ in range(replays):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return float(statistics.median(times))


def measure(tokens: int, adapters: int, layers: int, rounds: int, replays: int) -> dict[str, Any]:
    built = build_chain(tokens, adapters, layers, seed=tokens * 31 + adapters)
    check_modes(built)
    graphs = {variant: capture(built, variant) for variant in VARIANTS}
    per_round: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            per_round[variant].append(replay_us(graphs[variant], replays))
    chain_us = {v: float(statistics.median(ts)) for v, ts in per_round.items()}
    launches = len(built["chain"])
    return {
        "tokens": tokens,
        "adapters": adapters,
        "launches": launches,
        "chain_us_by_round": per_round,
        "summary": summarise(chain_us, launches),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--adapters", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--replays", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench_pdl.py needs a CUDA GPU")
    from hi_moe_lora.kernels import pdl

    if not pdl.supports_pdl(torch.cuda.current_device()):
        raise SystemExit("programmatic dependent launch needs sm_90 or later")
    rows = []
    for tokens in args.tokens:
        for adapters in args.adapters:
            rows.append(
                measure(
                    tokens, min(adapters, tokens, SLOTS), args.layers, args.rounds, args.replays
                )
            )
            print(table(rows[-1:]), flush=True)
    print(table(rows))
    if args.out:
        summary = {
            "device": torch.cuda.get_device_name(),
            "layers": args.layers,
            "rounds": args.rounds,
            "replays": args.replays,
            "rank": RANK,
            "slots": SLOTS,
            "rows": rows,
        }
        args.out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
