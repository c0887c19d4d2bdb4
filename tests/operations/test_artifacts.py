"""Artifact checks: present, readable, and the checksum still the registered one."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from hi_moe_lora.adapters.checksum import adapter_sha256
from registry.operations.artifacts import ArtifactCheck
from tests.operations.versions import version
from tests.support.adapter_files import write_adapter


def test_intact_changed_and_missing_artifacts(tmp_path: Path) -> None:
    good_dir = write_adapter(tmp_path / "good")
    changed_dir = write_adapter(tmp_path / "changed")
    gone_dir = write_adapter(tmp_path / "gone")
    good = dataclasses.replace(
        version("good", "1.0.0", active=True),
        local_path=str(good_dir),
        sha256=adapter_sha256(good_dir),
    )
    changed = dataclasses.replace(
        version("changed", "1.0.0", active=True),
        local_path=str(changed_dir),
        sha256=adapter_sha256(changed_dir),
    )
    gone = dataclasses.replace(
        version("gone", "1.0.0", active=True),
        local_path=str(gone_dir),
        sha256=adapter_sha256(gone_dir),
    )
    check = ArtifactCheck()
    assert check.problems([good, changed, gone]) == {}
    weights = changed_dir / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    shutil.rmtree(gone_dir)
    problems = check.problems([good, changed, gone])
    assert set(problems) == {"changed@1.0.0", "gone@1.0.0"}
    assert "changed on disk" in problems["changed@1.0.0"]
    assert "missing" in problems["gone@1.0.0"]
