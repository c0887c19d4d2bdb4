"""Where a vLLM server's start went while it captured CUDA graphs: the pauses (kernel compiles).

vLLM prints its capture as a progress bar (``Capturing CUDA graphs (PIECEWISE): 79%| 283/357
[01:36<08:16, 6.71s/it]``); a graph that took seconds instead of milliseconds compiled kernels.
For each server log given, this prints when the engine started, how long the profiling run and
torch.compile took (vLLM's own lines), how far the capture got and in how long, every step of
at least ``--min-pause`` seconds with the graph it belongs to, and their sum, then each variant
of our kernels compiled after the kernel warm-up (``hi_moe_lora/kernels/late_compiles.py``'s
lines) at the graph the capture was on, with why the warm-up missed it::

    python benchmarks/kernels/capture_pauses.py /tmp/hml-out/*-serve.log

The serve logs ``gpu_e2e.sh`` writes (``$OUT/<tag>-serve.log``, or inside its ``PACK`` archive).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hi_moe_lora.kernels.late_compiles import LATE_COMPILE_MARK

_BAR = re.compile(r"Capturing CUDA graphs \((\w+)\):.*?\|\s*(\d+)/(\d+) \[(\d+):(\d+)(?::(\d+))?<")
_LATE = re.compile(re.escape(LATE_COMPILE_MARK) + r": (\w+); (.*)$")
_TIMED = re.compile(r"(Initial profiling/warmup run took [\d.]+ s|torch\.compile took [\d.]+ s)")


@dataclass
class Capture:
    """One capture's progress: graphs done of ``total``, seconds in, and the long steps."""

    mode: str
    total: int
    done: int = 0
    seconds: int = 0
    pauses: list[tuple[int, int]] = field(default_factory=list)  # (graph, seconds)


@dataclass
class LateCompile:
    """A variant of ours compiled after the kernel warm-up (``late_compiles.py``'s log line):
    where the start was (a capture's graph in progress, or before any capture), the kernel, and
    how it differs from the warm-up's variants."""

    where: str
    kernel: str
    why: str


def captures(text: str, min_pause: int) -> list[Capture]:
    """The captures a log's progress bars show (one per bar that restarts at 0)."""
    return scan(text, min_pause)[0]


def scan(text: str, min_pause: int) -> tuple[list[Capture], list[LateCompile]]:
    """The captures, and the variants compiled after the warm-up, each placed at the graph the
    capture was on when it was logged."""
    found: list[Capture] = []
    late: list[LateCompile] = []
    for chunk in re.split(r"[\r\n]", text):
        match = _BAR.search(chunk)
        if match is not None:
            _progress(found, match, min_pause)
        compiled = _LATE.search(chunk)
        if compiled is not None:
            where = _where(found[-1] if found else None)
            why = compiled.group(2)
            fields = why.rfind(" (")  # (the variant's fields, last: left out)
            late.append(LateCompile(where, compiled.group(1), why[:fields] if fields > 0 else why))
    return found, late


def _where(current: Capture | None) -> str:
    """Where the start is: before any capture, on a capture's next graph, or past its end."""
    if current is None:
        return "before the capture"
    if current.done < current.total:
        return f"{current.mode} graph {current.done + 1}"
    return f"after the {current.mode} capture"


def _progress(found: list[Capture], match: re.Match[str], min_pause: int) -> None:
    """One progress bar's update of the capture it belongs to (a new one when it restarts)."""
    mode, done, total = match.group(1), int(match.group(2)), int(match.group(3))
    parts = [int(g) for g in match.groups()[3:] if g is not None]
    seconds = (
        parts[0] * 3600 + parts[1] * 60 + parts[2] if len(parts) == 3 else parts[0] * 60 + parts[1]
    )
    current = found[-1] if found else None
    if current is None or current.mode != mode or done < current.done:
        current = Capture(mode, total)
        found.append(current)
    if seconds - current.seconds >= min_pause:
        current.pauses.append((done, seconds - current.seconds))
    current.done, current.seconds = done, seconds


def report(path: Path, min_pause: int) -> list[str]:
    text = path.read_text(errors="replace")
    lines = [f"{path.name}:"]
    lines += [f"  {m.group(1)}" for m in _TIMED.finditer(text)]
    found, late = scan(text, min_pause)
    for capture in found:
        paused = sum(s for _, s in capture.pauses)
        steps = " ".join(f"{graph}:+{s}s" for graph, s in capture.pauses) or "none"
        lines.append(
            f"  capture ({capture.mode}): {capture.done}/{capture.total} graphs in "
            f"{capture.seconds} s; steps of {min_pause} s or more: {steps} ({paused} s in all)"
        )
    if late:
        lines.append(f"  variants of ours compiled after the kernel warm-up: {len(late)}")
        lines += [f"    {c.where}: {c.kernel}; {c.why}" for c in late]
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
