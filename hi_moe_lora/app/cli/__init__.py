"""The ``hi-moe-lora`` command line.

Each sub-command lives in its own module exposing ``add_parser(subparsers)``; heavy imports
(FastAPI, SQLAlchemy, torch) happen inside the command handlers so that ``--help`` stays fast
and the vLLM host needs none of the control plane's dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# module name -> its sub-commands are registered by that module's add_parser()
_COMMAND_MODULES = (
    "serve",
    "db",
    "admin",
    "tokens",
    "audit",
    "dispatch",
    "warmup",
    "vllm",
    "tiny",
    "demo",
)


#: Libraries that log routine work at INFO: httpx a line per request ("HTTP Request: …"), Alembic
#: each of its plugins on every start. Their warnings still show; ``--log-level DEBUG`` shows all.
QUIET_LIBRARIES = ("httpx", "httpcore", "openai", "alembic.runtime.plugins")


def quiet_libraries(level: int) -> None:
    """Keep third-party INFO lines out of the CLI's output unless ``level`` is DEBUG."""
    if level <= logging.DEBUG:
        return
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hi-moe-lora",
        description="Serve a fleet of LoRA specialists on vLLM.",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default: INFO)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(f"hi_moe_lora.app.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = args.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_libraries(logging.getLevelNamesMapping().get(level, logging.INFO))
    handler = args.handler
    try:
        result: int = handler(args)
    except Exception as exc:
        message = settings_error(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2
    return result


def settings_error(exc: Exception) -> str | None:
    """A one-screen answer for invalid control-plane settings (``HI_MOE_LORA_*`` variables or
    the flags that override them), instead of pydantic's traceback; None for other errors."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError) or exc.title != "ControlPlaneSettings":
        return None
    lines = ["error: invalid control-plane settings:"]
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        field = "".join(str(part) for part in error["loc"][:1])
        if field:
            # (the value is not echoed: it may be a secret)
            lines.append(f"  HI_MOE_LORA_{field.upper()}: {message}")
        else:
            lines.append(f"  {message}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
