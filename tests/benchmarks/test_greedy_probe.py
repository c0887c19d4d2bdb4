"""greedy_probe.py's comparison of two probe files and its count of identical copies."""

from __future__ import annotations

from tests.support.scripts import load_script

probe = load_script("benchmarks/kernels/greedy_probe.py")


def _run(tokens: list[str]) -> dict[str, object]:
    return {"tokens": tokens, "logprobs": [-0.5] * len(tokens)}


def test_the_share_of_identical_copies_counts_every_copy_against_its_prompts_first() -> None:
    runs = [
        [_run(["1", "2"]), _run(["1", "2"]), _run(["1", "3"])],
        [_run(["4"]), _run(["4"]), _run(["4"])],
    ]
    assert probe.identical_share(runs) == 5 / 6


def test_compare_reports_matching_prefixes_forced_positions_and_copies() -> None:
    first = {
        "a0": [_run(["1", "2", "3"])],
        "forced": {"a0": [-1.0, -2.0, -3.0]},
        "copies_identical": {"a0": 1.0},
    }
    second = {
        "a0": [{"tokens": ["1", "2", "9"], "logprobs": [-0.5, -0.75, -0.5]}],
        "forced": {"a0": [-1.0, -2.5, -3.0]},
    }
    lines = probe.compare(first, second)
    assert lines[0] == (
        "a0: 2/3 greedy tokens identical before any divergence, "
        "max |logprob diff| on identical prefix 0.2500"
    )
    assert "a0 (first file): 100 % of copies equal the first" in lines
    assert lines[-1] == "a0 teacher-forced: 3 positions, max |logprob diff| 0.5000, median 0.0000"
