"""Evaluate the dispatcher on the labelled set ``benchmarks/dispatch/data/tasks.jsonl``.

The fleet is the seed's eight specialists, registered with domain names only (no keywords, no
exemplars, no history): what a user gets out of the box. For each split separately the script
reports overall top-1, top-1 on ``no-signal`` tasks, accuracy per deciding tier and per label,
fallback precision and recall (positive = "the base model"), a confusion matrix and the
latency of one decision (median, p99) for tiers 1-2 alone and with tier 3, as markdown on
stdout (``--json PATH`` writes the same numbers). ``--check`` makes the exit status non-zero
when a target is missed.

Latency: every task is decided ``--repeat`` times by each engine (tiers 1-2 alone: a
dispatcher without an embedder; with tier 3: the full one, model loaded once and warmed up);
a task's latency is the median of its runs, and the table gives the median and p99 of those
over the split, measured with ``--threads`` torch threads (2 by default).

The held-out rule (data/README.md): the v1 ``heldout`` split of ``tasks.jsonl`` and the v2
set ``data/heldout_v2.jsonl`` were each evaluated once (2026-11-23) and have been tuning
material since, so ``--errors`` lists their misroutes (``--data data/heldout_v2.jsonl --split
heldout``). The fresh held-out set, ``data/heldout_v3.jsonl``, is evaluated once by the
integrator: this script refuses any ``--data`` file whose name starts with ``heldout_v3``;
``--heldout-v3`` evaluates it (split ``heldout``, never with ``--errors``: misroutes of the
held-out set are not listed, so nobody tunes on them).

Run: ``.venv/bin/python benchmarks/dispatch/evaluate.py --split tune [--errors] [--check]``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from registry.dispatch import (  # noqa: E402
    Decision,
    Dispatcher,
    Specialist,
    Task,
    load_default_embedder,
)

DATA = Path(__file__).resolve().parent / "data" / "tasks.jsonl"
#: Data files this script refuses (the fresh held-out set; data/README.md).
REFUSED_PREFIX = "heldout_v3"
FLEET = (
    Specialist("python-lora", ("python", "debugging", "testing")),
    Specialist("cuda-lora", ("cuda", "gpu optimization")),
    Specialist("math-lora", ("math", "algorithms", "proofs")),
    Specialist("systems-lora", ("c", "c++", "low-level")),
    Specialist("web-lora", ("javascript", "typescript", "html/css")),
    Specialist("data-lora", ("sql", "pandas", "data pipelines")),
    Specialist("devops-lora", ("docker", "k8s", "ci/cd", "shell")),
    Specialist("docs-lora", ("documentation", "markdown")),
)
NULL = "null"
TARGETS = {
    "top1": 0.95,
    "no_signal_top1": 0.90,
    "unrelated_fallback": 0.95,
    "lexical_p99_ms": 1.0,
    "full_p99_ms": 20.0,
}


@dataclass
class Outcome:
    task_id: str
    label: str
    predicted: str
    tier: str
    tags: list[str]
    reason: str | None
    lexical_ms: float = 0.0
    full_ms: float = 0.0
    used_tier3: bool = False


@dataclass
class Report:
    split: str
    n: int
    metrics: dict[str, float] = field(default_factory=dict)
    per_tier: dict[str, dict[str, float]] = field(default_factory=dict)
    per_label: dict[str, dict[str, float]] = field(default_factory=dict)
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    failed_targets: list[str] = field(default_factory=list)


def load(path: Path, split: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [row for row in rows if split == "all" or row["split"] == split]


def timed(engine: Dispatcher, task: Task) -> tuple[Decision, float]:
    started = time.perf_counter_ns()
    decision = engine.decide(task)
    return decision, (time.perf_counter_ns() - started) / 1e6


def run(
    rows: list[dict[str, Any]], full: Dispatcher, lexical: Dispatcher, repeat: int
) -> list[Outcome]:
    """Decide every task ``repeat`` times on each engine; a task's latency is the median of
    its runs (a moment of contention from another process is not the task's cost)."""
    outcomes = []
    full.decide(Task("warm up the model once"))
    for row in rows:
        task = Task(row["objective"], tuple(row["context_refs"]))
        runs = [timed(full, task) for _ in range(repeat)]
        decision, full_ms = runs[0][0], statistics.median(ms for _, ms in runs)
        lexical_ms = statistics.median(timed(lexical, task)[1] for _ in range(repeat))
        outcomes.append(
            Outcome(
                task_id=row["id"],
                label=row["label"] or NULL,
                predicted=decision.specialist or NULL,
                tier=decision.tier,
                tags=list(row["tags"]),
                reason=decision.fallback_reason,
                lexical_ms=lexical_ms,
                full_ms=full_ms,
                used_tier3="embedding" in decision.tier_best,
            )
        )
    return outcomes


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]


def accuracy(items: list[Outcome]) -> float:
    return sum(o.label == o.predicted for o in items) / len(items) if items else float("nan")


