"""``hi-moe-lora dispatch`` and ``hi-moe-lora gaps``: the dispatcher from the command line.

``dispatch "objective" --ref PATH …`` prints the decision (a dry run, nothing is generated) and
its reasons; ``gaps list`` / ``gaps summary`` show the tasks no specialist matched. Every call
goes through :class:`hi_moe_lora.control_api.ControlPlaneClient`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hi_moe_lora.app.cli.remote import common_options, run_with_client
from hi_moe_lora.control_api import ControlPlaneClient


def add_parser(subparsers: Any) -> None:
    common = common_options(timeout_s=60.0)
    dispatch: argparse.ArgumentParser = subparsers.add_parser(
        "dispatch",
        parents=[common],
        help="which specialist would serve a task, and why (dry run)",
    )
    dispatch.add_argument("objective", help="the task, as a user would write it")
    dispatch.add_argument(
        "--ref", action="append", default=[], dest="refs", help="a file the task is about"
    )
    dispatch.set_defaults(handler=run_dispatch)

    gaps: argparse.ArgumentParser = subparsers.add_parser(
        "gaps", help="tasks no specialist matched (routing gaps)"
    )
    actions = gaps.add_subparsers(dest="gaps_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="newest first")
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--offset", type=int, default=0)
    listing.add_argument("--since", default=None, help="ISO 8601 time with a zone")
    listing.set_defaults(handler=run_gaps_list)
    summary = actions.add_parser("summary", parents=[common], help="frequent terms, domains")
    summary.add_argument("--top", type=int, default=15)
    summary.add_argument("--since", default=None, help="ISO 8601 time with a zone")
    summary.set_defaults(handler=run_gaps_summary)


def describe(decision: dict[str, Any]) -> str:
    """A decision in a few lines: who serves it, by which tier, and the signals behind it."""
    if decision["specialist"]:
        head = f"{decision['specialist']} ({decision['model']}), by {decision['tier']}"
    else:
        head = f"base model ({decision['model']}): {decision['fallback_reason']}"
    lines = [head]
    if decision["domains"]:
        lines.append("domains: " + ", ".join(decision["domains"]))
    if decision["scores"]:
        ranked = sorted(decision["scores"].items(), key=lambda item: -item[1])
        lines.append("scores:  " + ", ".join(f"{name} {score:.3f}" for name, score in ranked))
    for signal in decision["signals"][:12]:
        lines.append(
            f"  {signal['tier']:<9} {signal['domain']:<18} {signal['term']!r} "
            f"({signal['weight']:.2f})"
        )
    return "\n".join(lines)


def run_dispatch(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        decision = client.dispatch(args.objective, args.refs)
        print(json.dumps(decision, indent=2) if args.json else describe(decision))

    return run_with_client(args, action)


def run_gaps_list(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        page = client.routing_gaps(limit=args.limit, offset=args.offset, since=args.since)
        if args.json:
            print(json.dumps(page, indent=2))
            return
        print(f"{page['total']} gaps; showing {len(page['gaps'])} from {page['offset']}")
        for gap in page["gaps"]:
            nearest = gap["nearest_domain"] or "-"
            excerpt = " ".join(gap["task_excerpt"].split())[:80]
            print(f"{gap['created_at'][:19]}  nearest={nearest:<14} {excerpt}")

    return run_with_client(args, action)


def run_gaps_summary(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        summary = client.routing_gap_summary(top=args.top, since=args.since)
        if args.json:
            print(json.dumps(summary, indent=2))
            return
        print(f"{summary['gaps']} gaps")
        for title, key in (("unmatched terms", "terms"), ("nearest domains", "nearest_domains")):
            counted = ", ".join(f"{c['value']} ({c['count']})" for c in summary[key]) or "-"
            print(f"{title}: {counted}")

    return run_with_client(args, action)
