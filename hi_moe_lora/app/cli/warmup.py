"""``hi-moe-lora warmup``: load adapter versions into vLLM before users ask for them.

``warmup [NAME ...]`` asks the control plane to warm the named adapters (``name``: the versions
it serves, ``name@version``: that one; none: the control plane's plan, the ``max_loras`` most
recently used served versions) on every upstream. It follows the run's events as they arrive
(:meth:`~hi_moe_lora.control_api.ControlPlaneClient.warmup_events`) with a progress bar on
stderr, then prints one row per version and upstream on stdout. ``--json`` prints the final
report instead (one blocking call), ``--last`` the last warm-up's report (background runs
included). The exit status is 1 when any result in the report failed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hi_moe_lora.app.cli.progress import ProgressBar
from hi_moe_lora.app.cli.remote import CommandError, common_options, run_with_client
from hi_moe_lora.control_api import ControlPlaneClient, ControlPlaneError

#: A run sends two one-token requests per version and upstream, each with the control plane's
#: own timeout (``warmup_timeout_s``, 120 s); the blocking ``--json`` call waits for all of them.
DEFAULT_TIMEOUT_S = 600.0


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "warmup",
        parents=[common_options(timeout_s=DEFAULT_TIMEOUT_S)],
        help="load adapter versions into vLLM now (progress, then a table)",
        description=(
            "Warm adapter versions on every vLLM upstream: each gets a one-token request, so "
            "vLLM loads it before users ask for it. Shows a progress bar on stderr as results "
            "arrive, then a table on stdout. Exit status 1 when any version failed to load on "
            "any upstream (also with --json and --last), 0 otherwise."
        ),
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="adapter (the versions it serves) or NAME@VERSION; "
        "none: the control plane's plan (the max_loras most recently used served versions)",
    )
    parser.add_argument(
        "--last", action="store_true", help="show the last warm-up's report instead of running one"
    )
    parser.set_defaults(handler=run_warmup)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def describe_result(result: dict[str, Any]) -> str:
    """``name@version on upstream: loaded 812 ms (load 640 ms)`` / ``: failed 3 ms: why``."""
    head = f"{result['served_name']} on {result['upstream']}: {result['outcome']}"
    head += f" {_ms(result['time_ms'])}"
    if result.get("load_ms") is not None:
        head += f" (load {_ms(result['load_ms'])})"
    if result.get("detail"):
        head += f": {result['detail']}"
    return head


def results_table(results: list[dict[str, Any]]) -> str:
    """One row per result: served name, upstream, outcome, time, load time, detail."""
    rows = [["SERVED NAME", "UPSTREAM", "OUTCOME", "TIME", "LOAD", "DETAIL"]]
    for r in sorted(results, key=lambda r: (r["served_name"], r["upstream"])):
        rows.append(
            [
                r["served_name"],
                r["upstream"],
                r["outcome"],
                _ms(r["time_ms"]),
                _ms(r.get("load_ms")),
                " ".join(str(r.get("detail") or "").split()),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _summary(loaded: int, failed: int, time_ms: float) -> str:
    return f"{loaded} loaded, {failed} failed in {_ms(time_ms)}"


def _print_results(results: list[dict[str, Any]], loaded: int, failed: int, time_ms: float) -> None:
    if results:
        print(results_table(results))
    else:
        print("nothing to warm: no served version (or no upstream)")
    print(_summary(loaded, failed, time_ms))
    _exit_1_if_failed(failed, len(results))


def _exit_1_if_failed(failed: int, total: int) -> None:
    if failed:
        raise CommandError(f"{failed} of {total} warm-ups failed")


def _follow(client: ControlPlaneClient, names: list[str] | None) -> None:
    """Run a warm-up, drawing the progress bar as results arrive; then the table."""
    results: list[dict[str, Any]] = []
    bar: ProgressBar | None = None
    done: dict[str, Any] | None = None
    try:
        for event in client.warmup_events(names):
            kind = event.get("event")
            if kind == "plan":
                bar = ProgressBar(int(event["total"]))
                targets, upstreams = len(event["targets"]), len(event["upstreams"])
                bar.show(f"warming {targets} versions on {upstreams} upstreams")
            elif kind == "result":
                results.append(event)
                if bar is not None:
                    bar.advance(describe_result(event))
            elif kind == "done":
                done = event
    finally:
        if bar is not None:
            bar.finish()
    if done is None:  # the client raises first; kept for a stream without a done event
        raise ControlPlaneError("the warm-up stream ended without its 'done' event")
    _print_results(results, int(done["loaded"]), int(done["failed"]), float(done["time_ms"]))


def run_warmup(args: argparse.Namespace) -> int:
    def action(client: ControlPlaneClient) -> None:
        if args.last:
            if args.names:
                raise CommandError("--last shows the last report: it takes no adapter names")
            report = client.last_warmup()
        elif args.json:
            report = client.warmup(args.names or None)
        else:
            _follow(client, args.names or None)
            return
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True))
            _exit_1_if_failed(report["failed"], len(report["results"]))
            return
        print(f"last warm-up: {report['started_at']} ({report['reason']})")
        _print_results(report["results"], report["loaded"], report["failed"], report["time_ms"])

    return run_with_client(args, action)
