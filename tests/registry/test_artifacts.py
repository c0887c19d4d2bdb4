"""The artifact store: stage, publish, retire, and staging leftovers of dead processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from hi_moe_lora.adapters.checksum import adapter_sha256
from registry.services.artifacts import STALE_STAGING_S, ArtifactStore
from registry.services.sources import SourcePolicy
from tests.support.adapter_files import write_adapter


def test_stage_publish_retire_restore(tmp_path: Path) -> None:
    source = write_adapter(tmp_path / "src")
    (source / "README.md").write_text("not copied")
    store = ArtifactStore(tmp_path / "store")
    staging = store.stage(SourcePolicy([tmp_path]).check(str(source)))
    assert sorted(p.name for p in staging.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    final = store.publish(staging, "a-lora", "1.0.0")
    assert final == store.path_for("a-lora", "1.0.0")
    assert store.owns(final)
    assert not staging.exists()
    assert adapter_sha256(final) == adapter_sha256(source)

    store.unpublish(final, staging)  # undo: the staged copy is back, nothing published
    assert staging.is_dir()
    assert not (store.root / "a-lora").exists()
    final = store.publish(staging, "a-lora", "1.0.0")

    trash = store.retire(final)
    assert trash is not None
    assert not final.exists()
    store.restore(trash, final)
    assert final.is_dir()
    trash = store.retire(final)
    assert trash is not None
    store.purge(trash, final)
    assert not trash.exists()
    assert not (store.root / "a-lora").exists()
    assert store.retire(final) is None
    assert not store.owns(tmp_path / "elsewhere" / "x")


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_opening_the_store_removes_staging_left_by_dead_processes(tmp_path: Path) -> None:
    source = write_adapter(tmp_path / "src")
    store = ArtifactStore(tmp_path / "store")
    live = store.stage(SourcePolicy([tmp_path]).check(str(source)))  # this process: running
    host = live.name.split("-")[0]
    dead = live.parent / f"{host}-{_dead_pid()}-{uuid.uuid4().hex}"
    other_host = live.parent / f"elsewhere-1-{uuid.uuid4().hex}"
    old = live.parent / f"elsewhere-2-{uuid.uuid4().hex}"
    for leftover in (dead, other_host, old):
        leftover.mkdir()
        (leftover / "adapter_model.safetensors").write_bytes(b"half a cop")
    day_ago = time.time() - STALE_STAGING_S - 60
    os.utime(old, (day_ago, day_ago))

    reopened = ArtifactStore(tmp_path / "store")  # a start-up

    assert not dead.exists()
    assert not old.exists()
    assert live.is_dir()  # a registration still copying: kept
    assert other_host.is_dir()  # another replica's, recent: kept
    assert reopened.clean_staging() == []
