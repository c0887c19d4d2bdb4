"""ChecksumCache: a directory is hashed once until one of its checksummed files changes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from hi_moe_lora.adapters.checksum import adapter_sha256
from hi_moe_lora.cache import ChecksumCache, directory_stamp
from tests.support.adapter_files import write_adapter


@pytest.fixture
def adapter(tmp_path: Path) -> Path:
    return write_adapter(tmp_path / "adapter")


def _weights(directory: Path) -> Path:
    return directory / "adapter_model.safetensors"


def test_digest_equals_adapter_sha256(adapter: Path) -> None:
    cache = ChecksumCache()
    assert cache.sha256(adapter) == adapter_sha256(adapter)
    assert cache.verify(adapter, adapter_sha256(adapter))
    assert cache.verify(adapter, adapter_sha256(adapter).upper())
    assert not cache.verify(adapter, "0" * 64)


def test_unchanged_files_are_not_read_again(adapter: Path) -> None:
    cache = ChecksumCache()
    original = cache.sha256(adapter)
    # Same size, same mtime, different bytes: only a re-read could notice, and the cache must
    # not re-read a directory whose stat stamps are unchanged.
    weights = _weights(adapter)
    info = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert cache.sha256(adapter) == original
    assert adapter_sha256(adapter) != original


def test_rewritten_file_is_hashed_again(adapter: Path) -> None:
    cache = ChecksumCache()
    original = cache.sha256(adapter)
    weights = _weights(adapter)
    info = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))
    assert cache.sha256(adapter) == adapter_sha256(adapter) != original


def test_truncated_or_removed_file_changes_the_stamp(adapter: Path) -> None:
    cache = ChecksumCache()
    original = cache.sha256(adapter)
    before = directory_stamp(adapter)
    _weights(adapter).unlink()
    assert directory_stamp(adapter) != before
    assert cache.sha256(adapter) != original


def test_directory_without_adapter_files_does_not_verify(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not ChecksumCache().verify(empty, adapter_sha256(empty))


def test_keys_are_resolved_paths(adapter: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(adapter, target_is_directory=True)
    cache = ChecksumCache()
    cache.sha256(adapter)
    cache.sha256(link)
    assert len(cache) == 1
    cache.forget(link)
    assert len(cache) == 0


def test_bounded_number_of_entries(tmp_path: Path) -> None:
    cache = ChecksumCache(max_entries=2)
    for index in range(3):
        cache.sha256(write_adapter(tmp_path / f"a{index}", seed=index))
    assert len(cache) == 2


def test_concurrent_use_agrees(adapter: Path) -> None:
    cache = ChecksumCache()
    results: list[str] = []

    def work() -> None:
        results.append(cache.sha256(adapter))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(results) == {adapter_sha256(adapter)}
