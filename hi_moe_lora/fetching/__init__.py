"""Adapter versions fetched over HTTP into a local, size-bounded cache (standard library only).

For vLLM hosts that share no file system with the control plane: :mod:`.download` fetches one
file (bearer token, bounded timeouts, ``Range`` resume), :mod:`.cache` keeps verified versions
under ``root/<sha256>/`` with LRU eviction to a byte budget, downloading each version once
across threads and processes. The resolver plugin uses both inside vLLM.
"""

from hi_moe_lora.fetching.cache import (
    ArtifactCache,
    CacheEntry,
    ChecksumMismatch,
    EntryTooLarge,
    EvictInUse,
    FetchError,
    FetchResult,
    InvalidEntry,
    RemoteFile,
)
from hi_moe_lora.fetching.download import Downloaded, DownloadError, download_file

__all__ = [
    "ArtifactCache",
    "CacheEntry",
    "ChecksumMismatch",
    "DownloadError",
    "Downloaded",
    "EntryTooLarge",
    "EvictInUse",
    "FetchError",
    "FetchResult",
    "InvalidEntry",
    "RemoteFile",
    "download_file",
]
