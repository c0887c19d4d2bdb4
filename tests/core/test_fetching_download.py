"""``download_file`` against a real HTTP server (stdlib, loopback) that can break on purpose."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hi_moe_lora.fetching import DownloadError, download_file


@dataclass
class Files:
    """What the server serves and how it misbehaves; ``requests`` logs (path, Range)."""

    content: dict[str, bytes] = field(default_factory=dict)
    #: path -> how many of the next answers break off half way
    drops: dict[str, int] = field(default_factory=dict)
    ignore_range: bool = False
    token: str | None = None
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FileServer:
    """A loopback HTTP server serving ``files.content`` with Range support."""

    def __init__(self, files: Files) -> None:
        outer = files

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with outer.lock:
                    outer.requests.append((self.path, self.headers.get("Range")))
                    drop = outer.drops.get(self.path, 0)
                    if drop:
                        outer.drops[self.path] = drop - 1
                if outer.token and self.headers.get("Authorization") != f"Bearer {outer.token}":
                    self._plain(401)
                    return
                body = outer.content.get(self.path)
                if body is None:
                    self._plain(404)
                    return
                start, status = 0, 200
                match = re.match(r"bytes=(\d+)-$", self.headers.get("Range") or "")
                if match and not outer.ignore_range:
                    start = int(match.group(1))
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                part = body[start:]
                self.send_response(status)
                self.send_header("Content-Length", str(len(part)))
                self.send_header("ETag", '"v1"')
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.end_headers()
                if drop:  # half the body, then the connection dies
                    self.wfile.write(part[: len(part) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(part)

            def _plain(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def files() -> Files:
    return Files()


@pytest.fixture
def server(files: Files) -> Iterator[FileServer]:
    running = FileServer(files)
    yield running
    running.stop()


BODY = bytes(range(256)) * 4000  # ~1 MB


def test_downloads_a_whole_file(server: FileServer, files: Files, tmp_path: Path) -> None:
    files.content["/f"] = BODY
    done = download_file(server.url + "/f", tmp_path / "f", expected_size=len(BODY))
    assert (tmp_path / "f").read_bytes() == BODY
    assert (done.size, done.transferred, done.requests) == (len(BODY), len(BODY), 1)


def test_resumes_with_range_after_a_broken_connection(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    files.content["/f"] = BODY
    files.drops["/f"] = 2
    done = download_file(server.url + "/f", tmp_path / "f", expected_size=len(BODY))
    assert (tmp_path / "f").read_bytes() == BODY
    assert done.requests == 3
    ranges = [r for _, r in files.requests]
    assert ranges[0] is None
    assert ranges[1] == f"bytes={len(BODY) // 2}-"
    assert done.transferred == len(BODY)  # nothing fetched twice


def test_restarts_when_the_server_ignores_range(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    files.content["/f"] = BODY
    files.drops["/f"] = 1
    files.ignore_range = True
    done = download_file(server.url + "/f", tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == BODY
    assert done.requests == 2


def test_gives_up_after_its_attempts(server: FileServer, files: Files, tmp_path: Path) -> None:
    files.content["/f"] = BODY
    files.drops["/f"] = 10
    with pytest.raises(DownloadError, match="after 3 attempts"):
        download_file(server.url + "/f", tmp_path / "f", attempts=3)
    assert len(files.requests) == 3


def test_refusals_are_not_retried(server: FileServer, files: Files, tmp_path: Path) -> None:
    files.content["/f"] = BODY
    files.token = "secret"
    with pytest.raises(DownloadError) as refused:
        download_file(server.url + "/f", tmp_path / "f")
    assert refused.value.status == 401
    with pytest.raises(DownloadError) as missing:
        download_file(server.url + "/nope", tmp_path / "g", token="secret")
    assert missing.value.status == 404
    assert len(files.requests) == 2
    download_file(server.url + "/f", tmp_path / "f", token="secret")
    assert (tmp_path / "f").read_bytes() == BODY


def test_a_size_other_than_expected_is_an_error(
    server: FileServer, files: Files, tmp_path: Path
) -> None:
    files.content["/f"] = BODY
    with pytest.raises(DownloadError, match="expected"):
        download_file(server.url + "/f", tmp_path / "f", expected_size=len(BODY) + 1)


def test_an_unreachable_server_is_a_download_error(tmp_path: Path) -> None:
    from hi_moe_lora.app.processes import free_port

    url = f"http://127.0.0.1:{free_port()}/f"
    with pytest.raises(DownloadError, match="after 2 attempts"):
        download_file(url, tmp_path / "f", attempts=2, timeout_s=2)
