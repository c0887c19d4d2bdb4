"""ab_product.py: interleaved round order, layer sums, the comparison and its command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.kernels.ab_product import compare, layer_sums, main, markdown, round_order


def _row(shape: str, m: int, adapters: int, **us: float) -> dict[str, Any]:
    return {"shape": shape, "m": m, "adapters": adapters, "slot_rank": 16, "us": us}


def _layer(m: int, adapters: int, scale: float) -> list[dict[str, Any]]:
    """Four shapes of one layer; the fused route takes ``scale`` times cuBLAS's time."""
    rows = []
    for shape, cublas in (("qkv", 17.0), ("o", 14.0), ("gate_up", 60.0), ("down", 34.0)):
        rows.append(_row(shape, m, adapters, cublas=cublas, fused=cublas * scale))
    return rows


def test_rounds_alternate_the_order_so_each_tree_runs_early_and_late() -> None:
    assert round_order(["a", "b", "c"], 3) == [
        (1, "a"),
        (1, "b"),
        (1, "c"),
        (2, "c"),
        (2, "b"),
        (2, "a"),
        (3, "a"),
        (3, "b"),
        (3, "c"),
    ]
    assert round_order(["a"], 2) == [(1, "a"), (2, "a")]


def test_a_layer_sum_adds_each_route_over_the_shapes_and_skips_routes_a_shape_lacks() -> None:
    rows = [
        _row("qkv", 8, 1, cublas=17.0, fused=20.0, split=30.0),
        _row("o", 8, 1, cublas=14.0, fused=15.5),
        _row("qkv", 64, 1, cublas=18.0, fused=19.0),
    ]
    sums = layer_sums(rows)
    assert sums == {
        (8, 1, "cublas"): 31.0,
        (8, 1, "fused"): 35.5,
        (64, 1, "cublas"): 18.0,
        (64, 1, "fused"): 19.0,
    }


def test_the_comparison_takes_each_trees_median_over_rounds_and_its_ratio_to_the_first() -> None:
    runs = {
        "shipped": [_layer(8, 1, 1.10), _layer(8, 1, 1.20), _layer(8, 1, 1.12)],
        "candidate": [_layer(8, 1, 1.05), _layer(8, 1, 1.07)],
    }
    table = compare(runs)
    fused = next(row for row in table if row["route"] == "fused")
    layer = 17.0 + 14.0 + 60.0 + 34.0
    assert fused["us"]["shipped"] == pytest.approx(layer * 1.12)
    assert fused["us"]["candidate"] == pytest.approx(layer * 1.06)
    assert fused["ratio"]["candidate"] == pytest.approx(1.06 / 1.12)
    assert fused["ratio"]["shipped"] == pytest.approx(1.0)
    assert fused["spread"]["shipped"] == pytest.approx(layer * 0.10)
    cublas = next(row for row in table if row["route"] == "cublas")
    assert cublas["ratio"]["candidate"] == pytest.approx(1.0)
    assert [(row["m"], row["adapters"], row["route"]) for row in table] == [
        (8, 1, "cublas"),
        (8, 1, "fused"),
    ]


def test_a_case_missing_from_one_run_is_left_out_of_the_comparison() -> None:
    runs = {"a": [_layer(8, 1, 1.1) + _layer(64, 1, 1.1)], "b": [_layer(8, 1, 1.0)]}
    assert {row["m"] for row in compare(runs)} == {8}
    assert compare({}) == []


def test_the_markdown_table_has_a_column_per_tree_and_a_ratio_per_later_tree() -> None:
    runs = {"shipped": [_layer(8, 16, 1.2)], "both": [_layer(8, 16, 1.1)]}
    text = markdown(compare(runs), ["shipped", "both"])
    lines = text.splitlines()
    assert lines[0] == "| M | adapters | route | shipped µs | both µs | both ÷ shipped |"
    assert lines[1] == "|---|---|---|---|---|---|"
    assert lines[3] == "| 8 | 16 | fused | 150.0 (0.0) | 137.5 (0.0) | 0.917 |"


def test_summarize_reads_saved_results_and_writes_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a1.json").write_text(json.dumps(_layer(8, 1, 1.2)))
    (tmp_path / "a2.json").write_text(json.dumps(_layer(8, 1, 1.4)))
    (tmp_path / "b.json").write_text(json.dumps(_layer(8, 1, 1.1)))
    out = tmp_path / "out"
    code = main(
        [
            "--summarize",
            f"a={tmp_path / 'a1.json'},{tmp_path / 'a2.json'}",
            f"b={tmp_path / 'b.json'}",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| 8 | 1 | fused | 162.5 (25.0) | 137.5 (0.0) | 0.846 |" in printed
    assert (out / "summary.md").read_text() == printed
    saved = json.loads((out / "summary.json").read_text())
    assert saved[1]["route"] == "fused"
    assert saved[1]["ratio"]["b"] == pytest.approx(1.1 / 1.3)


_FAKE_BENCH = """\
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--out") + 1]
with open(os.path.join(os.path.dirname(out), "order.txt"), "a") as log:
    log.write(os.path.basename(os.getcwd()) + " " + " ".join(args) + "\\n")
scale = float(open("scale.txt").read())
shapes = (("qkv", 17.0), ("o", 14.0))
rows = [{"shape": s, "m": 8, "adapters": 1, "us": {"fused": t * scale}} for s, t in shapes]
json.dump(rows, open(out, "w"))
"""


def _fake_tree(root: Path, name: str, scale: float) -> Path:
    """A source tree whose product benchmark is a stand-in that logs its call (the thing under
    test is the interleaving and the bookkeeping, not the GPU benchmark)."""
    tree = root / name
    (tree / "benchmarks" / "kernels").mkdir(parents=True)
    (tree / "benchmarks" / "kernels" / "bench_fused_gemm.py").write_text(_FAKE_BENCH)
    (tree / "scale.txt").write_text(str(scale))
    return tree


def test_the_trees_run_from_inside_themselves_in_interleaved_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _fake_tree(tmp_path, "first", 1.0)
    second = _fake_tree(tmp_path, "second", 0.5)
    out = tmp_path / "runs"
    args = ["--tree", f"a={first}", "--tree", f"b={second}", "--rounds", "2"]
    code = main([*args, "--out", str(out), "--", "--ms", "8"])
    assert code == 0
    calls = (out / "order.txt").read_text().splitlines()
    assert [call.split()[0] for call in calls] == ["first", "second", "second", "first"]
    assert all(call.split()[1] == "--product" and call.endswith("--ms 8") for call in calls)
    assert sorted(p.name for p in out.glob("*.r*.json")) == [
        "a.r1.json",
        "a.r2.json",
        "b.r1.json",
        "b.r2.json",
    ]
    assert "| 8 | 1 | fused | 31.0 (0.0) | 15.5 (0.0) | 0.500 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "either --tree"),
        (["--tree", "a=.", "--summarize", "a=x.json"], "either --tree"),
        (["--tree", "a=."], "--out is needed"),
        (["--tree", "a=.", "--rounds", "0", "--out", "o"], "at least 1"),
    ],
)
def test_a_wrong_command_line_is_refused_with_a_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def test_a_tree_without_the_benchmark_or_a_nameless_tree_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="holds no"):
        main(["--tree", f"a={tmp_path}", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        main(["--tree", str(tmp_path), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="given twice"):
        main(["--summarize", "a=x.json", "a=y.json"])
