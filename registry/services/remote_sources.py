"""Registration from remote sources: ``https://`` directories and fsspec object storage (SSRF-safe).

A remote source names a directory by URL; registration fetches the two files vLLM reads below
it, ``adapter_config.json`` and ``adapter_model.safetensors``, and nothing else. Two readers:

- ``https://`` (and ``http://`` where a prefix names it explicitly): the standard library's
  :mod:`http.client`, one connection per file, certificates checked against the system's trust
  store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured) plus ``source_ca_bundle`` when set.
  Redirects are followed by hand, at most :data:`MAX_REDIRECTS`, each target held to the same
  rules as the URL itself; answers are asked for uncompressed and a compressed one is refused.
- fsspec protocols of object storage and file servers (``s3://``, ``gs://``, ``az://``,
  ``ftp://``, ... :data:`FSSPEC_PROTOCOLS`) through the optional ``remote`` extra and the
  protocol's backend package. Local, in-process and wrapping file systems are never used: a local
  directory is read through the source roots (:mod:`registry.services.sources`).

Security first. Nothing is read unless the URL starts with one of the configured prefixes
(``HI_MOE_LORA_SOURCE_URL_PREFIXES``; none by default, so no remote source is accepted), at a
path boundary (the prefix ``https://host/a`` does not admit ``https://host/ab`` nor
``https://host.evil``). URLs with dot segments, encoded slashes, control characters, query
strings, fragments or chained fsspec protocols (``::``) are refused; credentials are accepted in
fsspec URLs only (the backends read them there), never stored, logged or echoed: the stored
``source_uri`` and every log line carry the URL without them, and error details never quote the
URL at all. Limits are those of local sources (``source_max_file_bytes``,
``source_max_artifact_bytes``): a declared size over them is refused before the body is read,
and the bytes are counted as they arrive, so a server that understates its size or sends
forever is cut off. Each connect and read waits at most ``read_timeout_s``, the whole fetch at
most ``deadline_s``. A directory holding only pickled weights is refused without downloading
them (``pickle_weights``).

The files land in the store's staging directory and are validated there exactly like a local
copy; any failure removes the staging directory, so nothing is half-registered.

Problems are :class:`~registry.errors.InvalidRequestError`s (422) with stable codes.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import logging
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

from hi_moe_lora.adapters.inspection import PICKLE_WEIGHT_FILES, SAFETENSORS_FILE
from registry.errors import InvalidAdapterError, InvalidRequestError
from registry.services.sources import COPIED_FILES, Progress, SourceLimits

logger = logging.getLogger(__name__)

PREFIXES_SETTING = "HI_MOE_LORA_SOURCE_URL_PREFIXES"
HTTP_SCHEMES = frozenset({"https", "http"})
#: fsspec protocols registration may read from: object storage and file servers.
FSSPEC_PROTOCOLS = frozenset(
    {
        "s3",
        "s3a",
        "gs",
        "gcs",
        "az",
        "abfs",
        "abfss",
        "adl",
        "oci",
        "oss",
        "ftp",
        "sftp",
        "ssh",
        "hdfs",
        "webhdfs",
        "hf",
    }
)
#: Keyword arguments giving a backend its connect/read timeout (others use their own settings).
_TIMEOUT_OPTIONS = {"ftp": "timeout", "sftp": "timeout", "ssh": "timeout"}
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 1 << 20
_USER_AGENT = "hi-moe-lora-registry"


@functools.cache
def _installed(protocol: str) -> bool:
    """Whether fsspec and the backend of ``protocol`` can be imported."""
    try:
        _filesystem_class(protocol)
    except ValueError:
        return False
    return True


def _filesystem_class(protocol: str) -> type:
    try:
        import fsspec

        cls: type = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        raise ValueError(
            f"{protocol}:// sources need fsspec and its {protocol} backend: install "
            f"hi-moe-lora[remote] and the backend package ({type(exc).__name__}: {exc})"
        ) from exc
    return cls


def redact(url: str) -> str:
    """``url`` without credentials, query string or fragment: what logs and records show."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


