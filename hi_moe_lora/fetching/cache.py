"""A local, content-addressed, size-bounded cache of adapter versions (``root/<sha256>/``).

Layout under ``root``:

- ``<sha256>/``: one verified version (``adapter_config.json`` and its weights), named by the
  adapter checksum (:func:`hi_moe_lora.adapters.checksum.adapter_sha256`). A directory of this
  name is always complete: a download goes to ``.tmp/<host>-<pid>-<uuid>/`` and is renamed into
  place only after its checksum matched; a mismatch removes it and raises
  :class:`ChecksumMismatch`. The directory's mtime is its last use (set on every hit), so the
  LRU order survives a restart.
- ``.locks/<sha256>.lock``: ``fcntl.flock`` per version, so several processes sharing ``root``
  download a version once; an in-process lock per version does the same for threads.
  ``.lock``: the lock of eviction (one evicts at a time).
- ``.in-use/<host>-<pid>-<id>``: the versions each open cache of each process last said it uses,
  so one process does not evict what another has loaded.

Eviction (after each download, and before it when the sizes are known) keeps the total size of
the entries at most ``max_bytes``, least recently used first, and never removes an entry that is
in use (passed by the caller, published by another live process, or held by a fetch in
progress). If only in-use entries remain over the budget, the cache logs a WARNING and keeps
them (the budget is exceeded until they fall out of use) unless the caller gives an
``evict_in_use`` hook: it is asked, least recently used first, to release an entry of its own
(e.g. make vLLM forget the names bound to it) and the entry is removed when it says yes. A
version alone larger than the budget raises :class:`EntryTooLarge` and nothing is kept.

Opening a cache removes temporary directories left by processes of this host that no longer
run (a download killed half way) and any older than a day.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hi_moe_lora.adapters.checksum import CONFIG_FILE, WEIGHT_FILES, adapter_sha256
from hi_moe_lora.hosts import host_tag, process_gone

logger = logging.getLogger(__name__)

_TMP = ".tmp"
_LOCKS = ".locks"
_IN_USE = ".in-use"
_EVICTION_LOCK = ".lock"
#: Temporary directories and in-use files older than this are leftovers whatever made them.
STALE_S = 24 * 3600.0
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: File names an entry may hold (what the checksum covers).
ENTRY_FILES = frozenset({CONFIG_FILE, *WEIGHT_FILES})

#: Downloads one file into the given path; returns the bytes it transferred.
Downloader = Callable[["RemoteFile", Path], int]
#: Asked to release an in-use entry (sha256); True: the caller no longer uses it.
EvictInUse = Callable[[str], bool]


class FetchError(Exception):
    """A version could not be placed in the cache."""


class InvalidEntry(FetchError):
    """A sha256 or file name that cannot name a cache entry."""


class ChecksumMismatch(FetchError):
    """The downloaded files do not have the expected sha256 (nothing was kept)."""

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(f"downloaded files have sha256 {actual}, expected {expected}")
        self.expected = expected
        self.actual = actual


class EntryTooLarge(FetchError):
    """One version alone is larger than the cache's byte budget (nothing was kept)."""

    def __init__(self, sha256: str, size: int, max_bytes: int) -> None:
        super().__init__(
            f"version {sha256} has {size} bytes, more than the cache's budget of {max_bytes}"
        )
        self.sha256 = sha256
        self.size = size
        self.max_bytes = max_bytes


@dataclass(frozen=True)
class RemoteFile:
    """One file of a version to download: its name in the entry, its size if known."""

    name: str
    size: int | None = None


@dataclass(frozen=True)
class CacheEntry:
    sha256: str
    path: Path
    size: int
    last_used_ns: int


@dataclass(frozen=True)
class FetchResult:
    """Where the version is, whether it was already there, what the call moved and removed."""

    path: Path
    hit: bool
    downloaded_bytes: int
    evicted: tuple[str, ...]
    #: Of :attr:`evicted`, those the ``evict_in_use`` hook released.
    evicted_in_use: tuple[str, ...] = ()


def _leftover(name: str, host: str, mtime: float, now: float) -> bool:
    """Whether a ``<host>-<pid>-<id>`` name belongs to a dead process of this host, or is old."""
    tag, _, _ = name.rpartition("-")
    tag, _, pid = tag.rpartition("-")
    dead = tag == host and pid.isdigit() and process_gone(int(pid))
    return dead or now - mtime > STALE_S


def check_sha256(sha256: str) -> str:
    if not _SHA256.match(sha256):
        raise InvalidEntry(f"{sha256!r} is not a lowercase hex sha256")
    return sha256


