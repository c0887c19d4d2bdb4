"""``hi-moe-lora adapters ...``: the registry's admin API from the command line.

Every call goes through :class:`hi_moe_lora.control_api.ControlPlaneClient`. ``register``
follows the registration as it happens (the files fetched or copied, in bytes) with a progress
bar on stderr, then prints the registered version on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hi_moe_lora.app.cli.progress import ProgressBar
from hi_moe_lora.app.cli.remote import CommandError, common_options, run_with_client
from hi_moe_lora.control_api import ControlPlaneClient, ControlPlaneError
from hi_moe_lora.served_names import format_served_name


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "adapters", help="manage registered adapters through the admin API"
    )
    commands = parser.add_subparsers(dest="adapters_command", required=True, metavar="ACTION")
    common = common_options(timeout_s=120.0)

    register = commands.add_parser("register", parents=[common], help="register a version")
    register.add_argument("name")
    register.add_argument("version")
    register.add_argument(
        "source",
        help="adapter directory: a path or file:// URI below the control plane's source roots, "
        "or a URL it allows (https://..., s3://... and other fsspec protocols)",
    )
    register.add_argument("--domain", action="append", default=[], dest="domains")
    register.add_argument("--description", default=None)
    register.set_defaults(handler=run_register)

    commands.add_parser("list", parents=[common], help="list adapters").set_defaults(
        handler=run_list
    )
    show = commands.add_parser("show", parents=[common], help="an adapter and its versions")
    show.add_argument("name")
    show.set_defaults(handler=run_show)
    promote = commands.add_parser("promote", parents=[common], help="make a version active")
    promote.add_argument("name")
    promote.add_argument("version")
    promote.set_defaults(handler=run_promote)
    rollback = commands.add_parser("rollback", parents=[common], help="re-activate the previous")
    rollback.add_argument("name")
    rollback.set_defaults(handler=run_rollback)
    delete = commands.add_parser("delete", parents=[common], help="delete an inactive version")
    delete.add_argument("name")
    delete.add_argument("version")
    delete.set_defaults(handler=run_delete)
    traffic = commands.add_parser(
        "traffic", parents=[common], help="set the A/B split: VERSION=WEIGHT ..."
    )
    traffic.add_argument("name")
    traffic.add_argument("weights", nargs="*", metavar="VERSION=WEIGHT")
    traffic.set_defaults(handler=run_traffic)
    hints = commands.add_parser(
        "hints", parents=[common], help="set the dispatcher's keywords and exemplars"
    )
    hints.add_argument("name")
    hints.add_argument("--keyword", action="append", default=[], dest="keywords")
    hints.add_argument("--exemplar", action="append", default=[], dest="exemplars")
    hints.set_defaults(handler=run_hints)
    resolve = commands.add_parser("resolve", parents=[common], help="what vLLM would load")
    resolve.add_argument("served_name")
    resolve.set_defaults(handler=run_resolve)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _version_rows(versions: list[dict[str, Any]]) -> list[list[str]]:
    rows = [["VERSION", "ID", "ACTIVE", "SHARE", "RANK", "VARIANT", "REQUESTS", "PREVIOUS"]]
    for v in versions:
        rows.append(
            [
                v["version"],
                str(v["lora_int_id"]),
                "*" if v["is_active"] else "",
                f"{v['traffic_share']:.2f}",
                str(v["rank"]),
                v["variant"],
                str(v["request_count"]),
                v["previous_version"] or "",
            ]
        )
    return rows


def _source(source: str) -> str:
    """A relative local path means this directory here: send it absolute."""
    path = Path(source).expanduser()
    if "://" not in source and path.exists():
        return str(path.resolve())
    return source


def _size(count: int) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``, ``4.0 GiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _fetched(copied: int, total: int | None) -> str:
    return f"{_size(copied)} of {_size(total) if total is not None else '?'}"


def _follow_registration(events: Iterator[dict[str, Any]]) -> dict[str, Any]:
    """Draw the bytes copied as ``progress`` events arrive; the ``registered`` version."""
    bar: ProgressBar | None = None
    try:
        for event in events:
            if event.get("event") == "registered":
                version: dict[str, Any] = event["version"]
                return version
            if event.get("event") != "progress":
                continue
            copied = int(event["bytes"])
            total = None if event.get("total") is None else int(event["total"])
            if bar is None:
                bar = ProgressBar(total if total is not None else copied)
            bar.total = max(total if total is not None else copied, copied)
            bar.advance(f"fetched {_fetched(copied, total)}", steps=copied - bar.done)
    finally:
        if bar is not None:
            bar.finish()
    raise ControlPlaneError("the registration stream ended without its outcome")


def run_register(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        events = client.register_events(
            args.name,
            args.version,
            _source(args.source),
            domains=args.domains,
            description=args.description,
        )
        with contextlib.closing(events):
            _print_json(_follow_registration(events))

    return run_with_client(args, action)


def run_list(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        adapters = client.list_adapters()
        if args.json:
            _print_json(adapters)
            return
        rows = [["NAME", "ACTIVE", "VERSIONS", "DOMAINS"]]
        for adapter in adapters:
            rows.append(
                [
                    adapter["name"],
                    adapter["active_version"] or "-",
                    str(len(adapter["versions"])),
                    ",".join(adapter["domains"]),
                ]
            )
        print(_table(rows))

    return run_with_client(args, action)


def run_show(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        adapter = client.get_adapter(args.name)
        if args.json:
            _print_json(adapter)
            return
        print(f"{adapter['name']}: {adapter['description'] or ''}".rstrip(": "))
        print(_table(_version_rows(adapter["versions"])))

    return run_with_client(args, action)


def run_promote(args: argparse.Namespace) -> int:
    return run_with_client(
        args, lambda client: _print_json(client.promote(args.name, args.version))
    )


def run_rollback(args: argparse.Namespace) -> int:
    return run_with_client(args, lambda client: _print_json(client.rollback(args.name)))


def run_delete(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        client.delete(args.name, args.version)
        print(f"deleted {format_served_name(args.name, args.version)}")

    return run_with_client(args, action)


def _parse_weights(items: list[str]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for item in items:
        version, sep, value = item.partition("=")
        try:
            weights[version] = float(value)
        except ValueError:
            sep = ""
        if not sep or not version:
            raise CommandError(f"expected VERSION=WEIGHT, got {item!r}")
    return weights


def run_traffic(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        adapter = client.set_traffic(args.name, _parse_weights(args.weights))
        if args.json:
            _print_json(adapter)
        else:
            print(_table(_version_rows(adapter["versions"])))

    return run_with_client(args, action)


def run_resolve(args: argparse.Namespace) -> int:
    return run_with_client(
        args, lambda client: _print_json(dataclasses.asdict(client.resolve(args.served_name)))
    )


def run_hints(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        adapter = client.set_dispatch_hints(
            args.name, keywords=args.keywords, exemplars=args.exemplars
        )
        print(
            f"{adapter['name']}: {len(adapter['dispatch_keywords'])} keywords, "
            f"{len(adapter['dispatch_exemplars'])} exemplars"
        )

    return run_with_client(args, action)
