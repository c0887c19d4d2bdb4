"""The README's demo command, run for real (its own control plane + vLLM)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hi_moe_lora.app.demo import run_demo
from hi_moe_lora.tinymodel import TinyFleet

pytestmark = pytest.mark.vllm


def test_demo_shows_promote_and_rollback_switching_versions(
    tiny_fleet: TinyFleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # skip rebuilding the model; the adapters are built again, for the copy's path (registration
    # compares the adapter's base model with the served one by full path)
    shutil.copytree(tiny_fleet.model_dir, tmp_path / "fleet" / "model")
    answers = run_demo(tmp_path)
    served = [answer.served_by for answer in answers]
    assert served[1:6] == [
        "python-lora@1.0.0",
        "python-lora@1.1.0",
        "math-lora@1.0.0",
        "python-lora@1.1.0",  # after promote
        "python-lora@1.0.0",  # after rollback
    ]
    # model="auto": a keyword, a file reference, and a task no specialist fits
    assert served[6] == "python-lora@1.0.0 [keyword]"
    assert served[7] == "python-lora@1.0.0 [extension]"
    assert served[8].startswith("base (")
    assert served[8].endswith("[fallback]")
    assert served[9] == "docs-lora@1.0.0"  # a DoRA adapter, served unmerged
    assert answers[9].text not in (answers[0].text, answers[1].text)
    assert served[10] == "sql-lora@1.0.0"  # an AdaLoRA adapter, converted at registration
    assert answers[10].text not in (answers[0].text, answers[9].text)
    base_text = answers[0].text
    assert answers[1].text != base_text
    assert answers[1].text != answers[2].text
    assert answers[2].text == answers[4].text  # same version, same greedy output
    assert answers[1].text == answers[5].text
    out = capsys.readouterr().out
    assert "Done: both servers stopped." in out
    assert "dry run (POST /v1/dispatch): math-lora" in out
    logs = tmp_path / "stack" / "logs"
    assert (logs / "vllm.log").is_file()
    assert (logs / "control-plane.log").is_file()
