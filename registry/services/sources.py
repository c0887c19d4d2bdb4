"""Where registration may read adapters from, and how it reads them (hostile sources).

A registration names a source directory (a local path or ``file://`` URI). Nothing is read unless
it lies below one of the configured source roots (``HI_MOE_LORA_SOURCE_ROOTS``), and every check
below runs before a byte is copied:

- the source must be an absolute path without ``..``; it must lie below a root both as written
  (so that nothing outside the roots is even looked at: no existence probe of host paths) and
  once every symbolic link is resolved;
- the directory may hold at most ``max_files`` entries (listed, never walked);
- only the files vLLM reads are taken: ``adapter_config.json`` and
  ``adapter_model.safetensors`` (a directory with only pickled weights is refused,
  ``pickle_weights``). Each must be a regular file, refused without being opened otherwise
  (FIFO, device, socket, directory). A file that is a symbolic link is followed only when its
  fully resolved target is itself below a root, and its target's bytes are copied;
- sizes: at most ``max_file_bytes`` per file and ``max_artifact_bytes`` for both together.

:meth:`CheckedSource.copy_to` then copies through file descriptors opened with ``O_NOFOLLOW`` and
``O_NONBLOCK`` and checked to be the very files inspected (same device and inode, still regular,
still within the limits while the bytes flow): a file swapped between check and copy is refused.
The contents (config, header, every tensor value, shapes) are validated on that private copy, so
what was checked is exactly what is served.

Problems are :class:`~registry.errors.InvalidRequestError`s (422) with stable codes; their details
never contain the source path or any file content (the path is logged on the server).

A URL (``https://``, fsspec object storage) is handed to the policy's ``remote`` reader
(:mod:`registry.services.remote_sources`) when one is configured; both kinds of source are
:class:`StagedSource`s, copied into staging with the same limits and validated the same way.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

from hi_moe_lora.adapters.checksum import CONFIG_FILE
from hi_moe_lora.adapters.inspection import PICKLE_WEIGHT_FILES, SAFETENSORS_FILE
from registry.errors import ConfigurationError, InvalidAdapterError, InvalidRequestError

logger = logging.getLogger(__name__)

ROOTS_SETTING = "HI_MOE_LORA_SOURCE_ROOTS"
#: The files registration copies, in this order.
COPIED_FILES = (CONFIG_FILE, SAFETENSORS_FILE)
_COPY_CHUNK = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
#: Told the bytes copied so far and the total expected (``None`` while unknown).
Progress = Callable[[int, int | None], None]


class StagedSource(Protocol):
    """A checked source, local or remote: what is recorded, and how its files are copied."""

    @property
    def uri(self) -> str: ...

    def copy_to(self, target: Path, progress: Progress | None = None) -> None: ...


class UrlSources(Protocol):
    """The reader of remote sources (:mod:`registry.services.remote_sources`)."""

    def handles(self, source: str) -> bool: ...

    def check(self, source: str) -> StagedSource: ...


@dataclass(frozen=True)
class SourceLimits:
    max_file_bytes: int = 4 << 30
    max_artifact_bytes: int = 4 << 30
    max_files: int = 1000


@dataclass(frozen=True)
class SourceFile:
    """One file to copy: its adapter name, the resolved path and the identity it was checked as."""

    name: str
    path: Path
    size: int
    device: int
    inode: int


def _not_allowed(why: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"source {why}; adapters are registered only from below the configured source roots "
        f"({ROOTS_SETTING})",
        code="source_not_allowed",
    )


def _too_large(limits: SourceLimits) -> InvalidRequestError:
    return InvalidRequestError(
        f"adapter files exceed the limits: {limits.max_file_bytes} bytes per file, "
        f"{limits.max_artifact_bytes} bytes per adapter",
        code="source_too_large",
    )


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


@dataclass(frozen=True)
class CheckedSource:
    """A source directory that passed every file-system check, and the files to copy."""

    directory: Path
    files: tuple[SourceFile, ...]
    limits: SourceLimits

    @property
    def uri(self) -> str:
        return self.directory.as_uri()

    def copy_to(self, target: Path, progress: Progress | None = None) -> None:
        """Copy the checked files into ``target`` (an empty directory of ours)."""
        total = 0
        expected = sum(source.size for source in self.files)
        if progress is not None:
            progress(0, expected)
        for source in self.files:
            report = _offset(progress, total, expected)
            total += self._copy_one(
                source, target / source.name, self.limits.max_artifact_bytes - total, report
            )

    def _copy_one(
        self,
        source: SourceFile,
        destination: Path,
        budget: int,
        report: Callable[[int], None] | None = None,
    ) -> int:
        try:
            descriptor = os.open(source.path, _OPEN_FLAGS)
        except OSError as exc:
            logger.warning("source file %s cannot be opened safely: %s", source.path, exc)
            raise InvalidRequestError(
                f"{source.name} changed or vanished while it was being registered",
                code="source_changed",
            ) from exc
        with os.fdopen(descriptor, "rb", buffering=0) as handle:
            info = os.fstat(handle.fileno())
            if (
                not stat.S_ISREG(info.st_mode)
                or info.st_dev != source.device
                or info.st_ino != source.inode
            ):
                logger.warning("source file %s was replaced after it was checked", source.path)
                raise InvalidRequestError(
                    f"{source.name} changed while it was being registered", code="source_changed"
                )
            limit = min(self.limits.max_file_bytes, budget)
            copied = 0
            with destination.open("xb") as out:
                while chunk := handle.read(_COPY_CHUNK):
                    copied += len(chunk)
                    if copied > limit:
                        raise _too_large(self.limits)
                    out.write(chunk)
                    if report is not None:
                        report(copied)
        return copied


class SourcePolicy:
    """The source roots and limits registration obeys (``HI_MOE_LORA_SOURCE_*`` settings)."""

    def __init__(
        self,
        roots: Sequence[Path],
        limits: SourceLimits | None = None,
        *,
        remote: UrlSources | None = None,
    ) -> None:
        self.limits = limits or SourceLimits()
        self.remote = remote
        written = [os.path.normpath(os.path.abspath(os.path.expanduser(r))) for r in roots]
        resolved = [os.path.realpath(r) for r in written]
        #: roots as configured and as resolved (a root may itself be a symbolic link)
        self._lexical_roots = tuple(dict.fromkeys([*written, *resolved]))
        self._resolved_roots = tuple(dict.fromkeys(resolved))

    @property
    def roots(self) -> tuple[str, ...]:
        return self._resolved_roots

    def check(self, source: str) -> StagedSource:
        """Every file-system check (module docstring), or a remote reader's URL checks;
        nothing is copied or written."""
        if self.remote is not None and self.remote.handles(source):
            return self.remote.check(source)
        return self.check_local(source)

    def check_local(self, source: str) -> CheckedSource:
        """The checks of a local source (module docstring)."""
        if not self._resolved_roots:
            raise ConfigurationError(
                f"no adapter source roots are configured: set {ROOTS_SETTING} to the "
                "directories adapters are registered from",
                code="source_roots_not_configured",
            )
        path = _source_path(source)
        if "\x00" in str(path):
            raise _not_allowed("contains a NUL byte")
        if not path.is_absolute():
            raise _not_allowed("must be an absolute path")
        if ".." in path.parts:
            raise _not_allowed("must not contain '..'")
        written = os.path.normpath(str(path))
        if not _inside(written, self._lexical_roots):
            logger.info("registration source %s refused: outside the source roots", written)
            raise _not_allowed("is outside the allowed directories")
        resolved = os.path.realpath(written)
        if not _inside(resolved, self._resolved_roots):
            logger.warning(
                "registration source %s refused: resolves to %s, outside the source roots",
                written,
                resolved,
            )
            raise _not_allowed("leads outside the allowed directories through a symbolic link")
        try:
            info = os.stat(resolved)
        except OSError:
            info = None
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise InvalidRequestError(
                "source is not an existing directory", code="source_not_found"
            )
        directory = Path(resolved)
        try:
            names = self._entries(directory)
            files = self._files(directory, names)
        except PermissionError as exc:
            logger.warning("registration source %s cannot be read: %s", directory, exc)
            raise InvalidRequestError(
                "source cannot be read by the control plane", code="source_unreadable"
            ) from exc
        return CheckedSource(directory, files, self.limits)

    def _entries(self, directory: Path) -> set[str]:
        names: set[str] = set()
        with os.scandir(directory) as entries:
            for entry in entries:
                names.add(entry.name)
                if len(names) > self.limits.max_files:
                    raise InvalidRequestError(
                        f"source directory has more than {self.limits.max_files} entries",
                        code="source_too_many_files",
                    )
        return names

    def _files(self, directory: Path, names: set[str]) -> tuple[SourceFile, ...]:
        if SAFETENSORS_FILE not in names:
            for pickled in PICKLE_WEIGHT_FILES:
                if pickled in names:
                    raise InvalidAdapterError(
                        f"{pickled} is a pickle, which can run code when loaded: only "
                        f"{SAFETENSORS_FILE} is accepted",
                        code="pickle_weights",
                    )
        files: list[SourceFile] = []
        total = 0
        for name in COPIED_FILES:
            if name not in names:
                continue  # inspection of the copy reports what is missing
            files.append(self._file(directory / name))
            total += files[-1].size
            if (
                files[-1].size > self.limits.max_file_bytes
                or total > self.limits.max_artifact_bytes
            ):
                raise _too_large(self.limits)
        return tuple(files)

    def _file(self, path: Path) -> SourceFile:
        target = os.path.realpath(path)
        if not _inside(target, self._resolved_roots):
            logger.warning("source file %s refused: links to %s, outside the roots", path, target)
            raise _not_allowed(
                f"file {path.name} is a symbolic link leading outside the allowed directories"
            )
        try:
            info = os.lstat(target)  # resolved: no link left to follow
        except FileNotFoundError as exc:
            raise InvalidRequestError(
                f"{path.name} is a broken symbolic link", code="source_not_found"
            ) from exc
        if not stat.S_ISREG(info.st_mode):
            logger.warning(
                "source file %s refused: not a regular file (mode %o)", path, info.st_mode
            )
            raise InvalidRequestError(
                f"{path.name} is not a regular file (a FIFO, device, socket or directory is "
                "never read)",
                code="source_special_file",
            )
        return SourceFile(path.name, Path(target), info.st_size, info.st_dev, info.st_ino)


def _offset(progress: Progress | None, done: int, expected: int) -> Callable[[int], None] | None:
    """``progress`` told of one file's bytes as the whole copy's (``done`` before it)."""
    if progress is None:
        return None
    told = progress
    return lambda copied: told(done + copied, expected)


def _source_path(source: str) -> Path:
    """A local path or ``file://`` URI as a path (the source is never echoed back)."""
    parsed = urlparse(source)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidRequestError(
                "file URI with a remote host is not supported", code="unsupported_source"
            )
        return Path(unquote(parsed.path)).expanduser()
    if parsed.scheme and len(parsed.scheme) > 1:
        raise InvalidRequestError(
            "unsupported source: give a local path or a file:// URI", code="unsupported_source"
        )
    return Path(source).expanduser()
