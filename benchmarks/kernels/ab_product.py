"""The fused GEMM's per-call product benchmark on several source trees, rounds interleaved, each
route's time summed over a decoder layer (GPU benchmark tooling; the summary runs anywhere).

``bench_fused_gemm.py --product`` times every route of one tree's kernels in one process. Run
one tree after another, whatever drifts over the minutes (clocks, a warming card) favours the
tree that ran first, and the "LoRA adds" columns subtract a cuBLAS time measured apart that
moves by itself: gate_up's at 8 rows read 59.6 µs in one tree's run and 65.0 in the next
(twenty-ninth window). This script runs the benchmark once per tree per round, in the order
A B C, then C B A, and so on, each from inside its own tree (its kernels first on
``sys.path``), keeps every run's JSON, and compares the trees by each route's absolute time
summed over the layer's shapes (qkv, o, gate_up, down: one decoder layer's calls), the median
over rounds, with each tree's ratio to the first. The ``cublas`` route runs the same code in
every tree, so its ratios show the comparison's noise: 0.955-1.052 over one run a tree in the
twenty-ninth window, against candidates within 0.973-1.019 of the shipped kernels.

    python3 benchmarks/kernels/ab_product.py --tree shipped=.kit/trees/shipped \\
        --tree both=.kit/trees/both --rounds 2 --out $OUT/ab [-- --ms 8 --adapters 1 16]
    python3 benchmarks/kernels/ab_product.py --summarize shipped=a.json,a2.json both=b.json

Arguments after ``--`` go to ``bench_fused_gemm.py`` (``--product`` and ``--out`` are this
script's). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path("benchmarks/kernels/bench_fused_gemm.py")

#: A case of the product benchmark: rows, distinct adapters, route.
Case = tuple[int, int, str]


def round_order(names: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, tree) in run order: the trees as given in odd rounds, reversed in even ones, so
    each tree runs as often early as late."""
    order: list[tuple[int, str]] = []
    for index in range(rounds):
        trees = names if index % 2 == 0 else list(reversed(names))
        order.extend((index + 1, name) for name in trees)
    return order


def layer_sums(rows: list[dict[str, Any]]) -> dict[Case, float]:
    """Each route's µs summed over the shapes of one (rows, adapters) pair, for the routes every
    one of those shapes has."""
    by_pair: dict[tuple[int, int], list[dict[str, float]]] = {}
    for row in rows:
        by_pair.setdefault((int(row["m"]), int(row["adapters"])), []).append(row["us"])
    sums: dict[Case, float] = {}
    for (m, adapters), times in by_pair.items():
        shared = set(times[0]).intersection(*times[1:])
        for route in shared:
            sums[(m, adapters, route)] = sum(shape[route] for shape in times)
    return sums


def compare(runs: dict[str, list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per case, each tree's median layer sum over its runs and its ratio to the first tree's;
    only the cases every run of every tree has. Rows sorted by rows, adapters, route."""
    sums = {name: [layer_sums(rows) for rows in tree_runs] for name, tree_runs in runs.items()}
    every = [set(run) for tree_runs in sums.values() for run in tree_runs]
    if not every:
        return []
    cases = sorted(set.intersection(*every))
    first = next(iter(runs))
    table: list[dict[str, Any]] = []
    for case in cases:
        medians = {name: statistics.median(run[case] for run in sums[name]) for name in sums}
        table.append(
            {
                "m": case[0],
                "adapters": case[1],
                "route": case[2],
                "us": medians,
                "ratio": {name: medians[name] / medians[first] for name in medians},
                "spread": {
                    name: max(run[case] for run in sums[name])
                    - min(run[case] for run in sums[name])
                    for name in sums
                },
            }
        )
    return table


def markdown(table: list[dict[str, Any]], names: list[str]) -> str:
    """The comparison as a Markdown table: µs a layer (median over rounds, range over rounds in
    brackets), then each later tree's ratio to the first."""
    head = ["M", "adapters", "route"]
    head += [f"{name} µs" for name in names]
    head += [f"{name} ÷ {names[0]}" for name in names[1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table:
        cells = [str(row["m"]), str(row["adapters"]), row["route"]]
        cells += [f"{row['us'][name]:.1f} ({row['spread'][name]:.1f})" for name in names]
        cells += [f"{row['ratio'][name]:.3f}" for name in names[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _named(values: list[str], flag: str) -> dict[str, str]:
    named: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise SystemExit(f"{flag} takes NAME=VALUE, got {value!r}")
        if name in named:
            raise SystemExit(f"{flag}: {name!r} given twice")
        named[name] = rest
    return named


def _run_tree(tree: Path, out: Path, bench_args: list[str]) -> list[dict[str, Any]]:
    script = tree / BENCH
    if not script.is_file():
        raise SystemExit(f"{tree} holds no {BENCH}")
    command = [sys.executable, str(BENCH), "--product", "--out", str(out.resolve()), *bench_args]
    began = time.monotonic()
    subprocess.run(command, cwd=tree, check=True)
    print(f"{tree}: {time.monotonic() - began:.0f} s -> {out}", flush=True)
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    bench_args: list[str] = []
    if "--" in args_in:
        split = args_in.index("--")
        args_in, bench_args = args_in[:split], args_in[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, help="folder for every run's JSON and the summary")
    parser.add_argument(
        "--summarize",
        nargs="+",
        default=[],
        metavar="NAME=FILE[,FILE...]",
        help="compare saved product results instead of running anything",
    )
    args = parser.parse_args(args_in)
    if bool(args.tree) == bool(args.summarize):
        parser.error("give either --tree (run) or --summarize (saved results)")
    if args.tree and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.tree and args.out is None:
        parser.error("--out is needed to run the trees")
    if args.out is not None:  # (after every check: a refused command line leaves nothing)
        args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[list[dict[str, Any]]]] = {}
    if args.summarize:
        for name, files in _named(args.summarize, "--summarize").items():
            runs[name] = [json.loads(Path(file).read_text()) for file in files.split(",")]
    else:
        trees = {name: Path(tree) for name, tree in _named(args.tree, "--tree").items()}
        for round_number, name in round_order(list(trees), args.rounds):
            out = args.out / f"{name}.r{round_number}.json"
            runs.setdefault(name, []).append(_run_tree(trees[name], out, bench_args))
    table = compare(runs)
    text = markdown(table, list(runs))
    print(text)
    if args.out is not None:
        (args.out / "summary.md").write_text(text + "\n")
        (args.out / "summary.json").write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
