from __future__ import annotations

from pathlib import Path

from hi_moe_lora.adapters.checksum import adapter_sha256
from registry.services.artifacts import ArtifactStore
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
