from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hi_moe_lora.app.cli import main
from hi_moe_lora.tinymodel import TinyFleet


def test_tiny_prints_the_model_and_adapter_paths(
    tiny_fleet: TinyFleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Start from a copy of the cached fleet so the command only has to confirm it exists.
    shutil.copytree(tiny_fleet.model_dir.parent, tmp_path / "fleet")
    assert main(["tiny", str(tmp_path / "fleet")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["model"] == str((tmp_path / "fleet" / "model").resolve())
    assert set(printed["adapters"]) == set(tiny_fleet.adapters)
    for path in printed["adapters"].values():
        assert (Path(path) / "adapter_model.safetensors").is_file()
