"""Checking served versions' artifacts on disk: present, readable, checksum as registered.

Hashing reads all the weights, so digests are remembered per file stamp
(:class:`hi_moe_lora.cache.ChecksumCache`): an unchanged directory costs a few ``stat`` calls.
Blocking; callers run it in a thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hi_moe_lora.cache import ChecksumCache
from registry.services.records import AdapterVersionInfo


class ArtifactCheck:
    def __init__(self) -> None:
        self._checksums = ChecksumCache()

    def problem(self, version: AdapterVersionInfo) -> str | None:
        """What is wrong with the version's files (``None``: nothing)."""
        path = Path(version.local_path)
        try:
            if not path.is_dir():
                return f"its artifact is missing: {path}"
            if not self._checksums.verify(path, version.sha256):
                return (
                    f"its artifact changed on disk: the checksum of {path} is not the "
                    "registered one"
                )
        except OSError as exc:
            return f"its artifact cannot be read: {exc}"
        return None

    def problems(self, versions: Iterable[AdapterVersionInfo]) -> dict[str, str]:
        """Served name → problem, for the broken versions only."""
        found = {v.served_name: self.problem(v) for v in versions}
        return {name: problem for name, problem in found.items() if problem is not None}
