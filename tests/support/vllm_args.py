"""vLLM's own command-line parser, for tests that check a command line we write for vLLM."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def parse_serve_args(args: Sequence[str]) -> argparse.Namespace:
    """``args`` as this vLLM's OpenAI server parses them. A first argument that is not a flag is
    the model, as ``vllm serve MODEL …`` takes it."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = list(args)
    if argv and not argv[0].startswith("-"):
        argv[:1] = ["--model", argv[0]]
    return make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