def _invalid(why: str) -> InvalidRequestError:
    return InvalidRequestError(f"source URL {why}", code="source_url_invalid")


def _too_large(limits: SourceLimits) -> InvalidRequestError:
    return InvalidRequestError(
        f"adapter files exceed the limits: {limits.max_file_bytes} bytes per file, "
        f"{limits.max_artifact_bytes} bytes per adapter",
        code="source_too_large",
    )


def _timed_out() -> InvalidRequestError:
    return InvalidRequestError("the source server did not answer in time", code="source_timeout")


def _normal(url: str, *, credentials: bool) -> str:
    """``url`` checked (module docstring) and normalised for prefix matching: lower-case scheme
    and host, no credentials. ``credentials``: whether user:password@ may appear."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F or c == "\\" for c in url):
        raise _invalid("contains spaces, control characters or backslashes")
    if "::" in url:
        raise _invalid("chains file systems ('::'), which is not supported")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (validates the port)
    except ValueError as exc:
        raise _invalid("is malformed") from exc
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise _invalid("must not have a query string or fragment")
    _, at, host = parts.netloc.rpartition("@")
    if at and not credentials:
        raise _invalid("must not contain credentials (user:password@)")
    if not host:
        raise _invalid("has no host")
    lowered = parts.path.lower()
    if "%2f" in lowered or "%5c" in lowered or "%00" in lowered:
        raise _invalid("must not contain encoded slashes or NUL")
    if any(segment in (".", "..") for segment in unquote(parts.path).split("/")):
        raise _invalid("must not contain '.' or '..' segments")
    return f"{parts.scheme.lower()}://{host.lower()}{parts.path}"


def _starts_with(url: str, prefix: str) -> bool:
    """``url`` lies below ``prefix`` at a path boundary (both normalised)."""
    if url == prefix:
        return True
    if not url.startswith(prefix):
        return False
    return prefix.endswith("/") or url[len(prefix)] == "/"


class _Opened(Protocol):
    def read(self, size: int) -> bytes: ...


@dataclass
class _Download:
    """One file being fetched: its name, its declared size (``None``: unknown) and its body."""

    name: str
    size: int | None
    read: Callable[[int], bytes]


class RemoteSourcePolicy:
    """The URL prefixes, limits, timeouts and trust remote registration obeys."""

    def __init__(
        self,
        prefixes: Sequence[str],
        limits: SourceLimits | None = None,
        *,
        read_timeout_s: float = 30.0,
        deadline_s: float = 1800.0,
        ca_bundle: Path | None = None,
    ) -> None:
        self.limits = limits or SourceLimits()
        self.read_timeout_s = read_timeout_s
        self.deadline_s = deadline_s
        normalised = []
        for prefix in prefixes:
            scheme = urlsplit(prefix).scheme.lower()
            if scheme not in HTTP_SCHEMES | FSSPEC_PROTOCOLS:
                raise ValueError(
                    f"{PREFIXES_SETTING}: {redact(prefix)!r} names no supported protocol "
                    f"(https, http, or one of {', '.join(sorted(FSSPEC_PROTOCOLS))})"
                )
            try:
                normal = _normal(prefix, credentials=False)
            except InvalidRequestError as exc:
                raise ValueError(f"{PREFIXES_SETTING}: {redact(prefix)!r}: {exc.detail}") from exc
            if scheme in FSSPEC_PROTOCOLS:
                _filesystem_class(scheme)
            normalised.append(normal)
        self.prefixes = tuple(normalised)
        self._ca_bundle = ca_bundle
        if ca_bundle is not None:
            _ = self.ssl_context  # a CA bundle that cannot be read fails the start, not a fetch

    @functools.cached_property
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS trust of HTTPS fetches: the system's (``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
        honoured) and the CA bundle, if any. Made on first use: loading the system's
        certificates takes tens of milliseconds, and most instances never fetch."""
        context = ssl.create_default_context()
        if self._ca_bundle is not None:
            context.load_verify_locations(cafile=str(self._ca_bundle))
        return context

    def handles(self, source: str) -> bool:
        """Whether ``source`` is a URL of a protocol this policy knows (allowed or not)."""
        scheme = urlsplit(source).scheme.lower()
        return scheme in HTTP_SCHEMES or (scheme in FSSPEC_PROTOCOLS and _installed(scheme))

    def allowed(self, url: str, *, credentials: bool) -> str:
        """``url`` normalised, if it is well formed and below a prefix; else a 422."""
        normal = _normal(url, credentials=credentials)
        if any(_starts_with(normal, prefix) for prefix in self.prefixes):
            return normal
        if not self.prefixes:
            logger.info("registration source %s refused: remote sources are off", redact(url))
            raise InvalidRequestError(
                f"remote sources are not accepted here: no URL prefixes are configured "
                f"({PREFIXES_SETTING})",
                code="remote_sources_disabled",
            )
        logger.info("registration source %s refused: outside the URL prefixes", redact(url))
        hint = (
            " (plain HTTP needs a prefix that names the http scheme explicitly)"
            if normal.startswith("http://")
            else ""
        )
        raise InvalidRequestError(
            f"source URL is outside the allowed URL prefixes ({PREFIXES_SETTING}){hint}",
            code="source_url_not_allowed",
        )

    def check(self, source: str) -> RemoteSource:
        """Every check that needs no network; nothing is fetched or written."""
        scheme = urlsplit(source).scheme.lower()
        self.allowed(source, credentials=scheme not in HTTP_SCHEMES)
        return RemoteSource(source, redact(source), self)


