"""The artifact store: registered adapters live in ``artifact_dir/<name>/<version>/``.

Registration copies the adapter's config and weights (a source that passed every check of
:mod:`registry.services.sources`) into a staging directory on the same file system, validates that
copy, then publishes it with one ``rename``; a copy that fails is removed. Deletion renames the
version directory into a trash directory first, so both can be undone until the database commits.

A process killed while it copies (SIGKILL, a crash, a shutdown past its grace period) leaves its
staging directory behind, never a published version. Staging directories are named after the
host and process that made them; opening the store removes those of processes of this host that
no longer run, and any older than :data:`STALE_STAGING_S` (another host's crash), so leftovers
do not pile up while replicas sharing the store keep their registrations in progress.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from hi_moe_lora.hosts import host_tag, process_gone
from registry.services.sources import Progress, StagedSource

logger = logging.getLogger(__name__)

_STAGING = ".staging"
_TRASH = ".trash"
#: Staging directories older than this are leftovers whatever made them.
STALE_STAGING_S = 24 * 3600.0


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.clean_staging()

    def path_for(self, name: str, version: str) -> Path:
        return self.root / name / version

    def stage(self, source: StagedSource, progress: Progress | None = None) -> Path:
        """Copy the files vLLM reads from a checked ``source`` (local or remote) into a fresh
        staging directory; ``progress`` is told the bytes copied as they are."""
        staging = self.root / _STAGING / f"{host_tag()}-{os.getpid()}-{uuid.uuid4().hex}"
        staging.mkdir(parents=True)
        try:
            source.copy_to(staging, progress)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def clean_staging(self, *, now: float | None = None) -> list[Path]:
        """Remove staging directories left by processes that died while copying; the removed."""
        directory = self.root / _STAGING
        try:
            entries = list(directory.iterdir())
        except FileNotFoundError:
            return []
        now = time.time() if now is None else now
        host = host_tag()
        removed = []
        for entry in entries:
            tag = entry.name.rpartition("-")[0]  # host-pid-uuid
            tag, _, pid = tag.rpartition("-")
            dead = tag == host and pid.isdigit() and process_gone(int(pid))
            try:
                stale = now - entry.lstat().st_mtime > STALE_STAGING_S
            except FileNotFoundError:
                continue
            if dead or stale:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        if removed:
            logger.warning(
                "removed %d staging leftover(s) of interrupted registrations in %s",
                len(removed),
                directory,
            )
        return removed

    def publish(self, staging: Path, name: str, version: str) -> Path:
        """Move a staged copy to its final place (replacing an orphan left by a crash)."""
        final = self.path_for(name, version)
        if final.exists():
            logger.warning("replacing orphaned artifact directory %s", final)
            shutil.rmtree(final)
        for attempt in range(3):  # a concurrent clean-up may remove an empty parent meanwhile
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staging, final)
                break
            except FileNotFoundError:
                if attempt == 2 or not staging.exists():
                    raise
        return final

    def unpublish(self, final: Path, staging: Path) -> None:
        """Undo :meth:`publish`: move the files back to staging (a retry may publish again)."""
        os.rename(final, staging)
        self._remove_if_empty(final.parent)

    def owns(self, path: Path) -> bool:
        """Whether ``path`` is a version directory inside this store (safe to delete)."""
        return path.resolve().parent.parent == self.root

    def retire(self, final: Path) -> Path | None:
        """Move a version directory into the trash; ``None`` if it is already gone."""
        if not final.exists():
            return None
        trash = self.root / _TRASH / uuid.uuid4().hex
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(final, trash)
        return trash

    def restore(self, trash: Path, final: Path) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(trash, final)

    def purge(self, trash: Path, final: Path) -> None:
        shutil.rmtree(trash, ignore_errors=True)
        self._remove_if_empty(final.parent)

    def discard(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def _remove_if_empty(self, directory: Path) -> None:
        with contextlib.suppress(OSError):
            directory.rmdir()
