"""``hi-moe-lora demo``: the end-to-end demo on the embedded default.

Access control is on: the admin and resolver tokens are ``HI_MOE_LORA_ADMIN_TOKEN`` and
``HI_MOE_LORA_RESOLVER_TOKEN`` when set, else generated for the run.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run the end-to-end demo (vLLM CPU + tiny local model + SQLite)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(".demo"),
        help="where the model, adapters, database and logs go (default: %(default)s)",
    )
    parser.add_argument(
        "--replicas",
        type=_replica_count,
        default=1,
        help="how many vLLM servers to run behind the control plane (default: %(default)s)",
    )
    parser.add_argument(
        "--private-artifacts",
        action="store_true",
        help="each vLLM downloads adapters into its own cache, as on a host that shares no "
        "filesystem with the control plane (Linux, root: a mount namespace per vLLM)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hi_moe_lora.app.demo import run_demo
    from hi_moe_lora.app.processes import ProcessStartError
    from hi_moe_lora.control_api import ControlPlaneError

    # The demo prints its own story; per-request client logs would drown it.
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    try:
        run_demo(
            args.workdir.resolve(),
            admin_token=os.environ.get("HI_MOE_LORA_ADMIN_TOKEN") or None,
            resolver_token=os.environ.get("HI_MOE_LORA_RESOLVER_TOKEN") or None,
            replicas=args.replicas,
            private_artifacts=args.private_artifacts,
        )
    except (ControlPlaneError, ProcessStartError, OSError) as exc:
        print(f"demo failed: {exc}")
        return 1
    return 0


def _replica_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= 8:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 8, got {text!r}")
    return count
