"""``hi-moe-lora tokens create|list|revoke``: access tokens through the admin API.

``create`` prints the new secret once (on stdout, alone on its line unless ``--json``, so a script
can capture it); nothing else ever shows it again. The calling token comes from ``--token`` or
``HI_MOE_LORA_ADMIN_TOKEN`` and needs the admin scope.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hi_moe_lora.app.cli.remote import common_options, run_with_client
from hi_moe_lora.control_api import ControlPlaneClient

SCOPES = ("admin", "resolver", "inference", "metrics")


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tokens", help="create, list and revoke access tokens (admin, resolver, API keys)"
    )
    commands = parser.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    common = common_options(timeout_s=30.0)
    create = commands.add_parser(
        "create", parents=[common], help="create a token and print its secret (shown once)"
    )
    create.add_argument("name", help="shown in the statistics and the audit log")
    create.add_argument(
        "--scope",
        choices=SCOPES,
        default="inference",
        help="admin: everything; resolver: vLLM hosts' look-ups; inference: /v1 (an API key); "
        "metrics: /metrics and /v1/health (default: %(default)s)",
    )
    create.set_defaults(handler=run_create)
    commands.add_parser(
        "list", parents=[common], help="list tokens (never their secrets)"
    ).set_defaults(handler=run_list)
    revoke = commands.add_parser("revoke", parents=[common], help="revoke a token at once")
    revoke.add_argument("name")
    revoke.set_defaults(handler=run_revoke)


def run_create(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        created = client.create_token(args.name, args.scope)
        if args.json:
            print(json.dumps(created, indent=2, sort_keys=True))
            return
        print(
            f"created {created['scope']} token {created['name']!r}; its secret, shown only now:",
            file=sys.stderr,
        )
        print(created["token"])

    return run_with_client(args, action)


def run_list(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        tokens = client.list_tokens()
        if args.json:
            print(json.dumps(tokens, indent=2, sort_keys=True))
            return
        rows = [("NAME", "SCOPE", "CREATED", "REVOKED", "LAST USED")]
        rows += [
            (
                t["name"],
                t["scope"],
                t["created_at"],
                t["revoked_at"] or "-",
                t["last_used_at"] or "-",
            )
            for t in tokens
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())

    return run_with_client(args, action)


def run_revoke(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        revoked = client.revoke_token(args.name)
        if args.json:
            print(json.dumps(revoked, indent=2, sort_keys=True))
            return
        print(f"revoked {revoked['scope']} token {revoked['name']!r} at {revoked['revoked_at']}")

    return run_with_client(args, action)
