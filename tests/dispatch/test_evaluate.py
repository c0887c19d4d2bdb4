"""The evaluation script on a tiny labelled file (tiers 1-2, so it runs anywhere)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.dispatch import evaluate

ROWS = [
    ("t0001", "kubectl rollout undo", [], "devops-lora", "tune", ["keyword"]),
    ("t0002", "speed this up", ["kernels/a.cu"], "cuda-lora", "tune", ["file-ref"]),
    ("t0003", "capital of Peru?", [], None, "tune", ["unrelated"]),
    ("t0004", "the page jumps while images load", [], "web-lora", "tune", ["no-signal"]),
    ("t0005", "kubectl get pods", [], "devops-lora", "heldout", ["keyword"]),
]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    lines = [
        json.dumps(
            {
                "id": i,
                "objective": o,
                "context_refs": r,
                "label": label,
                "split": split,
                "tags": tags,
            }
        )
        for i, o, r, label, split, tags in ROWS
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_report_and_json(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    code = evaluate.main(
        ["--data", str(data), "--no-embeddings", "--repeat", "1", "--json", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "## split `tune` (4 tasks)" in printed
    assert "| top1 | 75.0 % |" in printed  # the no-signal task needs tier 3, which is off
    report = json.loads(out.read_text())[0]
    assert report["split"] == "tune"
    assert report["metrics"]["no_signal_top1"] == 0.0
    assert report["confusion"]["devops-lora"]["devops-lora"] == 1
    assert report["per_tier"]["extension"]["decisions"] == 1


def test_check_fails_on_a_missed_target(data: Path) -> None:
    assert evaluate.main(["--data", str(data), "--no-embeddings", "--repeat", "1", "--check"]) == 1


def test_per_task_errors_are_listed_for_every_split_of_the_tuning_set(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the v1 held-out split was evaluated once and is tuning material since
    code = evaluate.main(
        ["--data", str(data), "--no-embeddings", "--split", "heldout", "--errors", "--repeat", "1"]
    )
    assert code == 0
    assert "## split `heldout` (1 tasks)" in capsys.readouterr().out


def test_the_fresh_held_out_set_is_refused(data: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "heldout_v3.jsonl"
    fresh.write_text(data.read_text())
    with pytest.raises(SystemExit):
        evaluate.main(["--data", str(fresh), "--no-embeddings", "--split", "all"])
    assert evaluate.REFUSED_PREFIX == "heldout_v3"
