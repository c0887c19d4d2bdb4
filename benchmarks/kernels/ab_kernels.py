"""Side-by-side timing of our kernel from several source trees (GPU only; a tuning aid).

Each tree is a directory holding a ``hi_moe_lora`` package (another revision: ``git worktree add``
or ``git archive``). The kernel of every tree is timed on the same cases, the same way as the
microbenchmark (``bench_lora.py``: CUDA graph over a rotating pool larger than L2, median of the
replays), in separate processes, rounds interleaved (A B C, then C B A, ...) so that a drifting
clock or a warming machine does not favour one tree. Each result is checked against the float64
reference first. Compiles run in parallel processes before any timing (``--jobs``); each tree has
its own Triton cache. The prefill precompile (serving only) is switched off.

    python benchmarks/kernels/ab_kernels.py --tree head=. --tree old=/tmp/old \\
        --cases qkv:1:16/64:1,gate_up:64:16/64:8 [--rounds 2] [--out results.json]

A tree may be one source tree under another environment: ``--tree solo=. --tree split=.
--tree-env split:HI_MOE_LORA_SOLO=off`` times one checkout with and without a switch.

Cases are ``shape:M:rank[/max_rank]:adapters`` as in ``bench_lora.py --sweep-cases``, and
``rank/max_rank b<r>`` (``gate_up:64:16/64b16:8``): B stored at rank ``r`` beside A padded to the
max rank, the layout vLLM's padded B would have at the adapters' real rank. The table
gives µs per call, the median over rounds, and each tree's ratio to the first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _worker(tree: Path, cases: list[str], replays: int, time_them: bool) -> None:
    """Run in a child process: import the tree's package first, so that ``bench_lora`` (which
    puts this checkout on ``sys.path``) binds to the tree's kernel."""
    sys.path.insert(0, str(tree))
    import hi_moe_lora.kernels.triton_kernel as kernel_module

    if not str(Path(kernel_module.__file__).resolve()).startswith(str(tree.resolve())):
        raise SystemExit(f"imported {kernel_module.__file__}, not the tree {tree}")
    kernel_module.precompile_prefill_variants = lambda *args, **kwargs: 0
    sys.path.insert(0, str(HERE))
    import bench_lora  # type: ignore[import-not-found]
    import torch

    from hi_moe_lora.kernels.reference_loops import lora_linear_reference
    from hi_moe_lora.kernels.worklist import WorkListBuffers

    for case in cases:
        (shape, m, rank, max_rank, adapters), b_rank = bench_lora.parse_case_with_stored_b(case)
        k, widths = bench_lora.SHAPES[shape]
        adapters = min(adapters, m)
        slots = bench_lora._slots_for(m, adapters)
        gen = torch.Generator(device="cuda").manual_seed(m * 7 + rank)
        copies = bench_lora._copy_pool(k, widths, rank, max_rank, m, gen, b_rank)
        work = WorkListBuffers(max(m, 16), bench_lora.SLOTS, "cuda")
        work.update(slots.numpy(), [rank] * bench_lora.SLOTS)

        def call(c: Any, work: Any = work) -> Any:
            x, y, a, b = c
            kw = bench_lora.narrow_kwargs(kernel_module.launch_fused_lora, b)
            return lambda: kernel_module.launch_fused_lora(
                y, x, a, b, work.tiles, work.counters, 1.0, 0, True, **kw
            )

        x, y, a, b = copies[0]
        y0 = y.clone()
        ref = lora_linear_reference(y0, x, a, b, slots, 1.0)
        call(copies[0])()
        err = (y.double().cpu() - ref).abs().max().item()
        y.copy_(y0)
        us = bench_lora._graph_time([call(c) for c in copies], replays) if time_them else 0.0
        print(json.dumps({"case": case, "us": us, "err": err}), flush=True)


def _tree_env(items: list[str]) -> dict[str, dict[str, str]]:
    """``NAME:KEY=VALUE`` items as each tree's extra environment."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        name, _, assignment = item.partition(":")
        key, eq, value = assignment.partition("=")
        if not (name and key and eq):
            raise SystemExit(f"--tree-env {item!r}: expected NAME:KEY=VALUE")
        out.setdefault(name, {})[key] = value
    return out


def _run_worker(
    name: str,
    tree: Path,
    cases: list[str],
    replays: int,
    time_them: bool,
    cache: Path,
    extra_env: dict[str, str],
) -> list[dict[str, Any]]:
    """Run the worker for tree ``name`` under the environment plus ``extra_env``."""
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache / name), PYTHONUNBUFFERED="1")
    env.update(extra_env)
    argv = [sys.executable, __file__, "--worker", str(tree), "--cases", ",".join(cases)]
    argv += ["--replays", str(replays)] + ([] if time_them else ["--compile-only"])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or len(rows) != len(cases):
        tail = "\n".join(done.stderr.splitlines()[-15:])
        raise SystemExit(f"tree {name} failed on {cases} (exit {done.returncode}):\n{tail}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH (repeatable)")
    parser.add_argument(
        "--tree-env",
        action="append",
        default=[],
        help="NAME:KEY=VALUE, the environment of tree NAME's workers (repeatable)",
    )
    parser.add_argument("--cases", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--cache", type=Path, help="Triton caches (default: a new temporary directory)"
    )
    parser.add_argument(
        "--compile-first-only",
        action="store_true",
        help="only the parallel compiles (fill --cache for a later call)",
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    if args.worker is not None:
        _worker(args.worker, cases, args.replays, not args.compile_only)
        return 0
    trees = dict(item.split("=", 1) for item in args.tree)
    if not trees:
        parser.error("give at least one --tree NAME=PATH")
    tree_env = _tree_env(args.tree_env)
    unknown = set(tree_env) - set(trees)
    if unknown:
        parser.error(f"--tree-env names trees not given: {sorted(unknown)}")
    cache = args.cache or Path(tempfile.mkdtemp(prefix="ab-kernels-"))
    # Compile every (tree, case) in parallel; the timing runs then hit the caches.
    jobs = [(name, Path(path), case) for name, path in trees.items() for case in cases]
    with ThreadPoolExecutor(args.jobs) as pool:
        errors = list(
            pool.map(
                lambda job: _run_worker(
                    job[0], job[1], [job[2]], 1, False, cache, tree_env.get(job[0], {})
                )[0]["err"],
                jobs,
            )
        )
    err = {(name, case): e for (name, _, case), e in zip(jobs, errors, strict=True)}
    print(f"compiled {len(jobs)} (tree, case) pairs", flush=True)
    if args.compile_first_only:
        return 0
    times: dict[tuple[str, str], list[float]] = {}
    names = list(trees)
    for round_index in range(args.rounds):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            rows = _run_worker(
                name, Path(trees[name]), cases, args.replays, True, cache, tree_env.get(name, {})
            )
            for row in rows:
                times.setdefault((name, row["case"]), []).append(row["us"])
        print(f"round {round_index + 1} done", flush=True)
    header = "| case | " + " | ".join(names) + " |"
    print(header + "\n|" + "---|" * (len(names) + 1))
    for case in cases:
        base = statistics.median(times[(names[0], case)])
        cells = []
        for name in names:
            us = statistics.median(times[(name, case)])
            cells.append(f"{us:.1f} ({us / base:.2f}) e{err[(name, case)]:.2g}")
        print(f"| {case} | " + " | ".join(cells) + " |")
    if args.out is not None:
        rows = [
            {"tree": n, "case": c, "us": times[(n, c)], "err": err[(n, c)]}
            for n in names
            for c in cases
        ]
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
