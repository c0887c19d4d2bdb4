"""``ArtifactCache`` over real HTTP: download once, verify, never expose a partial entry, LRU.

Unit cases use the loopback file server of ``test_fetching_download``; the scale case fetches
1,000 versions registered in a real control plane (SQLite, uvicorn) through its artifact
endpoint into a cache with a tenth of the fleet's size as its budget.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hi_moe_lora.adapters.checksum import adapter_sha256
from hi_moe_lora.control_api import ControlPlaneClient, paths
from hi_moe_lora.fetching import (
    ArtifactCache,
    ChecksumMismatch,
    EntryTooLarge,
    RemoteFile,
    download_file,
)
from tests.core.test_fetching_download import Files, FileServer
from tests.support.adapter_files import write_adapter

NAMES = ("adapter_config.json", "adapter_model.safetensors")


@pytest.fixture
def files() -> Files:
    return Files()


@pytest.fixture
def server(files: Files) -> Iterator[FileServer]:
    running = FileServer(files)
    yield running
    running.stop()


def _publish(files: Files, directory: Path) -> tuple[str, list[RemoteFile]]:
    """Serve ``directory``'s adapter files under ``/<sha256>/<name>``."""
    sha = adapter_sha256(directory)
    remote = []
    for name in NAMES:
        body = (directory / name).read_bytes()
        files.content[f"/{sha}/{name}"] = body
        remote.append(RemoteFile(name, len(body)))
    return sha, remote


def _downloader(server: FileServer, sha: str) -> Callable[[RemoteFile, Path], int]:
    def download(remote: RemoteFile, destination: Path) -> int:
        url = f"{server.url}/{sha}/{remote.name}"
        return download_file(url, destination, expected_size=remote.size).transferred

    return download


def _adapter(tmp_path: Path, seed: int, rank: int = 4) -> Path:
    return write_adapter(tmp_path / "src" / f"a{seed}", rank=rank, seed=seed)


def _size(directory: Path) -> int:
    return sum((directory / name).stat().st_size for name in NAMES)


def test_fetches_verifies_and_hits(server: FileServer, files: Files, tmp_path: Path) -> None:
    source = _adapter(tmp_path, 1)
    sha, remote = _publish(files, source)
    cache = ArtifactCache(tmp_path / "cache", 10 << 20)
    first = cache.fetch(sha, remote, _downloader(server, sha))
    assert not first.hit
    assert first.path == cache.root / sha
    assert adapter_sha256(first.path) == sha
    assert first.downloaded_bytes == _size(source)
    second = cache.fetch(sha, remote, _downloader(server, sha))
    assert second.hit
    assert (second.path, second.downloaded_bytes) == (first.path, 0)
    assert len(files.requests) == 2  # two files, once
    assert not list((cache.root / ".tmp").iterdir())


def test_concurrent_threads_download_a_version_once(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    sha, remote = _publish(files, _adapter(tmp_path, 2, rank=16))
    cache = ArtifactCache(tmp_path / "cache", 10 << 20)
    barrier = threading.Barrier(8)

    def fetch(_: int) -> tuple[Path, bool]:
        barrier.wait()
        result = cache.fetch(sha, remote, _downloader(server, sha))
        return result.path, result.hit

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(fetch, range(8)))
    assert {path for path, _ in results} == {cache.root / sha}
    assert sum(not hit for _, hit in results) == 1
    assert len(files.requests) == 2  # one download of each file for 8 callers


def _fetch_in_process(root: str, sha: str, url: str, start: float) -> bool:
    cache = ArtifactCache(Path(root), 10 << 20)
    remote = [RemoteFile(name) for name in NAMES]

    def download(item: RemoteFile, destination: Path) -> int:
        return download_file(f"{url}/{sha}/{item.name}", destination).transferred

    time.sleep(max(0.0, start - time.time()))
    return cache.fetch(sha, remote, download).hit


