"""One file over HTTP into a local path (``urllib``), resuming with ``Range`` when it breaks.

:func:`download_file` sends the bearer token, bounds every socket operation by ``timeout_s``,
and when the connection breaks (reset, timeout, a body shorter than its ``Content-Length``, an
HTTP 5xx) asks again for the missing bytes only (``Range: bytes=<have>-`` with ``If-Range`` =
the first answer's ``ETag``, so a file that changed meanwhile comes back whole), up to
``attempts`` requests in all. A server that ignores ``Range`` (200) restarts the file. The final
size is checked against the expected one. Errors that a retry cannot fix (401, 403, 404, ...)
raise at once. Large files log their progress at INFO.
"""

from __future__ import annotations

import logging
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException, HTTPResponse
from pathlib import Path

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
DEFAULT_ATTEMPTS = 4
#: Files at least this large log their progress at INFO (start, every quarter, end).
PROGRESS_BYTES = 64 << 20
_RETRY_PAUSE_S = 0.2
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")
_RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class DownloadError(Exception):
    """A file could not be downloaded whole (``status``: the last HTTP status, if any)."""

    def __init__(self, url: str, reason: str, *, status: int | None = None) -> None:
        super().__init__(f"download of {url} failed: {reason}")
        self.url = url
        self.reason = reason
        self.status = status


class _Broken(Exception):
    """This attempt broke off; another may resume."""


@dataclass(frozen=True)
class Downloaded:
    """What :func:`download_file` did: the file's size, the bytes it transferred, the requests
    it made (more than one: it resumed or restarted)."""

    size: int
    transferred: int
    requests: int


def download_file(
    url: str,
    destination: Path,
    *,
    token: str | None = None,
    timeout_s: float = 30.0,
    expected_size: int | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Downloaded:
    """Download ``url`` into ``destination`` (created or truncated); see the module docstring.

    Raises :class:`DownloadError` when the file cannot be had whole within ``attempts``
    requests, when the server refuses it, or when its size is not ``expected_size``. A partial
    ``destination`` may remain: the caller owns the directory it is in.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    job = _Job(url, destination, token, timeout_s, expected_size)
    with destination.open("wb"):
        pass
    for attempt in range(1, attempts + 1):
        try:
            job.attempt()
        except _Broken as exc:
            if attempt == attempts:
                raise DownloadError(url, f"{exc} (after {attempts} attempts)") from None
            logger.warning(
                "download of %s broke off at %d bytes (%s); resuming (attempt %d of %d)",
                url,
                job.have,
                exc,
                attempt + 1,
                attempts,
            )
            time.sleep(_RETRY_PAUSE_S * attempt)
            continue
        break
    size = destination.stat().st_size
    if expected_size is not None and size != expected_size:
        raise DownloadError(url, f"got {size} bytes, expected {expected_size}")
    if job.large:
        logger.info("downloaded %s: %d bytes", url, size)
    return Downloaded(size=size, transferred=job.transferred, requests=job.requests)


class _Job:
    """The state of one download across its attempts."""

    def __init__(
        self,
        url: str,
        destination: Path,
        token: str | None,
        timeout_s: float,
        expected_size: int | None,
    ) -> None:
        self.url = url
        self.destination = destination
        self.token = token
        self.timeout_s = timeout_s
        self.total = expected_size
        self.have = 0
        self.etag: str | None = None
        self.transferred = 0
        self.requests = 0
        self.large = expected_size is not None and expected_size >= PROGRESS_BYTES
        self._next_report = 0.25

    def attempt(self) -> None:
        """One request: the missing bytes (or all), appended; raises :class:`_Broken`."""
        if self.total is not None and self.have == self.total and self.requests:
            return
        request = urllib.request.Request(self.url, method="GET")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if self.have:
            request.add_header("Range", f"bytes={self.have}-")
            if self.etag:
                request.add_header("If-Range", self.etag)
        self.requests += 1
        try:
            response: HTTPResponse = urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 416 and self.have and self.have == self._size_of_416(exc):
                return  # we had it all already
            if exc.code in _RETRYABLE_STATUS:
                raise _Broken(f"HTTP {exc.code}") from None
            raise DownloadError(
                self.url, f"HTTP {exc.code} {exc.reason}", status=exc.code
            ) from None
        except (urllib.error.URLError, OSError, HTTPException, ValueError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise _Broken(f"{type(reason).__name__}: {reason}") from None
        with response:
            self._receive(response)

    def _receive(self, response: HTTPResponse) -> None:
        status = response.status
        etag = response.headers.get("ETag")
        if status == 206:
            start, length_total = self._content_range(response.headers.get("Content-Range"))
            if start != self.have:
                raise DownloadError(self.url, f"asked for bytes from {self.have}, got {start}")
            if length_total is not None:
                self._learn_total(length_total)
            mode = "ab"
        elif status == 200:
            if self.have:
                logger.info("%s: the server sent the whole file again; restarting", self.url)
            self.have = 0
            mode = "wb"
        else:
            raise DownloadError(self.url, f"unexpected HTTP {status}", status=status)
        if etag:
            self.etag = etag
        declared = response.headers.get("Content-Length")
        expected = int(declared) if declared and declared.isdigit() else None
        if status == 200 and expected is not None:
            self._learn_total(expected)
        if self.large and self.have == 0:
            logger.info("downloading %s (%d bytes)", self.url, self.total or 0)
        received = 0
        with self.destination.open(mode) as out:
            while True:
                try:
                    chunk = response.read(CHUNK_BYTES)
                except (OSError, HTTPException, ValueError) as exc:  # reset, timeout, short
                    raise _Broken(f"{type(exc).__name__}: {exc}") from None
                if not chunk:
                    break
                out.write(chunk)
                received += len(chunk)
                self.have += len(chunk)
                self.transferred += len(chunk)
                self._progress()
        if expected is not None and received < expected:
            raise _Broken(f"connection closed after {received} of {expected} bytes")
        if self.total is not None and self.have < self.total:
            raise _Broken(f"have {self.have} of {self.total} bytes")

    def _learn_total(self, total: int) -> None:
        if self.total is not None and total != self.total:
            raise DownloadError(self.url, f"the server has {total} bytes, expected {self.total}")
        self.total = total
        self.large = total >= PROGRESS_BYTES

    def _content_range(self, header: str | None) -> tuple[int, int | None]:
        match = _CONTENT_RANGE.match(header or "")
        if match is None:
            raise DownloadError(self.url, f"206 with an unusable Content-Range {header!r}")
        total = match.group(3)
        return int(match.group(1)), None if total == "*" else int(total)

    def _size_of_416(self, exc: urllib.error.HTTPError) -> int | None:
        header = exc.headers.get("Content-Range", "") if exc.headers else ""
        match = re.match(r"^\s*bytes\s+\*/(\d+)\s*$", header)
        return int(match.group(1)) if match else None

    def _progress(self) -> None:
        if not self.large or not self.total:
            return
        while self.have / self.total >= self._next_report and self._next_report < 1.0:
            logger.info(
                "downloading %s: %d%% (%d of %d bytes)",
                self.url,
                round(self._next_report * 100),
                self.have,
                self.total,
            )
            self._next_report += 0.25
