"""``vllm bench serve`` runs without importing vLLM again for each one (GPU benchmark tooling).

Every ``python3 -m vllm.entrypoints.cli.main bench serve`` imports vLLM anew: on the H100 host of
2026-11-27 a 6 s run at 64 concurrent took 27-33 s from one result file to the next, so the
imports, not the runs, filled most of a device call that held a dozen runs. This module imports
vLLM's benchmark once and runs it as often as asked:

- :func:`run` is one run in the calling process (``gpu_churn.py`` uses it);
- ``python3 bench_resident.py --queue DIR`` serves runs that a shell script asks for with files:
  the client writes ``DIR/NAME.args`` (the arguments that follow ``vllm bench serve``, one per
  line, written elsewhere and renamed into place), the server runs it with its output in
  ``DIR/NAME.log`` and writes the exit status to ``DIR/NAME.rc`` the same way. ``DIR/ready``
  appears once vLLM is imported; ``DIR/stop`` ends the server. ``gpu_e2e.sh``'s ``bench`` uses it
  and falls back to the CLI when the server is not there.

The runs are vLLM's own (``vllm.benchmarks.serve.main``), with vLLM's own argument parser, so a
run's result file is the one the CLI would write.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path


@functools.cache
def _parser() -> argparse.ArgumentParser:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser


def run(argv: Sequence[str], log: Path | None = None) -> int:
    """One ``vllm bench serve`` run with ``argv``; its printed output to ``log`` when given.
    The exit status the CLI would have had: 0, 2 for arguments it refuses, 1 for a failure."""
    from vllm.benchmarks.serve import main

    with contextlib.ExitStack() as stack:
        if log is not None:
            out = stack.enter_context(log.open("w"))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(out))
        try:
            main(_parser().parse_args(list(argv)))
        except SystemExit as exc:  # argparse's refusal, or the benchmark's own exit
            return exc.code if isinstance(exc.code, int) else 1
        except Exception:
            traceback.print_exc()
            return 1
    return 0


def _publish(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a reader polling for ``path`` never sees it half done."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def serve_queue(queue: Path, poll_s: float = 0.1) -> None:
    """Run each ``*.args`` request in ``queue`` in the order of their names until ``stop``."""
    queue.mkdir(parents=True, exist_ok=True)
    _parser()  # the import is the point: done before anyone is told to ask
    _publish(queue / "ready", f"{os.getpid()}\n")
    while not (queue / "stop").exists():
        requests = sorted(queue.glob("*.args"))
        if not requests:
            time.sleep(poll_s)
            continue
        for request in requests:
            argv = request.read_text().splitlines()
            request.unlink()
            began = time.monotonic()
            code = run(argv, log=request.with_suffix(".log"))
            print(f"{request.stem}: exit {code} after {time.monotonic() - began:.1f} s", flush=True)
            _publish(request.with_suffix(".rc"), f"{code}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=Path, help="serve the runs requested in this directory")
    args, rest = parser.parse_known_args()
    if args.queue is not None:
        serve_queue(args.queue)
        return 0
    return run(rest)  # one run, as `vllm bench serve` would


if __name__ == "__main__":
    sys.exit(main())