class RemoteSource:
    """A remote directory that passed the URL checks; :meth:`copy_to` fetches its files."""

    def __init__(self, url: str, uri: str, policy: RemoteSourcePolicy) -> None:
        self._url = url  # may hold credentials (fsspec): never logged or echoed
        #: the URL as recorded and logged (no credentials)
        self.uri = uri
        self._policy = policy
        self._scheme = urlsplit(url).scheme.lower()

    def copy_to(self, target: Path, progress: Progress | None = None) -> None:
        """Fetch the adapter's files into ``target`` (an empty directory of ours)."""
        deadline = time.monotonic() + self._policy.deadline_s
        with ExitStack() as stack:
            if self._scheme in HTTP_SCHEMES:
                reader: _Reader = _HttpReader(self._url, self.uri, self._policy, deadline, stack)
            else:
                reader = _FsspecReader(self._url, self.uri, self._policy, stack)
            downloads = self._open_all(reader)
            self._fetch(downloads, target, deadline, progress)

    def _open_all(self, reader: _Reader) -> list[_Download]:
        found: dict[str, _Download] = {}
        for name in COPIED_FILES:
            download = reader.open(name)
            if download is not None:
                found[name] = download
        if SAFETENSORS_FILE not in found:
            for pickled in PICKLE_WEIGHT_FILES:
                if reader.exists(pickled):
                    raise InvalidAdapterError(
                        f"{pickled} is a pickle, which can run code when loaded: only "
                        f"{SAFETENSORS_FILE} is accepted",
                        code="pickle_weights",
                    )
        if not found:
            logger.info("registration source %s: no adapter files found", self.uri)
            raise InvalidRequestError(
                "source holds neither adapter file (nothing found at the URL)",
                code="source_not_found",
            )
        limits = self._policy.limits
        declared = [d.size for d in found.values() if d.size is not None]
        if any(size > limits.max_file_bytes for size in declared) or (
            sum(declared) > limits.max_artifact_bytes
        ):
            raise _too_large(limits)
        return list(found.values())  # inspection of the copy reports a missing one

    def _fetch(
        self,
        downloads: list[_Download],
        target: Path,
        deadline: float,
        progress: Progress | None,
    ) -> None:
        limits = self._policy.limits
        sizes = [d.size for d in downloads]
        total = None if None in sizes else sum(s for s in sizes if s is not None)
        copied = 0
        if progress is not None:
            progress(0, total)
        for download in downloads:
            limit = min(limits.max_file_bytes, limits.max_artifact_bytes - copied)
            written = 0
            with (target / download.name).open("xb") as out:
                for chunk in self._chunks(download, deadline):
                    written += len(chunk)
                    if written > limit:
                        logger.warning(
                            "registration source %s: %s exceeds the size limits",
                            self.uri,
                            download.name,
                        )
                        raise _too_large(limits)
                    out.write(chunk)
                    if progress is not None:
                        progress(copied + written, total)
            if download.size is not None and written != download.size:
                raise InvalidRequestError(
                    f"{download.name} ended before its declared size", code="source_unreadable"
                )
            copied += written

    def _chunks(self, download: _Download, deadline: float) -> Iterator[bytes]:
        while True:
            if time.monotonic() > deadline:
                logger.warning("registration source %s: fetch deadline passed", self.uri)
                raise _timed_out()
            chunk = download.read(_CHUNK)
            if not chunk:
                return
            yield chunk