def summarise(split: str, outcomes: list[Outcome]) -> Report:
    report = Report(split, len(outcomes))
    no_signal = [o for o in outcomes if "no-signal" in o.tags]
    unrelated = [o for o in outcomes if o.label == NULL]
    predicted_null = [o for o in outcomes if o.predicted == NULL]
    true_null = sum(o.label == NULL for o in predicted_null)
    tier3 = [o.full_ms for o in outcomes if o.used_tier3]
    report.metrics = {
        "top1": accuracy(outcomes),
        "no_signal_top1": accuracy(no_signal),
        "overlap_top1": accuracy([o for o in outcomes if "overlap" in o.tags]),
        "decoy_top1": accuracy([o for o in outcomes if "decoy" in o.tags]),
        "unrelated_fallback": accuracy(unrelated),
        "fallback_precision": true_null / len(predicted_null) if predicted_null else float("nan"),
        "fallback_recall": accuracy(unrelated),
        "lexical_median_ms": statistics.median(o.lexical_ms for o in outcomes),
        "lexical_p99_ms": p99([o.lexical_ms for o in outcomes]),
        "full_median_ms": statistics.median(o.full_ms for o in outcomes),
        "full_p99_ms": p99([o.full_ms for o in outcomes]),
        "tier3_share": len(tier3) / len(outcomes),
        "tier3_median_ms": statistics.median(tier3) if tier3 else float("nan"),
        "tier3_p99_ms": p99(tier3) if tier3 else float("nan"),
    }
    for tier in ("keyword", "extension", "embedding", "fallback"):
        items = [o for o in outcomes if o.tier == tier]
        report.per_tier[tier] = {"decisions": len(items), "accuracy": accuracy(items)}
    labels = [spec.name for spec in FLEET] + [NULL]
    for label in labels:
        items = [o for o in outcomes if o.label == label]
        report.per_label[label] = {"tasks": len(items), "accuracy": accuracy(items)}
    counts = Counter((o.label, o.predicted) for o in outcomes)
    report.confusion = {a: {b: counts[(a, b)] for b in labels} for a in labels}
    for name, target in TARGETS.items():
        value = report.metrics[name]
        missed = value > target if name.endswith("_ms") else value < target
        if missed:
            report.failed_targets.append(f"{name} {value:.3f} (target {target})")
    return report


def markdown(report: Report) -> str:
    m = report.metrics
    short = {spec.name: spec.name.removesuffix("-lora") for spec in FLEET} | {NULL: NULL}
    lines = [
        f"## split `{report.split}` ({report.n} tasks)",
        "",
        "| metric | value | target |",
        "|---|---:|---:|",
    ]
    for name, value in m.items():
        target = TARGETS.get(name)
        shown = f"{value:.3f}" if name.endswith("_ms") else f"{100 * value:.1f} %"
        goal = (
            ""
            if target is None
            else (f"< {target}" if name.endswith("_ms") else f">= {target:.0%}")
        )
        lines.append(f"| {name} | {shown} | {goal} |")
    lines += ["", "| deciding tier | decisions | accuracy |", "|---|---:|---:|"]
    for tier, row in report.per_tier.items():
        lines.append(f"| {tier} | {row['decisions']:.0f} | {100 * row['accuracy']:.1f} % |")
    lines += ["", "| label | tasks | top-1 |", "|---|---:|---:|"]
    for label, row in report.per_label.items():
        lines.append(f"| {label} | {row['tasks']:.0f} | {100 * row['accuracy']:.1f} % |")
    labels = list(report.confusion)
    lines += ["", "confusion (rows: label, columns: decision)", ""]
    lines.append("| | " + " | ".join(short[b] for b in labels) + " |")
    lines.append("|---" * (len(labels) + 1) + "|")
    for a in labels:
        cells = " | ".join(str(report.confusion[a][b] or ".") for b in labels)
        lines.append(f"| {short[a]} | {cells} |")
    verdict = (
        "all targets met"
        if not report.failed_targets
        else "missed: " + "; ".join(report.failed_targets)
    )
    lines += ["", f"**{verdict}**", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--split", choices=("tune", "heldout", "all"), default="tune")
    parser.add_argument("--json", type=Path, help="write the report(s) as JSON here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per task (default 3)")
    parser.add_argument("--no-embeddings", action="store_true", help="tiers 1-2 only")
    parser.add_argument("--errors", action="store_true", help="list misrouted tasks")
    parser.add_argument(
        "--heldout-v3",
        action="store_true",
        help="evaluate the fresh held-out set data/heldout_v3.jsonl (no --errors)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.heldout_v3:
        if args.errors:
            parser.error("--errors never lists the held-out set's misroutes (data/README.md)")
        args.data, args.split = DATA.with_name(f"{REFUSED_PREFIX}.jsonl"), "heldout"
    elif args.data.name.startswith(REFUSED_PREFIX):
        parser.error(
            f"{args.data.name} is the fresh held-out set: not evaluated here (data/README.md)"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    embedder = None if args.no_embeddings else load_default_embedder(num_threads=args.threads)
    full, lexical = Dispatcher(embedder=embedder), Dispatcher()
    full.set_fleet(FLEET)
    lexical.set_fleet(FLEET)
    on, reason = full.embeddings_status
    print(f"tier 3: {'on' if on else 'off'} ({reason})\n")
    rows = load(args.data, args.split)
    splits = ("tune", "heldout") if args.split == "all" else (args.split,)
    reports = []
    rows_by_id = {r["id"]: r["objective"] for r in rows} if args.errors else {}
    for split in splits:
        outcomes = run([r for r in rows if r["split"] == split], full, lexical, args.repeat)
        report = summarise(split, outcomes)
        reports.append(report)
        print(markdown(report))
        if args.errors:
            for o in outcomes:
                if o.label != o.predicted:
                    print(f"- {o.task_id} {o.label} -> {o.predicted} [{o.tier}] {o.reason or ''}")
                    print(f"    {rows_by_id[o.task_id][:160]!r}")
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in reports], indent=2) + "\n")
    return 1 if args.check and any(r.failed_targets for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
