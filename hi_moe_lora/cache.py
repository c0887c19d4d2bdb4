"""Verified adapter checksums, remembered so that a directory is hashed once.

Hashing an adapter reads all its weights; the resolver plugin checks the checksum every time vLLM
asks for a name it has not loaded. :class:`ChecksumCache` keys a computed digest on the
``(path, mtime_ns, size)`` of each file that takes part in the checksum, so a directory whose files
are unchanged is not read again, and any change (rewrite, truncation, a file added or removed)
triggers a fresh hash.
"""

from __future__ import annotations

import threading
from pathlib import Path

from hi_moe_lora.adapters.checksum import adapter_files, adapter_sha256

FileStamp = tuple[str, int, int]
DirectoryStamp = tuple[FileStamp, ...]


def directory_stamp(directory: Path) -> DirectoryStamp:
    """``(name, mtime_ns, size)`` of each checksummed file of ``directory``, in checksum order."""
    stamps: list[FileStamp] = []
    for path in adapter_files(directory):
        info = path.stat()
        stamps.append((path.name, info.st_mtime_ns, info.st_size))
    return tuple(stamps)


class ChecksumCache:
    """Thread-safe memo of :func:`adapter_sha256` keyed on the files' stat stamps."""

    def __init__(self, max_entries: int = 4096) -> None:
        self._max_entries = max_entries
        self._entries: dict[Path, tuple[DirectoryStamp, str]] = {}
        self._lock = threading.Lock()

    def sha256(self, directory: Path) -> str:
        """The adapter checksum of ``directory``, hashed only if its files changed."""
        key = directory.resolve()
        stamp = directory_stamp(key)
        with self._lock:
            cached = self._entries.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        digest = adapter_sha256(key)
        # A file that changed while it was being read yields a stamp that no longer matches:
        # remember the digest only when the stamp is stable across the hash.
        if directory_stamp(key) == stamp:
            with self._lock:
                if len(self._entries) >= self._max_entries:
                    self._entries.pop(next(iter(self._entries)))
                self._entries[key] = (stamp, digest)
        return digest

    def verify(self, directory: Path, expected_sha256: str) -> bool:
        """Whether ``directory`` holds an adapter whose checksum is ``expected_sha256``."""
        if not adapter_files(directory):
            return False
        return self.sha256(directory) == expected_sha256.strip().lower()

    def forget(self, directory: Path) -> None:
        with self._lock:
            self._entries.pop(directory.resolve(), None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
