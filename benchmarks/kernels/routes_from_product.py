"""A tile table whose routes for several adapters come from timings of the served op.

``bench_fused_gemm.py --product`` times, per projection, each route a step of several adapters
can take (:class:`hi_moe_lora.kernels.gemm_tiles.SeveralRoute`) on the shipped tiles. This
script reads one or more of its JSON results (the median of each time across them) and writes
the shipped table with each measured shape's ``several`` replaced by the fastest route at the
largest adapter count, where it beats the shipped route by at least ``--margin`` µs. Tiles are
unchanged, so serving the written table beside the shipped one (``gpu_e2e.sh``'s label suffix
``+NAME``) measures the routes alone.

    python benchmarks/kernels/routes_from_product.py r1.json [r2.json ...] \
        --out benchmarks/kernels/tables/NAME.json [--device "NVIDIA H200"] [--margin 0.5]

``ours`` is timed after cuBLAS; a shape whose plan has a plain tile runs it after that tile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.kernels.llama_shapes import PROJECTIONS, packed
from hi_moe_lora.kernels.gemm_tiles import (
    TABLE_FILE,
    GemmPlan,
    SeveralRoute,
    load_table,
    shape_key,
    table_json,
)

#: The bench's time of each route for a step of several adapters (µs per call).
ROUTE_KEYS = {
    SeveralRoute.OURS: "cublas+ours",
    SeveralRoute.FUSED: "fused then ours",
    SeveralRoute.SPLIT: "split, specialized",
    SeveralRoute.ONE_LAUNCH: "one-launch, specialized",
    SeveralRoute.SHRINK_BESIDE: "shrink-beside, specialized",
}
#: (input width, output width) of the bench's projections, as in bench_fused_gemm.py.
SHAPES = {name: packed(name) for name in PROJECTIONS}
#: The bench's time of the op as its shipped plan routes it (the shipped route's own time).
SHIPPED_KEY = "fused, specialized"


def route_times(
    rows: list[dict[str, Any]], shipped: dict[str, SeveralRoute]
) -> dict[str, dict[SeveralRoute, float]]:
    """``{shape: {route: median µs}}`` over the rows of the largest adapter count and rows; the
    shipped route of a shape (``shipped``) timed as the op runs it under its plan."""
    several = [row for row in rows if row["adapters"] > 1]
    if not several:
        raise SystemExit("no row of several adapters in the results")
    adapters = max(row["adapters"] for row in several)
    m = max(row["m"] for row in several)
    chosen = [row for row in several if row["adapters"] == adapters and row["m"] == m]
    times: dict[str, dict[SeveralRoute, float]] = {}
    for shape in dict.fromkeys(row["shape"] for row in chosen):
        mine = [row["us"] for row in chosen if row["shape"] == shape]
        keys = ROUTE_KEYS | ({shipped[shape]: SHIPPED_KEY} if shape in shipped else {})
        times[shape] = {
            route: statistics.median(us[key] for us in mine) for route, key in keys.items()
        }
    return times


def choose(shipped: GemmPlan, times: dict[SeveralRoute, float], margin: float) -> SeveralRoute:
    """The fastest route, unless the shipped one is within ``margin`` µs of it."""
    fastest = min(times, key=lambda route: times[route])
    if times[shipped.several] - times[fastest] < margin:
        return shipped.several
    return fastest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="bench_fused_gemm.py --out files")
    parser.add_argument("--out", type=Path, required=True, help="the table to write")
    parser.add_argument("--device", default="NVIDIA H200", help="the table's GPU, by CUDA name")
    parser.add_argument("--margin", type=float, default=0.5, help="µs to leave a shipped route")
    args = parser.parse_args(argv)
    rows = [row for path in args.results for row in json.loads(path.read_text())]
    table = load_table(TABLE_FILE)
    plans = dict(table.get(args.device, {}))
    if not plans:
        parser.error(f"the shipped table holds no plans for {args.device!r}")
    keys = {shape: shape_key(n, k) for shape, (k, n) in SHAPES.items()}
    shipped_routes = {shape: plans[key].several for shape, key in keys.items() if key in plans}
    changes = []
    for shape, times in route_times(rows, shipped_routes).items():
        if shape not in shipped_routes:
            continue
        key = keys[shape]
        shipped = plans[key]
        route = choose(shipped, times, args.margin)
        listed = ", ".join(
            f"{r.value} {us:.1f}" for r, us in sorted(times.items(), key=lambda t: t[1])
        )
        print(
            f"{shape}: {listed} -> {route.value}"
            + (" (shipped)" if route is shipped.several else "")
        )
        if route is not shipped.several:
            plans[key] = replace(shipped, several=route)
            changes.append(f"{shape} {shipped.several.value} -> {route.value}")
    sources = ", ".join(path.name for path in args.results)
    note = (
        f"The shipped table with the routes for several adapters measured by bench_fused_gemm.py "
        f"--product ({sources}; margin {args.margin} µs): "
        + ("; ".join(changes) if changes else "no change")
        + ". Tiles unchanged."
    )
    args.out.write_text(
        json.dumps(table_json({**table, args.device: plans}, note), indent=1) + "\n"
    )
    print(f"wrote {args.out}: {'; '.join(changes) or 'the shipped routes'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
