"""``hi-moe-lora tiny``: build the tiny local model and demo adapters (no hub needed)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tiny",
        help="build a tiny random Llama, its tokenizer and demo LoRA adapters locally",
    )
    parser.add_argument("directory", type=Path, help="output directory (model/, adapters/)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hi_moe_lora.tinymodel import build_fleet

    fleet = build_fleet(args.directory)
    print(
        json.dumps(
            {
                "model": str(fleet.model_dir),
                "adapters": {key: str(path) for key, path in fleet.adapters.items()},
            },
            indent=2,
        )
    )
    return 0
