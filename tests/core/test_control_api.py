"""The control plane's API as clients see it: paths, the resolve answer, errors.

The client against the real control plane is exercised by the CLI, resolver and demo tests;
here a scripted stdlib server plays what the real one cannot be made to answer on demand.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from hi_moe_lora.control_api import (
    AnswerError,
    ControlPlaneClient,
    ControlPlaneError,
    ControlPlaneUnreachable,
    NotFound,
    ResolvedAdapter,
    paths,
)

RESOLVED = {
    "name": "a",
    "version": "1.0.0",
    "served_name": "a@1.0.0",
    "lora_int_id": 3,
    "local_path": "/artifacts/a/1.0.0",
    "sha256": "ab" * 32,
    "rank": 8,
    "alpha": 16.0,
    "variant": "lora",
    "base_model": "/models/base",
}


def test_paths_quote_parameters_but_keep_the_version_separator() -> None:
    assert paths.admin_path(paths.RESOLVE, served_name="a@1.0.0") == "/admin/v1/resolve/a@1.0.0"
    assert paths.admin_path(paths.RESOLVE, served_name="a/../b c") == (
        "/admin/v1/resolve/a%2F..%2Fb%20c"
    )
    assert paths.admin_path(paths.PROMOTE, name="a", version="1.0.0") == (
        "/admin/v1/adapters/a/versions/1.0.0/promote"
    )


def test_resolved_adapter_parses_its_json() -> None:
    resolved = ResolvedAdapter.from_json(RESOLVED)
    assert resolved.lora_int_id == 3
    assert resolved.alpha == 16.0
    assert resolved.served_name == "a@1.0.0"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1, 2], "not a JSON object"),
        ({**RESOLVED, "lora_int_id": None}, "'lora_int_id'"),
        ({**RESOLVED, "rank": "eight"}, "'rank'"),
        ({**RESOLVED, "rank": True}, "'rank'"),
        ({k: v for k, v in RESOLVED.items() if k != "sha256"}, "'sha256'"),
    ],
)
def test_resolved_adapter_rejects_other_shapes(payload: object, message: str) -> None:
    with pytest.raises(AnswerError, match=message):
        ResolvedAdapter.from_json(payload)


class _Scripted(http.server.BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, str, bytes]]] = {}
    seen: ClassVar[list[tuple[str, str, str | None, bytes]]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        status, content_type, payload = self.answers.get(self.path, (404, "text/plain", b"?"))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[tuple[str, type[_Scripted]]]:
    handler = type("Handler", (_Scripted,), {"answers": {}, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", handler
    server.shutdown()
    server.server_close()


def _problem(status: int, code: str, detail: str) -> tuple[int, str, bytes]:
    body = {"title": "Not found", "status": status, "code": code, "detail": detail}
    return status, "application/problem+json", json.dumps(body).encode()


def test_calls_send_json_and_the_token(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    handler.answers["/admin/v1/adapters/a/traffic"] = (200, "application/json", b'{"name": "a"}')
    client = ControlPlaneClient(url, timeout_s=5, token="s3cret")
    assert client.set_traffic("a", {"1.1.0": 0.25}) == {"name": "a"}
    method, path, auth, body = handler.seen[-1]
    assert (method, path, auth) == ("PUT", "/admin/v1/adapters/a/traffic", "Bearer s3cret")
    assert json.loads(body) == {"weights": {"1.1.0": 0.25}}


def test_problems_become_typed_errors(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    handler.answers["/admin/v1/resolve/ghost"] = _problem(404, "adapter_not_found", "no ghost")
    handler.answers["/admin/v1/adapters"] = (500, "application/json", b'{"detail": "boom"}')
    client = ControlPlaneClient(url, timeout_s=5)
    with pytest.raises(NotFound) as missing:
        client.resolve("ghost")
    assert (missing.value.status, missing.value.code) == (404, "adapter_not_found")
    assert str(missing.value) == "Not found (adapter_not_found): no ghost"
    with pytest.raises(ControlPlaneError, match=r"^HTTP 500: boom$"):
        client.list_adapters()


def test_answers_that_are_not_the_documented_shape(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    handler.answers["/admin/v1/adapters"] = (200, "application/json", b'{"items": []}')
    handler.answers["/admin/v1/adapters/a"] = (200, "text/html", b"<html>")
    client = ControlPlaneClient(url, timeout_s=5)
    with pytest.raises(ControlPlaneError, match="lacks 'adapters'"):
        client.list_adapters()
    with pytest.raises(ControlPlaneError, match="not JSON"):
        client.get_adapter("a")


def test_unreachable(unused_tcp_port: int) -> None:
    client = ControlPlaneClient(f"http://127.0.0.1:{unused_tcp_port}", timeout_s=2)
    with pytest.raises(ControlPlaneUnreachable, match="cannot reach the control plane"):
        client.resolve("a")
