"""``hi-moe-lora audit``: the audit log of state changes, newest first, through the admin API."""

from __future__ import annotations

import argparse
import json
from typing import Any

from hi_moe_lora.app.cli.remote import common_options, run_with_client
from hi_moe_lora.control_api import ControlPlaneClient


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "audit",
        parents=[common_options(timeout_s=30.0)],
        help="who changed what, when (newest first)",
    )
    parser.add_argument("--limit", type=int, default=50, help="events (default: %(default)s)")
    parser.add_argument("--before-id", type=int, default=None, help="older than this event id")
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--actor", default=None, help="a token's name (or _anonymous, _system)")
    parser.add_argument("--action", default=None, help="e.g. version.promote, token.revoke")
    parser.add_argument("--since", default=None, help="ISO 8601 with a time zone")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        page = client.audit(
            limit=args.limit,
            before_id=args.before_id,
            adapter=args.adapter,
            actor=args.actor,
            action=args.action,
            since=args.since,
        )
        if args.json:
            print(json.dumps(page, indent=2, sort_keys=True))
            return
        for event in page.get("events", []):
            subject = event["adapter"] or ""
            if event["version"]:
                subject += f"@{event['version']}"
            change = _change(event["before"], event["after"])
            print(
                f"{event['id']:>6}  {event['at']}  {event['actor']:<16} {event['action']:<24} "
                f"{subject} {change}".rstrip()
            )
        if page.get("next_before_id") is not None:
            print(f"(more: --before-id {page['next_before_id']})")

    return run_with_client(args, action)


def _change(before: Any, after: Any) -> str:
    def compact(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)

    if before is None and after is None:
        return ""
    if before is None:
        return compact(after)
    if after is None:
        return f"{compact(before)} -> (gone)"
    return f"{compact(before)} -> {compact(after)}"
