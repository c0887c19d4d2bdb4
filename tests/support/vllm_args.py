"""vLLM's own command-line parser, for tests that check a command line we write for vLLM."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from unittest import mock


def _no_plugins() -> None:
    """Stands in for vLLM's plugin loading while a command line is parsed (below)."""


def parse_serve_args(args: Sequence[str]) -> argparse.Namespace:
    """``args`` as this vLLM's OpenAI server parses them. A first argument that is not a flag is
    the model, as ``vllm serve MODEL …`` takes it.

    Building the parser loads vLLM's general plugins, ours among them, which would install our
    wrapper and patches into this test process for every later test (vLLM loads them once a
    process); parsing needs none of them (ours add no flag), so they are not loaded here."""
    import vllm.engine.arg_utils
    import vllm.plugins
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = list(args)
    if argv and not argv[0].startswith("-"):
        argv[:1] = ["--model", argv[0]]
    with (
        mock.patch.object(vllm.engine.arg_utils, "load_general_plugins", _no_plugins),
        mock.patch.object(vllm.plugins, "load_general_plugins", _no_plugins),
    ):
        return make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
