"""Greedy outputs with logprobs from a running vLLM server, for ours-vs-vLLM comparisons.

Sends a few fixed prompts one at a time (batch of one, temperature 0) to the base model and to
several adapters, and writes tokens and logprobs to a JSON file. It also scores a fixed
sequence of token ids teacher-forced (``echo`` with logprobs: the log-probability of every given
token after its prefix), so two servers can be compared at every position: a greedy comparison
stops at the first divergence, after which the contexts differ. ``--compare A.json B.json``
prints how far two such files agree (exact token match and max logprob difference before the
first divergence; max and median difference over the teacher-forced positions).
With ``--copies N`` each greedy request is sent N times at once, so the server decodes it in
batches of N rows of one adapter (the LoRA-in-the-GEMM path serves one-adapter steps of 33-64
rows; a lone request decodes one row and never reaches it). The first copy's tokens are kept,
and ``copies_identical`` records, per model, the share of copies whose tokens equal the first's.
Usage: python greedy_probe.py --port 8000 --out probe.json --models base,a0,a1,a2 [--copies 48]
       python greedy_probe.py --compare native.json ours.json
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PROMPTS = [
    "def foo(x): return x + 1",
    "SELECT id FROM users WHERE",
    "the quick brown fox jumps over the lazy dog and",
    "import torch as th\nx = th.",
]


def _logprobs(port: int, request: dict[str, Any]) -> dict[str, Any]:
    """The ``logprobs`` object of the first choice of a greedy ``/v1/completions`` request."""
    body = json.dumps({"temperature": 0, "logprobs": 1, **request}).encode()
    req = urllib.request.Request(
        f"http://localhost:{port}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        result: dict[str, Any] = json.loads(resp.read())["choices"][0]["logprobs"]
    return result


def _complete(port: int, model: str, prompt: str) -> dict[str, Any]:
    lp = _logprobs(
        port,
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": 24,
            "ignore_eos": True,
            # Token ids, not text: a random model's tokens often decode to "" and would all
            # compare equal.
            "return_tokens_as_token_ids": True,
        },
    )
    return {"tokens": lp["tokens"], "logprobs": lp["token_logprobs"]}


#: Token ids scored teacher-forced: a fixed pseudo-random walk over ids 10-409 (inside the
#: tests' tiny vocabulary of 512 as well as Llama's), long enough for the kernels' prefill path.
FORCED_IDS = [10 + (i * 7919 + 13) % 400 for i in range(300)]


def _forced_logprobs(port: int, model: str) -> list[float]:
    """Log-probability of each of :data:`FORCED_IDS` after its prefix (from the second on)."""
    lp = _logprobs(port, {"model": model, "prompt": FORCED_IDS, "max_tokens": 1, "echo": True})
    # The first prompt token has no prefix (None); the last value is the generated token's.
    return [float(v) for v in lp["token_logprobs"][1 : len(FORCED_IDS)]]


def _complete_copies(port: int, model: str, prompt: str, copies: int) -> list[dict[str, Any]]:
    """``copies`` identical greedy requests sent at once (decoded in one batch)."""
    with ThreadPoolExecutor(copies) as pool:
        return list(pool.map(lambda _: _complete(port, model, prompt), range(copies)))


def identical_share(runs: list[list[dict[str, Any]]]) -> float:
    """Share of copies (over every prompt) whose tokens equal their prompt's first copy's."""
    pairs = [(copies[0]["tokens"], run["tokens"]) for copies in runs for run in copies]
    return sum(first == other for first, other in pairs) / len(pairs)


def probe(port: int, models: list[str], copies: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {}
    shares = {}
    for model in models:
        runs = [_complete_copies(port, model, p, copies) for p in PROMPTS]
        out[model] = [copies_of_prompt[0] for copies_of_prompt in runs]
        shares[model] = identical_share(runs)
    out["forced"] = {m: _forced_logprobs(port, m) for m in models}
    if copies > 1:
        out["copies_identical"] = shares
    return out


def forced_difference(first: list[float], second: list[float]) -> dict[str, float]:
    """Median and max |difference| of two teacher-forced log-probability lists."""
    diffs = sorted(abs(x - y) for x, y in zip(first, second, strict=True))
    return {"median": diffs[len(diffs) // 2], "max": diffs[-1]}


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    lines = []
    for model in a:
        if model in ("forced", "copies_identical"):
            continue
        same = total = 0
        worst = 0.0
        for ra, rb in zip(a[model], b.get(model, []), strict=False):
            for i, (ta, tb) in enumerate(zip(ra["tokens"], rb["tokens"], strict=False)):
                total += 1
                if ta != tb:
                    break  # after the first divergence the contexts differ
                same += 1
                worst = max(worst, abs(ra["logprobs"][i] - rb["logprobs"][i]))
        lines.append(
            f"{model}: {same}/{total} greedy tokens identical before any divergence, "
            f"max |logprob diff| on identical prefix {worst:.4f}"
        )
    for name, result in (("first", a), ("second", b)):
        for model, share in result.get("copies_identical", {}).items():
            lines.append(f"{model} ({name} file): {100 * share:.0f} % of copies equal the first")
    forced_a, forced_b = a.get("forced", {}), b.get("forced", {})
    for model in forced_a:
        if model not in forced_b:
            continue
        difference = forced_difference(forced_a[model], forced_b[model])
        lines.append(
            f"{model} teacher-forced: {len(forced_a[model])} positions, max |logprob diff| "
            f"{difference['max']:.4f}, median {difference['median']:.4f}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--models", default="base,a0,a1,a2,a3")
    parser.add_argument("--compare", nargs=2, type=Path)
    parser.add_argument("--copies", type=int, default=1, help="greedy requests sent at once")
    args = parser.parse_args()
    if args.compare:
        first, second = (json.loads(p.read_text()) for p in args.compare)
        print("\n".join(compare(first, second)))
        return 0
    if args.copies < 1:
        parser.error("--copies must be at least 1")
    result = probe(args.port, args.models.split(","), args.copies)
    if args.out:
        args.out.write_text(json.dumps(result))
    greedy = {m: rs for m, rs in result.items() if m not in ("forced", "copies_identical")}
    print(json.dumps({m: [r["tokens"][:6] for r in rs] for m, rs in greedy.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