class ArtifactCache:
    """See the module docstring. Thread-safe; several processes may share ``root``."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.root = root.expanduser().resolve()
        self.max_bytes = max_bytes
        self._host = host_tag()
        self._tag = f"{self._host}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        for sub in (_TMP, _LOCKS, _IN_USE):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._keys_lock = threading.Lock()
        self._keys: dict[str, threading.Lock] = {}
        self._evict_lock = threading.Lock()
        self._sizes: dict[str, int] = {}
        self._clock_lock = threading.Lock()
        self._last_ns = 0
        self.clean_leftovers()

    # ------------------------------------------------------------------ reading

    def path_of(self, sha256: str) -> Path:
        return self.root / check_sha256(sha256)

    def entries(self) -> list[CacheEntry]:
        """Every complete entry, least recently used first."""
        found = []
        with os.scandir(self.root) as listing:
            for item in listing:
                if not _SHA256.match(item.name):
                    continue
                try:
                    if not item.is_dir(follow_symlinks=False):
                        continue
                    mtime = item.stat(follow_symlinks=False).st_mtime_ns
                except FileNotFoundError:
                    continue
                path = self.root / item.name
                size = self._size(path)
                if size is not None:
                    found.append(CacheEntry(item.name, path, size, mtime))
        found.sort(key=lambda e: (e.last_used_ns, e.sha256))
        return found

    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.entries())

    def get(self, sha256: str) -> Path | None:
        """The entry's path if it is here (a use: it becomes the most recent), else None."""
        path = self.path_of(sha256)
        try:
            self._touch(path)
        except FileNotFoundError:
            return None
        return path

    # ------------------------------------------------------------------ fetching

    def fetch(
        self,
        sha256: str,
        files: Sequence[RemoteFile],
        download: Downloader,
        *,
        in_use: Collection[str] = (),
        evict_in_use: EvictInUse | None = None,
    ) -> FetchResult:
        """The entry for ``sha256``: from the cache, or downloaded (``download`` per file),
        verified and published; then evicts to the budget (see the module docstring).

        Concurrent calls for one ``sha256`` (threads or processes) download it once; the others
        wait and get a hit. Raises :class:`ChecksumMismatch`, :class:`EntryTooLarge`,
        :class:`InvalidEntry`, or what ``download`` raises; nothing partial is ever published.
        """
        check_sha256(sha256)
        names = [f.name for f in files]
        if not files or len(set(names)) != len(names) or not set(names) <= ENTRY_FILES:
            raise InvalidEntry(f"cannot cache files {names!r} (allowed: {sorted(ENTRY_FILES)})")
        if CONFIG_FILE not in names:
            raise InvalidEntry(f"a version needs its {CONFIG_FILE}")
        keep = {*in_use, sha256}
        self.publish_in_use(keep)
        with self._key(sha256):
            path = self.root / sha256
            if path.is_dir():
                self._touch(path)
                return FetchResult(path, hit=True, downloaded_bytes=0, evicted=())
            known = [f.size for f in files]
            evicted: list[str] = []
            released: list[str] = []
            if all(size is not None for size in known):
                size = sum(s for s in known if s is not None)
                if size > self.max_bytes:
                    raise EntryTooLarge(sha256, size, self.max_bytes)
                self._evict(keep, evict_in_use, size, evicted, released, sha256)
            downloaded = self._download(sha256, files, download)
            self._sizes[sha256] = self._size(path) or 0
        self._evict(keep, evict_in_use, 0, evicted, released, sha256)
        return FetchResult(
            path,
            hit=False,
            downloaded_bytes=downloaded,
            evicted=tuple(evicted),
            evicted_in_use=tuple(released),
        )

    def evict(
        self, in_use: Collection[str] = (), evict_in_use: EvictInUse | None = None
    ) -> list[str]:
        """Evict to the budget now; the sha256s removed."""
        evicted: list[str] = []
        self.publish_in_use(in_use)
        self._evict(set(in_use), evict_in_use, 0, evicted, [])
        return evicted

    def _download(self, sha256: str, files: Sequence[RemoteFile], download: Downloader) -> int:
        staging = self.root / _TMP / f"{self._tag}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            transferred = 0
            for remote in files:
                transferred += download(remote, staging / remote.name)
            size = sum(p.stat().st_size for p in staging.iterdir())
            if size > self.max_bytes:
                raise EntryTooLarge(sha256, size, self.max_bytes)
            actual = adapter_sha256(staging)
            if actual != sha256:
                raise ChecksumMismatch(sha256, actual)
            os.rename(staging, self.root / sha256)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self._touch(self.root / sha256)
        logger.info("cached version %s (%d bytes downloaded)", sha256, transferred)
        return transferred

    # ------------------------------------------------------------------ eviction

    def _evict(
        self,
        keep: set[str],
        evict_in_use: EvictInUse | None,
        reserve: int,
        evicted: list[str],
        released: list[str],
        fetching: str | None = None,
    ) -> None:
        with self._evict_lock, self._flock(self.root / _EVICTION_LOCK):
            entries = self.entries()
            total = sum(e.size for e in entries) + reserve
            if total <= self.max_bytes:
                return
            others = self._others_in_use() - keep
            in_use: list[CacheEntry] = []
            for entry in entries:
                if total <= self.max_bytes:
                    return
                if entry.sha256 in keep or entry.sha256 in others:
                    in_use.append(entry)
                    continue
                if self._remove(entry.sha256):
                    total -= entry.size
                    evicted.append(entry.sha256)
            for entry in in_use:
                if total <= self.max_bytes or evict_in_use is None:
                    break
                # only the caller's own entries can be released, never the one it fetches
                if entry.sha256 == fetching or entry.sha256 in others:
                    continue
                if not _released(evict_in_use, entry.sha256):
                    continue
                if self._remove(entry.sha256):
                    total -= entry.size
                    evicted.append(entry.sha256)
                    released.append(entry.sha256)
            if total > self.max_bytes:
                logger.warning(
                    "artifact cache %s holds %d bytes (budget %d, %d more for a download): "
                    "every remaining entry is in use, keeping them",
                    self.root,
                    total - reserve,
                    self.max_bytes,
                    reserve,
                )

    def _remove(self, sha256: str) -> bool:
        """Remove an entry no fetch holds right now; False if one does (or it is gone)."""
        key = self._key_lock(sha256)
        if not key.acquire(blocking=False):
            return False
        try:
            lock_path = self.root / _LOCKS / f"{sha256}.lock"
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                        return False  # another process is fetching or using it right now
                    raise
                path = self.root / sha256
                doomed = (
                    self.root / _TMP / f"{self._tag}-evict-{sha256[:12]}-{uuid.uuid4().hex[:6]}"
                )
                try:
                    os.rename(path, doomed)  # gone from its name at once, never half-deleted
                except FileNotFoundError:
                    return False
                shutil.rmtree(doomed, ignore_errors=True)
                self._sizes.pop(sha256, None)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock_path)
                logger.info("evicted version %s from the artifact cache", sha256)
                return True
            finally:
                os.close(fd)
        finally:
            key.release()

    # ------------------------------------------------------------------ in use, across processes

    def publish_in_use(self, shas: Collection[str]) -> None:
        """Say which entries this cache uses, for other processes sharing ``root``."""
        target = self.root / _IN_USE / self._tag
        staging = target.with_name(f".{self._tag}.{uuid.uuid4().hex[:6]}")
        staging.write_text(json.dumps(sorted(shas)))
        os.replace(staging, target)

    def close(self) -> None:
        """Withdraw this cache's in-use list (other processes may then evict its entries)."""
        with contextlib.suppress(FileNotFoundError):
            (self.root / _IN_USE / self._tag).unlink()

    def _others_in_use(self) -> set[str]:
        used: set[str] = set()
        now = time.time()
        for item in (self.root / _IN_USE).iterdir():
            if item.name == self._tag or item.name.startswith("."):
                continue
            try:
                if _leftover(item.name, self._host, item.stat().st_mtime, now):
                    item.unlink(missing_ok=True)
                    continue
                listed = json.loads(item.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(listed, list):
                used.update(s for s in listed if isinstance(s, str))
        return used

    # ------------------------------------------------------------------ housekeeping

    def clean_leftovers(self) -> list[Path]:
        """Remove temporary directories of dead processes of this host (or older than a day)."""
        removed = []
        now = time.time()
        for entry in (self.root / _TMP).iterdir():
            if "-evict-" in entry.name:  # <host>-<pid>-<id>-evict-...
                owner = entry.name.split("-evict-", 1)[0]
            else:  # <host>-<pid>-<id>-<n>
                owner = entry.name.rsplit("-", 1)[0]
            try:
                mtime = entry.lstat().st_mtime
            except FileNotFoundError:
                continue
            if _leftover(owner, self._host, mtime, now):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        if removed:
            logger.warning(
                "removed %d partial download(s) of interrupted fetches in %s",
                len(removed),
                self.root / _TMP,
            )
        return removed

    def _size(self, path: Path) -> int | None:
        known = self._sizes.get(path.name)
        if known is not None:
            return known
        try:
            size = sum(p.stat().st_size for p in path.iterdir() if p.name in ENTRY_FILES)
        except FileNotFoundError:
            return None
        self._sizes[path.name] = size
        return size

    def _touch(self, path: Path) -> None:
        with self._clock_lock:  # strictly increasing within a process: a clear LRU order
            now = max(time.time_ns(), self._last_ns + 1)
            self._last_ns = now
        os.utime(path, ns=(now, now))

    def _key_lock(self, sha256: str) -> threading.Lock:
        with self._keys_lock:
            lock = self._keys.get(sha256)
            if lock is None:
                lock = self._keys[sha256] = threading.Lock()
            return lock

    @contextlib.contextmanager
    def _key(self, sha256: str) -> Iterator[None]:
        with self._key_lock(sha256), self._flock(self.root / _LOCKS / f"{sha256}.lock"):
            yield

    @staticmethod
    @contextlib.contextmanager
    def _flock(path: Path) -> Iterator[None]:
        """An exclusive ``flock`` on ``path``, robust to the file being unlinked meanwhile."""
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.fstat(fd).st_ino == os.stat(path).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                break
            os.close(fd)  # an eviction unlinked it while we waited: lock the new one
        try:
            yield
        finally:
            os.close(fd)


def _released(evict_in_use: EvictInUse, sha256: str) -> bool:
    try:
        return bool(evict_in_use(sha256))
    except Exception:
        logger.exception("releasing version %s failed; keeping it", sha256)
        return False
