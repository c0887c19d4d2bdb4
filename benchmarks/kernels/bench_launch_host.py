"""Host time of one LoRA-active call of our op on a GPU, stage by stage (GPU only).

A step larger than vLLM's largest CUDA graph runs op by op, so our op's host time is paid 128
times a step on the Llama-3-8B shape (benchmarks/README.md, fifth window: 226 µs a call in the
8-concurrent profile). This splits one gate_up call (16 slots, rank 16, two slices of 14,336
outputs, every token on an adapter) into what each layer of the call adds, from the outside in:

- ``gemm_op``: ``torch.ops.hi_moe_lora.gemm_lora_linear`` as the plugin calls it for a LoRA
  layer under the fused GEMM (``HI_MOE_LORA_FUSED_GEMM`` on, one adapter, vLLM's count given):
  the base GEMM and its LoRA, which above the fused GEMM's rows (an eager prefill step) is
  cuBLAS, then our launch; ``cublas``: that GEMM alone (``torch.mm``), for the part of
  ``gemm_op`` the base model pays too; where the tree has no fused GEMM both are left out;
- ``op``: ``torch.ops.hi_moe_lora.lora_linear`` as vLLM calls it (dispatch, rank tracker);
- ``op_jit``: the same with direct launches off (where the tree has them);
- ``launch_fused_lora``: the launcher's entry point (the layer's plan looked up);
- ``plan_launch``: the layer's plan launching (config, grid, scratch buffers, Triton), with
  direct launches of the compiled variant where the tree has them (``direct_launch``), straight
  to the variant kept for the call's class where the tree keeps them (``DirectCall``);
- ``plan_launch_keyed``: where the tree keeps classes, the same launch through the path every
  call took before (the configuration looked up and the specialisation key built each call);
- ``plan_launch_jit``: the same through Triton's JIT dispatch (direct launches off);
- ``triton_jit``: Triton's JIT dispatch with the same arguments (binding, specialisation key,
  cache lookup, launch);
- ``triton_launcher``: the compiled kernel's launcher called directly (the floor of a Triton
  launch from Python);
- ``scratch``: the two scratch allocations of a call alone.

Host time only: each round issues ``--calls`` calls without waiting for the GPU (fewer than
the launch queue holds), then synchronises outside the timing. Rounds interleave the stages.
``--profile STAGE ...`` then runs those stages ``--calls`` times more under ``cProfile`` and
lists the functions with the most own time a call (profiled, so slower than the timed rounds:
where the time goes, not how much).

    python benchmarks/kernels/bench_launch_host.py [--tokens 16 1024] [--calls 100]
        [--rounds 30] [--tree PATH] [--profile gemm_op op] [--top 25] [--out host.json]

``--tree`` imports ``hi_moe_lora`` from another checkout (A/B of the outer stages; stages the
tree lacks are left out).
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SLOTS, RANK, HIDDEN, SLICE_OUT = 16, 16, 4096, 14336


def _arguments(tokens: int) -> dict[str, Any]:
    import torch

    from hi_moe_lora.kernels.ranks import SlotRanks
    from hi_moe_lora.kernels.worklist import WorkListBuffers

    gen = torch.Generator(device="cuda").manual_seed(tokens)
    dtype = torch.bfloat16

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device="cuda") * 0.05).to(dtype)

    lora_a = [rand(SLOTS, 1, RANK, HIDDEN) for _ in range(2)]
    lora_b = [rand(SLOTS, 1, SLICE_OUT, RANK) for _ in range(2)]
    tracker = SlotRanks(SLOTS, RANK, "cuda")
    tracker.observe(lora_a, lora_b)
    tracker.refresh(list(range(1, SLOTS + 1)))
    work = WorkListBuffers(max(tokens, 16), SLOTS, "cuda")
    slots = torch.randint(0, SLOTS, (tokens,), generator=torch.Generator().manual_seed(1))
    work.update(slots.numpy(), tracker.host)
    return {
        "y": rand(tokens, 2 * SLICE_OUT),
        "x": rand(tokens, HIDDEN),
        "lora_a": lora_a,
        "lora_b": lora_b,
        "work": work,
        "tracker": tracker,
    }


def stages(tokens: int) -> dict[str, Callable[[], Any]]:
    """The calls to time, outermost first (each a closure over one call's arguments)."""
    import torch

    from hi_moe_lora.kernels import ops, triton_kernel
    from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL

    arg = _arguments(tokens)
    y, x, work = arg["y"], arg["x"], arg["work"]
    op_args = (
        y, x, arg["lora_a"], arg["lora_b"], work.tiles[BLOCK_M_SMALL], work.tiles[BLOCK_M_LARGE],
        arg["tracker"].ranks, work.counters, torch.tensor([False]), 1.0, 0, True,
    )  # fmt: skip
    out: dict[str, Callable[[], Any]] = {**_gemm_stages(tokens, arg)}
    out["op"] = lambda: ops.lora_linear(*op_args)
    launch_args = (y, x, arg["lora_a"], arg["lora_b"], work.tiles, work.counters, 1.0, 0, True)
    narrow = arg["tracker"].narrow_b.copies_of(arg["lora_b"])
    out["launch_fused_lora"] = lambda: triton_kernel.launch_fused_lora(
        *launch_args, narrow_b=narrow
    )
    try:
        from hi_moe_lora.kernels import launch_plan
    except ImportError:  # a tree from before the launch plans
        return out
    layer = launch_plan.layer_launch(
        y, x, arg["lora_a"], arg["lora_b"], work.counters, 0, True, None, narrow
    )
    out["plan_launch"] = lambda: layer.launch(y, x, work.tiles, 1.0, 0, tokens)
    if hasattr(launch_plan, "DirectCall"):  # the keyed path, which every call took before
        cap = launch_plan.num_sms(x.get_device()) * launch_plan.PROGRAMS_PER_SM
        out["plan_launch_keyed"] = lambda: layer.launch(
            y, x, work.tiles, 1.0, 0, tokens, max_programs=cap
        )
    switch = _direct_launch_switch()
    if switch is not None:
        out["plan_launch_jit"] = _without_direct_launches(
            switch, lambda: layer.launch(y, x, work.tiles, 1.0, 0, tokens)
        )
        out = {"op": out["op"], "op_jit": _without_direct_launches(switch, out["op"]), **out}
        switch.set(False)  # the recorded call goes through the JIT
    try:
        grid, args, kwargs, kernel = _record_triton_call(
            launch_plan, lambda: layer.launch(y, x, work.tiles, 1.0, 0, tokens)
        )
    finally:
        if switch is not None:
            switch.set(True)
    out["triton_jit"] = lambda: kernel[grid](*args, **kwargs)
    try:  # Triton's internal launcher API (3.x): the stage is left out where it differs
        compiled = kernel[grid](*args, **kwargs)
        bound = _bound_arguments(kernel, args, kwargs)
        stream = torch.cuda.current_stream().cuda_stream

        def launcher() -> None:
            compiled.run(
                grid[0], 1, 1, stream, compiled.function, compiled.packed_metadata, None, None,
                None, *bound,
            )  # fmt: skip

        launcher()
        out["triton_launcher"] = launcher
    except Exception as exc:  # reported; the other stages still run
        print(f"triton_launcher left out: {exc!r}", file=sys.stderr)
    part_numel, inter_numel = args[12].numel(), args[13].numel()
    out["scratch"] = lambda: (
        torch.empty(part_numel, dtype=torch.float32, device="cuda"),
        torch.empty(inter_numel, dtype=x.dtype, device="cuda"),
    )
    return out


def _gemm_stages(tokens: int, arg: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """``gemm_op`` and ``cublas`` (see the module docstring) over a gate_up weight; none for a
    tree without the fused GEMM's op."""
    import torch

    try:
        from hi_moe_lora.kernels import gemm_op
        from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
        from hi_moe_lora.kernels.gemm_lora import FUSED_GEMM_ROWS
        from hi_moe_lora.kernels.worklist import WorkListBuffers
    except ImportError:
        return {}
    x = arg["x"]
    weight = torch.randn(2 * SLICE_OUT, HIDDEN, device="cuda").mul_(HIDDEN**-0.5).to(x.dtype)
    y = torch.empty(tokens, 2 * SLICE_OUT, dtype=x.dtype, device="cuda")
    work = WorkListBuffers(max(tokens, 16), SLOTS, "cuda", fused_slot=True)
    slots = torch.zeros(tokens, dtype=torch.int32)  # (one adapter, in slot 0)
    work.update(slots.numpy(), arg["tracker"].host)
    token_slot = slots.to("cuda")
    no_lora, active = torch.tensor([False]), torch.tensor([1], dtype=torch.int32)

    def call() -> None:
        gemm_op.gemm_lora_linear(
            y, x, weight, arg["lora_a"], arg["lora_b"],
            work.tiles[BLOCK_M_SMALL], work.tiles[BLOCK_M_LARGE],
            work.rest_tiles[BLOCK_M_SMALL], work.rest_tiles[BLOCK_M_LARGE],
            token_slot, work.fused_slot, arg["tracker"].ranks, work.counters,
            work.gemm_arrivals, no_lora, 1.0, FUSED_GEMM_ROWS[0], FUSED_GEMM_ROWS[1],
            active, True, None, None,
        )  # fmt: skip

    return {"gemm_op": call, "cublas": lambda: torch.mm(x, weight.t(), out=y)}


def _direct_launch_switch() -> Any:
    """The tree's switch of direct launches, turned on (None for a tree without them)."""
    try:
        from hi_moe_lora.kernels import direct_launch
    except ImportError:
        return None
    direct_launch.SWITCH.set(True)
    return direct_launch.SWITCH


def _without_direct_launches(switch: Any, call: Callable[[], Any]) -> Callable[[], None]:
    def through_the_jit() -> None:
        switch.set(False)
        try:
            call()
        finally:
            switch.set(True)

    return through_the_jit


def _record_triton_call(
    launch_plan: Any, call: Callable[[], Any]
) -> tuple[tuple[int, ...], tuple[Any, ...], dict[str, Any], Any]:
    """Run ``call`` once with the kernel's launch recorded: its grid, arguments and kernel."""
    real = launch_plan.compiled_kernel()
    seen: list[tuple[tuple[int, ...], tuple[Any, ...], dict[str, Any]]] = []

    class Recorder:
        def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                seen.append((grid, args, kwargs))
                return real[grid](*args, **kwargs)

            return run

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    original = launch_plan.compiled_kernel
    launch_plan.compiled_kernel = Recorder
    try:
        call()
    finally:
        launch_plan.compiled_kernel = original
    grid, args, kwargs = seen[-1]
    return grid, args, kwargs, real


def _bound_arguments(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """Every parameter's value in the kernel's order (constexprs included), as Triton's JIT
    hands them to the launcher."""
    names = list(inspect.signature(kernel.fn).parameters)
    values = dict(zip(names, args, strict=False))
    values.update({k: v for k, v in kwargs.items() if k in names})
    return [values[name] for name in names]


def _host_us(call: Callable[[], Any], calls: int) -> float:
    import torch

    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(calls):
        call()
    spent = time.perf_counter() - began
    torch.cuda.synchronize()
    return 1e6 * spent / calls


def profile(call: Callable[[], Any], calls: int, top: int) -> list[dict[str, Any]]:
    """The ``top`` functions by own time under ``cProfile`` over ``calls`` calls: per call, how
    often each runs, its own µs and its cumulative µs."""
    import cProfile
    import pstats

    import torch

    def synchronize() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    profiler = cProfile.Profile()
    synchronize()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    synchronize()
    rows = [
        {
            "function": f"{Path(file).name}:{line}({name})",
            "runs_per_call": runs / calls,
            "own_us": 1e6 * own / calls,
            "cumulative_us": 1e6 * cumulative / calls,
        }
        for (file, line, name), (_, runs, own, cumulative, _) in pstats.Stats(
            profiler
        ).stats.items()  # type: ignore[attr-defined]
    ]
    rows.sort(key=lambda row: -float(row["own_us"]))
    return rows[:top]


def profile_text(stage: str, rows: list[dict[str, Any]]) -> str:
    lines = [f"{stage}: own µs a call (cumulative), runs a call, function"]
    for row in rows:
        lines.append(
            f"  {row['own_us']:7.2f} ({row['cumulative_us']:7.2f}) {row['runs_per_call']:5.1f}"
            f"  {row['function']}"
        )
    return "\n".join(lines)


def measure(
    tokens: int, calls: int, rounds: int, profiled: tuple[str, ...] = (), top: int = 25
) -> dict[str, Any]:
    import torch
    import triton

    calls_by_stage = stages(tokens)
    for call in calls_by_stage.values():  # compile and warm every path once
        call()
    samples: dict[str, list[float]] = {name: [] for name in calls_by_stage}
    for round_index in range(rounds):
        names = list(calls_by_stage)
        for name in names if round_index % 2 == 0 else reversed(names):
            samples[name].append(_host_us(calls_by_stage[name], calls))
    return {
        "tokens": tokens,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "calls": calls,
        "rounds": rounds,
        "us_per_call": {name: statistics.median(s) for name, s in samples.items()},
        "profile": {
            name: profile(calls_by_stage[name], calls, top)
            for name in profiled
            if name in calls_by_stage
        },
    }


def table(results: list[dict[str, Any]]) -> str:
    names = list(results[0]["us_per_call"])
    lines = ["| stage | " + " | ".join(f"M = {r['tokens']}" for r in results) + " |"]
    lines.append("|---" * (len(results) + 1) + "|")
    for name in names:
        cells = [f"{r['us_per_call'].get(name, float('nan')):.1f}" for r in results]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 1024])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--profile", nargs="*", default=[], metavar="STAGE")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.tree.resolve()))
    profiled = tuple(args.profile)
    results = [measure(t, args.calls, args.rounds, profiled, args.top) for t in args.tokens]
    print(f"{results[0]['gpu']}, torch {results[0]['torch']}, triton {results[0]['triton']}")
    print(f"tree {args.tree}; µs of host time per call, median of {args.rounds} rounds")
    print(table(results))
    for result in results:
        for stage, rows in result["profile"].items():
            print(f"\nM = {result['tokens']}, " + profile_text(stage, rows))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