def test_processes_sharing_the_directory_download_once(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    sha, _ = _publish(files, _adapter(tmp_path, 3, rank=16))
    context = multiprocessing.get_context("spawn")
    start = time.time() + 2.0
    with context.Pool(3) as pool:
        hits = pool.starmap(
            _fetch_in_process, [(str(tmp_path / "cache"), sha, server.url, start)] * 3
        )
    assert sorted(hits) == [False, True, True]
    assert len(files.requests) == 2


def test_a_checksum_mismatch_keeps_nothing(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    sha, remote = _publish(files, _adapter(tmp_path, 4))
    tampered = bytearray(files.content[f"/{sha}/adapter_model.safetensors"])
    tampered[-1] ^= 0xFF
    files.content[f"/{sha}/adapter_model.safetensors"] = bytes(tampered)
    cache = ArtifactCache(tmp_path / "cache", 10 << 20)
    with pytest.raises(ChecksumMismatch):
        cache.fetch(sha, remote, _downloader(server, sha))
    assert not (cache.root / sha).exists()
    assert not list((cache.root / ".tmp").iterdir())
    assert cache.entries() == []


def test_a_broken_download_resumes_and_is_never_visible_half_way(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    sha, remote = _publish(files, _adapter(tmp_path, 5, rank=32))
    files.drops[f"/{sha}/adapter_model.safetensors"] = 2
    cache = ArtifactCache(tmp_path / "cache", 10 << 20)
    download = _downloader(server, sha)
    seen: list[bool] = []

    def watched(item: RemoteFile, destination: Path) -> int:
        seen.append((cache.root / sha).exists())
        return download(item, destination)

    result = cache.fetch(sha, remote, watched)
    assert seen == [False, False]
    assert adapter_sha256(result.path) == sha
    ranged = [r for p, r in files.requests if p.endswith("safetensors")]
    assert len(ranged) == 3
    assert ranged[0] is None
    assert all(r is not None for r in ranged[1:])


def test_a_failed_download_leaves_nothing(server: FileServer, files: Files, tmp_path: Path) -> None:
    sha, remote = _publish(files, _adapter(tmp_path, 6))
    files.drops[f"/{sha}/adapter_model.safetensors"] = 99
    cache = ArtifactCache(tmp_path / "cache", 10 << 20)
    with pytest.raises(Exception, match="attempts"):
        cache.fetch(sha, remote, _downloader(server, sha))
    assert not (cache.root / sha).exists()
    assert not list((cache.root / ".tmp").iterdir())


def test_leftovers_of_a_killed_process_are_removed_on_open(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache", 1 << 20)
    host = cache._host
    dead = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    dead.start()
    dead.join()
    leftover = cache.root / ".tmp" / f"{host}-{dead.pid}-abcdef123456-0001"
    leftover.mkdir()
    (leftover / "adapter_model.safetensors").write_bytes(b"half")
    alive = cache.root / ".tmp" / f"{host}-{os.getpid()}-abcdef123456-0002"
    alive.mkdir()
    ArtifactCache(tmp_path / "cache", 1 << 20)
    assert not leftover.exists()
    assert alive.exists()  # a live process may still be downloading into it


def test_lru_eviction_spares_entries_in_use(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    published = [_publish(files, _adapter(tmp_path, 10 + i)) for i in range(5)]
    size = _size(tmp_path / "src" / "a10")
    cache = ArtifactCache(tmp_path / "cache", 3 * size)
    for sha, remote in published[:3]:
        cache.fetch(sha, remote, _downloader(server, sha))
    shas = [sha for sha, _ in published]
    cache.get(shas[0])  # used again: shas[1] is now the least recently used
    assert [e.sha256 for e in cache.entries()] == [shas[1], shas[2], shas[0]]
    fourth = cache.fetch(shas[3], published[3][1], _downloader(server, shas[3]))
    assert fourth.evicted == (shas[1],)
    # shas[2] is the LRU now but in use: shas[0] goes instead
    fifth = cache.fetch(
        shas[4], published[4][1], _downloader(server, shas[4]), in_use={shas[2], shas[3]}
    )
    assert fifth.evicted == (shas[0],)
    assert {e.sha256 for e in cache.entries()} == {shas[2], shas[3], shas[4]}
    assert cache.total_bytes() <= cache.max_bytes


def test_in_use_entries_stay_over_budget_unless_released(
    server: FileServer, files: Files, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    published = [_publish(files, _adapter(tmp_path, 20 + i)) for i in range(3)]
    shas = [sha for sha, _ in published]
    cache = ArtifactCache(tmp_path / "cache", 2 * _size(tmp_path / "src" / "a20"))
    for sha, remote in published[:2]:
        cache.fetch(sha, remote, _downloader(server, sha))
    result = cache.fetch(shas[2], published[2][1], _downloader(server, shas[2]), in_use=shas[:2])
    assert result.evicted == ()
    assert "every remaining entry is in use" in caplog.text
    assert len(cache.entries()) == 3
    asked: list[str] = []

    def release(sha: str) -> bool:
        asked.append(sha)
        return sha == shas[1]

    evicted = cache.evict(in_use=shas, evict_in_use=release)
    assert asked == [shas[0], shas[1]]  # least recently used first; shas[0] refused
    assert evicted == [shas[1]]
    assert cache.total_bytes() <= cache.max_bytes


def test_another_process_in_use_list_is_respected(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    published = [_publish(files, _adapter(tmp_path, 30 + i)) for i in range(2)]
    shas = [sha for sha, _ in published]
    size = _size(tmp_path / "src" / "a30")
    other = ArtifactCache(tmp_path / "cache", size)
    other.fetch(shas[0], published[0][1], _downloader(server, shas[0]))  # publishes shas[0]
    mine = ArtifactCache(tmp_path / "cache", size)
    mine.fetch(shas[1], published[1][1], _downloader(server, shas[1]))
    assert (mine.root / shas[0]).is_dir()
    other.close()
    assert mine.evict(in_use={shas[1]}) == [shas[0]]


def test_a_version_larger_than_the_budget_is_refused(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    source = _adapter(tmp_path, 40)
    sha, remote = _publish(files, source)
    cache = ArtifactCache(tmp_path / "cache", _size(source) - 1)
    with pytest.raises(EntryTooLarge):
        cache.fetch(sha, remote, _downloader(server, sha))
    assert files.requests == []  # known sizes: refused before downloading
    unknown = [RemoteFile(name) for name in NAMES]
    with pytest.raises(EntryTooLarge):
        cache.fetch(sha, unknown, _downloader(server, sha))
    assert cache.entries() == []
    assert not list((cache.root / ".tmp").iterdir())


# ------------------------------------------------------------------ scale: 1,000 versions


FLEET = 1000
ADAPTERS = 50


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    from tests.openai.live import control_plane_settings, serve_control_plane
    from tests.support.adapter_files import DEFAULT_BASE_MODEL

    workdir = tmp_path_factory.mktemp("fleet") / "cp"
    served = serve_control_plane(
        control_plane_settings(workdir, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    )
    client = ControlPlaneClient(served.url, timeout_s=60)
    sources = workdir.parent / "sources"

    def register(index: int) -> str:
        name, version = f"fleet-{index % ADAPTERS}", f"1.0.{index // ADAPTERS}"
        source = write_adapter(
            sources / str(index), rank=1 + index % 4, target_modules=("q_proj",), seed=index
        )
        client.register(name, version, str(source))
        return f"{name}@{version}"

    with ThreadPoolExecutor(8) as pool:
        served_names = list(pool.map(register, range(FLEET)))
    yield served.url, served_names
    served.stop()


def test_a_tenth_of_the_fleet_budget_fetches_all_of_it_lru_first(
    fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, served_names = fleet
    client = ControlPlaneClient(url, timeout_s=30)
    with ThreadPoolExecutor(8) as pool:
        resolved = dict(zip(served_names, pool.map(client.resolve, served_names), strict=True))
    sizes = {r.sha256: sum(f.size for f in r.files or ()) for r in resolved.values()}
    assert len(sizes) == FLEET
    budget = sum(sizes.values()) // 10
    cache = ArtifactCache(tmp_path / "cache", budget)
    order = list(served_names)
    random.Random(7).shuffle(order)
    last_use: dict[str, int] = {}

    def fetch(served_name: str) -> tuple[bool, tuple[str, ...]]:
        answer = resolved[served_name]
        remote = [RemoteFile(f.name, f.size) for f in answer.files or ()]

        def download(item: RemoteFile, destination: Path) -> int:
            file_url = client.url(
                paths.ARTIFACT, name=answer.name, version=answer.version, file=item.name
            )
            return download_file(file_url, destination, expected_size=item.size).transferred

        result = cache.fetch(answer.sha256, remote, download)
        assert result.path == cache.root / answer.sha256
        assert adapter_sha256(result.path) == answer.sha256
        assert cache.total_bytes() <= budget
        return result.hit, result.evicted

    started = time.monotonic()
    for clock, served_name in enumerate(order, start=1):
        sha = resolved[served_name].sha256
        held = {e.sha256 for e in cache.entries()}
        lru_first = sorted(held, key=lambda s: last_use[s])
        hit, evicted = fetch(served_name)
        assert not hit
        # evicted: exactly the least recently used ones, in that order
        assert list(evicted) == lru_first[: len(evicted)]
        last_use[sha] = clock
    assert len(cache.entries()) < FLEET // 5
    # the most recent entries are hits; fetching an evicted one again downloads it
    recent = order[-3:]
    for served_name in recent:
        assert fetch(served_name)[0] is True
    assert fetch(order[0])[0] is False
    assert time.monotonic() - started < 40
