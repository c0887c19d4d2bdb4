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
        )
    except (ControlPlaneError, ProcessStartError, OSError) as exc:
        print(f"demo failed: {exc}")
        return 1
    return 0
