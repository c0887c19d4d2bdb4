"""Where a vLLM server's start went while it captured CUDA graphs: the pauses (kernel compiles).

vLLM prints its capture as a progress bar (``Capturing CUDA graphs (PIECEWISE): 79%| 283/357
[01:36<08:16, 6.71s/it]``); a graph that took seconds instead of milliseconds compiled kernels.
For each server log given, this prints when the engine started, how long the profiling run and
torch.compile took (vLLM's own lines), how far the capture got and in how long, and every step
of at least ``--min-pause`` seconds with the graph it belongs to, and their sum::

    python benchmarks/kernels/capture_pauses.py /tmp/hml-out/*-serve.log

The serve logs ``gpu_e2e.sh`` writes (``$OUT/<tag>-serve.log``, or inside its ``PACK`` archive).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

_BAR = re.compile(r"Capturing CUDA graphs \((\w+)\):.*?\|\s*(\d+)/(\d+) \[(\d+):(\d+)(?::(\d+))?<")
_TIMED = re.compile(r"(Initial profiling/warmup run took [\d.]+ s|torch\.compile took [\d.]+ s)")


@dataclass
class Capture:
    """One capture's progress: graphs done of ``total``, seconds in, and the long steps."""

    mode: str
    total: int
    done: int = 0
    seconds: int = 0
    pauses: list[tuple[int, int]] = field(default_factory=list)  # (graph, seconds)


def captures(text: str, min_pause: int) -> list[Capture]:
    """The captures a log's progress bars show (one per bar that restarts at 0)."""
    found: list[Capture] = []
    for chunk in re.split(r"[\r\n]", text):
        match = _BAR.search(chunk)
        if match is None:
            continue
        mode, done, total = match.group(1), int(match.group(2)), int(match.group(3))
        parts = [int(g) for g in match.groups()[3:] if g is not None]
        seconds = (
            parts[0] * 3600 + parts[1] * 60 + parts[2]
            if len(parts) == 3
            else parts[0] * 60 + parts[1]
        )
        current = found[-1] if found else None
        if current is None or current.mode != mode or done < current.done:
            current = Capture(mode, total)
            found.append(current)
        if seconds - current.seconds >= min_pause:
            current.pauses.append((done, seconds - current.seconds))
        current.done, current.seconds = done, seconds
    return found


def report(path: Path, min_pause: int) -> list[str]:
    text = path.read_text(errors="replace")
    lines = [f"{path.name}:"]
    lines += [f"  {m.group(1)}" for m in _TIMED.finditer(text)]
    for capture in captures(text, min_pause):
        paused = sum(s for _, s in capture.pauses)
        steps = " ".join(f"{graph}:+{s}s" for graph, s in capture.pauses) or "none"
        lines.append(
            f"  capture ({capture.mode}): {capture.done}/{capture.total} graphs in "
            f"{capture.seconds} s; steps of {min_pause} s or more: {steps} ({paused} s in all)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path, help="vLLM server logs")
    parser.add_argument("--min-pause", type=int, default=5, help="seconds (default 5)")
    args = parser.parse_args(argv)
    for path in args.logs:
        if not path.is_file():
            print(f"{path}: no such file", file=sys.stderr)
            return 2
        print("\n".join(report(path, args.min_pause)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
