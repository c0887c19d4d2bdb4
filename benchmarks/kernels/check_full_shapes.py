"""GPU correctness at full Llama-3-8B shapes: ours (and vLLM's, when the kit is there) vs float64.

Fresh random bf16 inputs per case, mixed real ranks (8/16/64 under max rank 64), tokens without
an adapter, one adapter and many adapters, and many adapters with DoRA slots among them (the
fused kernel's DoRA epilogue against the float64 DoRA reference; vLLM has no DoRA to compare).
Prints one line per case and exits non-zero if our error exceeds the bf16 bound or twice vLLM's
error on the same case.
Usage: python benchmarks/kernels/check_full_shapes.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.kernels.llama_shapes import PROJECTIONS  # noqa: E402
from hi_moe_lora.kernels.reference_loops import lora_linear_reference  # noqa: E402
from hi_moe_lora.kernels.triton_kernel import DoraEpilogue, launch_fused_lora  # noqa: E402
from hi_moe_lora.kernels.worklist import WorkListBuffers  # noqa: E402

SHAPES = {name: (k, list(slices)) for name, (k, slices) in PROJECTIONS.items()}
RANKS = [8, 16, 64, 16, 8, 64, 16, 32]
#: Slots holding DoRA adapters in the "dora" cases (narrow and wide ranks among them).
DORA_SLOTS = (0, 2, 5, 7)
MAX_RANK = 64


def _vllm_apply(
    y: torch.Tensor,
    x: torch.Tensor,
    a: list[torch.Tensor],
    b: list[torch.Tensor],
    slots: torch.Tensor,
) -> bool:
    try:
        import vllm.lora.ops.triton_ops  # noqa: F401
        from vllm.lora.ops.triton_ops import LoRAKernelMeta
    except Exception:
        return False
    m = x.shape[0]
    meta = LoRAKernelMeta.make(len(RANKS), max(m, 16), "cuda")
    meta.prepare_tensors(slots.to("cuda"))
    margs = meta.meta_args(m, False)
    buf = torch.empty(len(a), m, MAX_RANK, dtype=torch.float32, device="cuda")
    torch.ops.vllm.lora_shrink(x, a, buf, *margs, 0.5)
    torch.ops.vllm.lora_expand(buf, b, y, *margs, offset_start=0, add_inputs=True)
    return True


def main() -> int:
    failures = 0
    gen = torch.Generator(device="cuda").manual_seed(1234)
    for shape, (k, widths) in SHAPES.items():
        for m in (1, 3, 16, 64, 257, 1024):
            for mix in ("one", "many", "dora"):
                if mix == "one":
                    slots = torch.where(torch.arange(m) % 5 == 4, -1, 2)
                else:
                    slots = torch.randint(
                        -1, len(RANKS), (m,), generator=torch.Generator().manual_seed(m)
                    )
                x = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16)
                y = torch.randn(m, sum(widths), generator=gen, device="cuda").to(torch.bfloat16)
                a, b = [], []
                for n in widths:
                    at = torch.zeros(
                        len(RANKS), 1, MAX_RANK, k, device="cuda", dtype=torch.bfloat16
                    )
                    bt = torch.zeros(
                        len(RANKS), 1, n, MAX_RANK, device="cuda", dtype=torch.bfloat16
                    )
                    for s, r in enumerate(RANKS):
                        at[s, 0, :r] = (
                            torch.randn(r, k, generator=gen, device="cuda") / k**0.5
                        ).to(torch.bfloat16)
                        bt[s, 0, :, :r] = (
                            torch.randn(n, r, generator=gen, device="cuda") / r**0.5
                        ).to(torch.bfloat16)
                    a.append(at)
                    b.append(bt)
                work = WorkListBuffers(max(m, 16), len(RANKS), "cuda")
                work.update(slots.numpy(), RANKS)
                y0 = y.clone()
                dora = None
                if mix == "dora":
                    scales = 0.5 + torch.rand(len(RANKS) + 1, sum(widths), device="cuda")
                    live = torch.zeros(len(RANKS), dtype=torch.int32, device="cuda")
                    live[list(DORA_SLOTS)] = 1
                    dora = DoraEpilogue(scales, live)
                ref = lora_linear_reference(
                    y0, x, a, b, slots, 0.5,
                    dora_scales=dora.scales if dora else None,
                    dora_live=dora.live if dora else None,
                )  # fmt: skip
                launch_fused_lora(y, x, a, b, work.tiles, work.counters, 0.5, dora=dora)
                torch.cuda.synchronize()
                ours = (y.double().cpu() - ref).abs().max().item()
                y.copy_(y0)
                vllm_err = float("nan")
                if dora is None and _vllm_apply(y, x, a, b, slots):
                    vllm_err = (y.double().cpu() - ref).abs().max().item()
                bound = 0.02 * max(1.0, ref.abs().max().item())
                ok = ours == ours and (
                    ours <= bound or (vllm_err == vllm_err and ours <= 2 * vllm_err)
                )
                failures += not ok
                print(
                    f"{'ok ' if ok else 'BAD'} {shape:8s} M={m:<5d} {mix:5s} err ours {ours:.4g}"
                    f" vllm {vllm_err:.4g} bound {bound:.3g}",
                    flush=True,
                )
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