class _Reader(Protocol):
    def open(self, name: str) -> _Download | None:
        """The file ``name`` below the source, opened; ``None`` if it does not exist."""

    def exists(self, name: str) -> bool: ...


class _HttpReader:
    """Files below an ``https://`` (or allowed ``http://``) directory URL."""

    def __init__(
        self,
        url: str,
        uri: str,
        policy: RemoteSourcePolicy,
        deadline: float,
        stack: ExitStack,
    ) -> None:
        self._base = url.rstrip("/") + "/"
        self._uri = uri
        self._policy = policy
        self._deadline = deadline
        self._stack = stack

    def open(self, name: str) -> _Download | None:
        answer = self._get("GET", name)
        if answer is None:
            return None
        connection, response = answer
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise InvalidRequestError(
                f"the source server sent {name} compressed; only plain bytes are accepted",
                code="source_unreadable",
            )
        declared = response.length  # None when chunked or unknown (then counted as it streams)

        def read(size: int) -> bytes:
            self._arm(connection)
            try:
                return response.read1(size)
            except TimeoutError as exc:
                raise _timed_out() from exc
            except (OSError, http.client.HTTPException) as exc:
                logger.warning(
                    "registration source %s: reading %s failed: %s", self._uri, name, exc
                )
                raise InvalidRequestError(
                    f"the connection broke while {name} was fetched", code="source_unreadable"
                ) from exc

        return _Download(name, declared, read)

    def exists(self, name: str) -> bool:
        answer = self._get("HEAD", name)
        if answer is None:
            return False
        answer[0].close()
        return True

    def _get(
        self, method: str, name: str
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse] | None:
        """The answer for ``name``, redirects followed within the prefixes; None on 404/410."""
        url = self._base + name
        for _ in range(MAX_REDIRECTS + 1):
            connection, response = self._request(method, url)
            status = response.status
            if status in _REDIRECTS:
                location = response.getheader("Location")
                connection.close()
                if not location:
                    raise InvalidRequestError(
                        "the source server redirected without a location",
                        code="source_unreadable",
                    )
                target = urljoin(url, location)
                try:
                    self._policy.allowed(target, credentials=False)
                except InvalidRequestError as exc:
                    logger.warning(
                        "registration source %s: redirect to %s refused (%s)",
                        self._uri,
                        redact(target),
                        exc.code,
                    )
                    raise InvalidRequestError(
                        "the source server redirected outside the allowed URL prefixes "
                        f"({PREFIXES_SETTING})",
                        code="source_redirect_not_allowed",
                    ) from exc
                url = target
                continue
            if status in (404, 410):
                connection.close()
                return None
            if status != 200:
                connection.close()
                logger.info("registration source %s: %s answered HTTP %d", self._uri, name, status)
                raise InvalidRequestError(
                    f"the source server answered HTTP {status} for {name}",
                    code="source_unreadable",
                )
            return connection, response
        raise InvalidRequestError(
            f"the source server redirected more than {MAX_REDIRECTS} times",
            code="source_redirect_not_allowed",
        )

    def _request(
        self, method: str, url: str
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        parts: SplitResult = urlsplit(url)
        host = parts.hostname or ""
        timeout = self._remaining()
        connection: http.client.HTTPConnection
        if parts.scheme.lower() == "https":
            connection = http.client.HTTPSConnection(
                host, parts.port, timeout=timeout, context=self._policy.ssl_context
            )
        else:
            connection = http.client.HTTPConnection(host, parts.port, timeout=timeout)
        self._stack.callback(connection.close)
        headers = {
            "User-Agent": _USER_AGENT,
            "Accept-Encoding": "identity",
            "Accept": "*/*",
        }
        try:
            connection.request(method, parts.path or "/", headers=headers)
            return connection, connection.getresponse()
        except TimeoutError as exc:
            logger.warning("registration source %s: %s timed out", self._uri, redact(url))
            raise _timed_out() from exc
        except ssl.SSLError as exc:
            logger.warning("registration source %s: TLS failed: %s", self._uri, exc)
            raise InvalidRequestError(
                "the source server's TLS certificate could not be verified (or TLS failed)",
                code="source_unreachable",
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            logger.warning("registration source %s: %s failed: %s", self._uri, redact(url), exc)
            raise InvalidRequestError(
                f"the source server cannot be reached ({type(exc).__name__})",
                code="source_unreachable",
            ) from exc

    def _remaining(self) -> float:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out()
        return min(self._policy.read_timeout_s, remaining)

    def _arm(self, connection: http.client.HTTPConnection) -> None:
        """Each read waits at most the read timeout, and never past the deadline."""
        if connection.sock is not None:
            connection.sock.settimeout(self._remaining())


class _FsspecReader:
    """Files below an fsspec URL (object storage, file servers)."""

    def __init__(self, url: str, uri: str, policy: RemoteSourcePolicy, stack: ExitStack) -> None:
        self._uri = uri
        self._stack = stack
        self._limits = policy.limits
        userinfo = urlsplit(url).netloc.rpartition("@")[0]
        #: what a backend's error message must not carry into the log
        self._secrets = [s for s in (userinfo, userinfo.partition(":")[2]) if s]
        scheme = urlsplit(url).scheme.lower()
        options: dict[str, Any] = {"skip_instance_cache": True}
        if scheme in _TIMEOUT_OPTIONS:
            options[_TIMEOUT_OPTIONS[scheme]] = policy.read_timeout_s
        with self._errors("connecting"):
            import fsspec.core

            self._fs, root = fsspec.core.url_to_fs(url, **options)
        self._root = str(root).rstrip("/")

    def open(self, name: str) -> _Download | None:
        path = f"{self._root}/{name}"
        with self._errors(f"reading {name}"):
            try:
                info = self._fs.info(path)
            except FileNotFoundError:
                return None
            if info.get("type") != "file":
                raise InvalidRequestError(
                    f"{name} is not a regular file", code="source_special_file"
                )
            size = info.get("size")
            declared = int(size) if isinstance(size, int) else None
            if declared is not None and declared > self._limits.max_file_bytes:
                raise _too_large(self._limits)
            handle = self._stack.enter_context(self._fs.open(path, "rb"))

        def read(size: int) -> bytes:
            with self._errors(f"reading {name}"):
                chunk: bytes = handle.read(size)
                return chunk

        return _Download(name, declared, read)

    def exists(self, name: str) -> bool:
        with self._errors("listing"):
            return bool(self._fs.exists(f"{self._root}/{name}"))

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except InvalidRequestError:
            raise
        except TimeoutError as exc:
            logger.warning("registration source %s: %s timed out", self._uri, doing)
            raise _timed_out() from exc
        except Exception as exc:  # backends raise their own types (botocore, paramiko, ...)
            message = str(exc)
            for secret in self._secrets:
                message = message.replace(secret, "***")
            logger.warning(
                "registration source %s: %s failed: %s: %s",
                self._uri,
                doing,
                type(exc).__name__,
                message,
            )
            raise InvalidRequestError(
                f"the source cannot be read ({doing} failed: {type(exc).__name__})",
                code="source_unreadable",
            ) from exc
