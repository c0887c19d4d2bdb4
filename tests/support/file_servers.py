"""Real file servers on loopback for remote-source tests: HTTPS/HTTP (stdlib) and FTP (pyftpdlib).

:func:`http_server` serves :class:`Route`s by path (everything else is 404) over HTTPS with a
certificate of a test CA (``trustme``), or over plain HTTP; a route can also misbehave on
purpose: redirect, understate its size and stream without end, send forever without a size, or
drip a byte at a time. Every request line is recorded (``server.requests``).
:func:`ftp_server` serves a directory read-only to anonymous and to one user with a password.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import trustme

Mode = Literal["plain", "redirect", "understated", "endless", "drip", "declared_huge"]
#: How long a misbehaving route keeps sending before giving up on its own.
MAX_SEND_S = 20.0


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    mode: Mode = "plain"
    location: str = ""
    headers: dict[str, str] = field(default_factory=dict)


class FileServer(ThreadingHTTPServer):
    daemon_threads = True
    routes: dict[str, Route]
    requests: list[str]
    base_url: str

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up (limits, refusals, TLS failures) are expected here."""


class _Handler(BaseHTTPRequestHandler):
    server: FileServer

    def log_message(self, format: str, *args: Any) -> None:
        logging.getLogger(__name__).debug(format, *args)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, *, body: bool) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404)
            return
        self.send_response(route.status)
        for name, value in route.headers.items():
            self.send_header(name, value)
        if route.mode == "redirect":
            self.send_header("Location", route.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if route.mode == "plain":
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            if body:
                self.wfile.write(route.body)
            return
        if route.mode == "declared_huge":
            self.send_header("Content-Length", str(1 << 40))
            self.end_headers()
            if body:
                self.wfile.write(route.body)
            return
        if route.mode == "understated":  # claims 64 bytes, then streams chunks without end
            self.send_header("Content-Length", "64")
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if body:
            self._stream(route.mode)

    def _stream(self, mode: Mode) -> None:
        chunk = b"\0" * (64 << 10)
        started = time.monotonic()
        with contextlib.suppress(OSError):
            while time.monotonic() - started < MAX_SEND_S:
                if mode == "understated":
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                elif mode == "endless":
                    self.wfile.write(chunk)
                else:  # drip
                    self.wfile.write(b"\0")
                    self.wfile.flush()
                    time.sleep(0.05)


@dataclass
class LocalCA:
    ca: trustme.CA
    bundle: Path


def make_ca(directory: Path) -> LocalCA:
    """A fresh CA (its certificate written to ``directory/ca.pem``)."""
    ca = trustme.CA()
    bundle = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    return LocalCA(ca, bundle)


@contextlib.contextmanager
def http_server(ca: LocalCA | None) -> Iterator[FileServer]:
    """A server on ``127.0.0.1``: HTTPS with a certificate of ``ca``, plain HTTP without one."""
    server = FileServer(("127.0.0.1", 0), _Handler)
    server.routes = {}
    server.requests = []
    scheme = "http"
    if ca is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    server.base_url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def serve_adapter(server: FileServer, prefix: str, directory: Path) -> str:
    """Serve every file of ``directory`` below ``prefix``; the directory's URL."""
    for path in directory.iterdir():
        server.routes[f"{prefix}/{path.name}"] = Route(path.read_bytes())
    return server.base_url + prefix


FTP_USER = "registry"
FTP_PASSWORD = "s3cr3t-pw-4711"


@contextlib.contextmanager
def ftp_server(root: Path) -> Iterator[str]:
    """``ftp://127.0.0.1:<port>`` serving ``root`` read-only (anonymous, and FTP_USER)."""
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import ThreadedFTPServer

    authorizer = DummyAuthorizer()
    authorizer.add_user(FTP_USER, FTP_PASSWORD, str(root), perm="elr")
    authorizer.add_anonymous(str(root), perm="elr")
    handler = type("Handler", (FTPHandler,), {"authorizer": authorizer})
    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    server = ThreadedFTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"timeout": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield f"ftp://127.0.0.1:{server.address[1]}"
    finally:
        server.close_all()
        thread.join(timeout=10)
