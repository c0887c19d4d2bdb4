from __future__ import annotations

from pathlib import Path

import pytest

from hi_moe_lora.app.cli import main


def test_demo_reports_a_workdir_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_a_directory = tmp_path / "taken"
    not_a_directory.write_text("a file where the demo wants a directory")
    assert main(["demo", "--workdir", str(not_a_directory)]) == 1
    assert "demo failed" in capsys.readouterr().out
    assert not_a_directory.read_text().startswith("a file")
