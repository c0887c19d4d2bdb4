"""Registers and stack (spills) of the fused kernel's sm_90 variants, compiled on the CPU.

No GPU needed: Triton compiles each variant that a Llama-3-8B layer meets to a Hopper cubin with
its bundled ptxas, and its bundled ``cuobjdump -res-usage`` reports registers and stack bytes per
thread. Stack above a few dozen bytes means the variant spills (local memory round trips inside
the kernel's dependent chain).

    python benchmarks/kernels/spill_report.py [--max-ranks 16 64] [--ms 1 16 64 256]

Needs a Triton with the NVIDIA backend (Linux x86-64 wheels carry ptxas and cuobjdump).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.kernels.llama_shapes import PROJECTIONS
from hi_moe_lora.kernels.config import choose_config
from hi_moe_lora.kernels.fused.flavours import compile_for_target

#: (name, input width K, output widths) of one Llama-3-8B layer's wrapped linears.
LLAMA_8B_SHAPES = tuple((name, k, slices) for name, (k, slices) in PROJECTIONS.items())
H100_SMS = 132
SLOTS = 9
_USAGE = re.compile(r"REG:(\d+) STACK:(\d+)")


def run_on_cubin(tool: str, option: str, cubin: bytes) -> str:
    """What Triton's bundled NVIDIA ``tool`` (``cuobjdump``, ``nvdisasm``) prints for ``cubin``
    with ``option``."""
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / tool
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        return subprocess.run(
            [str(path), option, handle.name], capture_output=True, text=True, check=True
        ).stdout


def resource_usage(cubin: bytes) -> tuple[int, int]:
    """(registers, stack bytes) per thread of the kernel in ``cubin``."""
    report = run_on_cubin("cuobjdump", "-res-usage", cubin)
    found = _USAGE.search(report)
    if found is None:
        raise RuntimeError(f"no resource line in cuobjdump's report:\n{report}")
    return int(found.group(1)), int(found.group(2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-ranks", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 4, 16, 64, 256, 1024])
    parser.add_argument("--shapes", nargs="+", default=[s[0] for s in LLAMA_8B_SHAPES])
    args = parser.parse_args(argv)
    print("| shape | max rank | M | config | regs | stack B |")
    print("|---|---|---|---|---|---|")
    for name, k, widths in LLAMA_8B_SHAPES:
        if name not in args.shapes:
            continue
        for max_rank in args.max_ranks:
            for m in args.ms:
                cfg = choose_config(m, k, sum(widths), max_rank, H100_SMS, SLOTS)
                compiled = compile_for_target(  # the reductions the launcher would choose
                    len(widths),
                    cfg,
                    cfg.reduces_in_expand(k, widths),
                    k_split=cfg.k_split(k),
                    wide_reduce_in_expand=cfg.reduces_in_expand(k, widths, wide=True),
                )
                regs, stack = resource_usage(compiled.asm["cubin"])
                tiles = (
                    f"bm{cfg.block_m} bn{cfg.block_n} bk{cfg.block_k}x{cfg.k_iters} "
                    f"ws{cfg.wide_split}"
                )
                print(f"| {name} | {max_rank} | {m} | {tiles} | {regs} | {stack} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
