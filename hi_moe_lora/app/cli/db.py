"""``hi-moe-lora db upgrade|current|check|downgrade``: the registry's schema migrations."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "db", help="database schema migrations (Alembic)"
    )
    parser.add_argument(
        "--database-url", default=None, help="default: $HI_MOE_LORA_DATABASE_URL or the settings"
    )
    commands = parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = commands.add_parser("upgrade", help="upgrade to the latest schema (or --revision)")
    upgrade.add_argument("--revision", default="head")
    upgrade.set_defaults(handler=run_upgrade)
    current = commands.add_parser("current", help="print the database's revision")
    current.set_defaults(handler=run_current)
    check = commands.add_parser("check", help="exit 0 if the database is at the latest schema")
    check.set_defaults(handler=run_check)
    downgrade = commands.add_parser("downgrade", help="downgrade to REVISION ('base': empty)")
    downgrade.add_argument("revision")
    downgrade.set_defaults(handler=run_downgrade)


def _url(args: argparse.Namespace) -> str:
    if args.database_url:
        return str(args.database_url)
    from registry.settings import ControlPlaneSettings

    return ControlPlaneSettings().database_url


def run_upgrade(args: argparse.Namespace) -> int:
    from registry.db import migrate

    url = _url(args)
    migrate.upgrade(url, args.revision)
    print(f"database at {migrate.current_revision(url)}")
    return 0


def run_current(args: argparse.Namespace) -> int:
    from registry.db import migrate

    revision = migrate.current_revision(_url(args))
    head = migrate.head_revision()
    print(f"{revision or '(empty)'}{' (head)' if revision == head else ''}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    from registry.db import migrate

    revision = migrate.current_revision(_url(args))
    head = migrate.head_revision()
    if revision != head:
        print(
            f"database at {revision or '(empty)'}, latest is {head}: run `hi-moe-lora db upgrade`",
            file=sys.stderr,
        )
        return 1
    print(f"database at the latest schema ({head})")
    return 0


def run_downgrade(args: argparse.Namespace) -> int:
    from registry.db import migrate

    url = _url(args)
    migrate.downgrade(url, args.revision)
    print(f"database at {migrate.current_revision(url) or '(empty)'}")
    return 0
