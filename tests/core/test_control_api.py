"""The control plane's API as clients see it: paths, the resolve answer, errors.

The client against the real control plane is exercised by the CLI, resolver and demo tests, and
its warm-up calls here against a real one (whose upstream does not listen); a scripted stdlib
server plays what the real one cannot be made to answer on demand (broken streams).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
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
from tests.openai.live import control_plane_settings, serve_control_plane
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

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
    # a short poll: shutdown() waits up to one poll interval (0.5 s by default)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
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


# ---------------------------------------------------------------------- warm-up

NOWHERE = "http://127.0.0.1:9"  # refuses connections: every warm-up result fails


@pytest.fixture
def real_plane(tmp_path: Path) -> Iterator[str]:
    """A real control plane serving sql-lora@1.0.0 (active) and 1.1.0 (inactive)."""
    served = serve_control_plane(control_plane_settings(tmp_path, DEFAULT_BASE_MODEL, [NOWHERE]))
    client = ControlPlaneClient(served.url, timeout_s=30)
    client.register("sql-lora", "1.0.0", str(write_adapter(tmp_path / "a")))
    client.register("sql-lora", "1.1.0", str(write_adapter(tmp_path / "b", seed=1)))
    yield served.url
    served.stop()


def test_warmup_report_and_last_report(real_plane: str) -> None:
    client = ControlPlaneClient(real_plane, timeout_s=30)
    with pytest.raises(NotFound) as none_yet:
        client.last_warmup()
    assert none_yet.value.code == "no_warmup_yet"

    report = client.warmup()  # the plan: the served versions (1.1.0 is not served)
    assert report["targets"] == [
        {"adapter": "sql-lora", "version": "1.0.0", "served_name": "sql-lora@1.0.0"}
    ]
    assert (report["upstreams"], report["loaded"], report["failed"]) == ([NOWHERE], 0, 1)
    (result,) = report["results"]
    assert (result["upstream"], result["outcome"], result["load_ms"]) == (NOWHERE, "failed", None)
    assert "ConnectError" in result["detail"]
    assert client.last_warmup() == report

    named = client.warmup(["sql-lora@1.1.0", "sql-lora@1.1.0"])  # duplicates warmed once
    assert [r["served_name"] for r in named["results"]] == ["sql-lora@1.1.0"]
    assert client.last_warmup() == named


def test_warmup_events_arrive_in_order(real_plane: str) -> None:
    client = ControlPlaneClient(real_plane, timeout_s=30)
    events = list(client.warmup_events(["sql-lora", "sql-lora@1.1.0"]))
    assert [e["event"] for e in events] == ["plan", "result", "result", "done"]
    plan, *results, done = events
    assert (plan["total"], plan["upstreams"]) == (2, [NOWHERE])
    served = ["sql-lora@1.0.0", "sql-lora@1.1.0"]
    assert [t["served_name"] for t in plan["targets"]] == served
    assert sorted(r["served_name"] for r in results) == served
    assert {r["outcome"] for r in results} == {"failed"}
    assert (done["loaded"], done["failed"]) == (0, 2)
    assert done["time_ms"] >= 0
    last = client.last_warmup()
    assert sorted(r["served_name"] for r in last["results"]) == served

    # leaving early closes the stream; the run still finishes on the control plane
    stream = client.warmup_events(["sql-lora@1.0.0"])
    assert next(stream)["event"] == "plan"
    stream.close()


def test_warmup_errors_are_typed(real_plane: str) -> None:
    client = ControlPlaneClient(real_plane, timeout_s=30)
    events = client.warmup_events(["ghost-lora"])  # nothing is sent yet
    with pytest.raises(NotFound) as missing:
        next(events)
    assert (missing.value.status, missing.value.code) == (404, "adapter_not_found")
    with pytest.raises(NotFound) as no_version:
        client.warmup(["sql-lora@9.9.9"])
    assert no_version.value.code == "version_not_found"
    with pytest.raises(ControlPlaneError) as empty:
        client.warmup([])
    assert empty.value.status == 422
    with pytest.raises(NotFound):  # none of them ran
        client.last_warmup()


def test_warmup_events_unreachable(unused_tcp_port: int) -> None:
    client = ControlPlaneClient(f"http://127.0.0.1:{unused_tcp_port}", timeout_s=2)
    with pytest.raises(ControlPlaneUnreachable, match="cannot reach the control plane"):
        next(client.warmup_events())


def _ndjson(*lines: bytes) -> tuple[int, str, bytes]:
    return 200, paths.NDJSON, b"".join(line + b"\n" for line in lines)


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        (_ndjson(b'{"event": "plan", "total": 1}'), ControlPlaneUnreachable, "before its 'done'"),
        (_ndjson(b'{"event": "plan"}', b"<html>"), ControlPlaneError, "line is not JSON"),
        (_ndjson(b"[1, 2]"), ControlPlaneError, "not a JSON object"),
        ((200, "application/json", b"{}"), ControlPlaneError, "not application/x-ndjson"),
    ],
)
def test_broken_warmup_streams(
    scripted: tuple[str, type[_Scripted]],
    answer: tuple[int, str, bytes],
    error: type[ControlPlaneError],
    message: str,
) -> None:
    url, handler = scripted
    handler.answers["/admin/v1/warmup"] = answer
    client = ControlPlaneClient(url, timeout_s=5)
    with pytest.raises(error, match=message):
        list(client.warmup_events(["a"]))
    method, path, _, body = handler.seen[-1]
    assert (method, path, json.loads(body)) == ("POST", "/admin/v1/warmup", {"adapters": ["a"]})


def test_warmup_events_skip_blank_lines(scripted: tuple[str, type[_Scripted]]) -> None:
    url, handler = scripted
    handler.answers["/admin/v1/warmup"] = _ndjson(b'{"event": "plan"}', b"", b'{"event": "done"}')
    client = ControlPlaneClient(url, timeout_s=5)
    assert [e["event"] for e in client.warmup_events()] == ["plan", "done"]
    assert json.loads(handler.seen[-1][3]) == {}


def test_health_reads_the_monitors_picture(real_plane: str) -> None:
    picture = ControlPlaneClient(real_plane, timeout_s=30).health()
    # health checks are off in this plane: nothing has been checked
    assert picture["status"] == "unknown"
    assert [u["url"] for u in picture["upstreams"]] == [NOWHERE]
    assert picture["upstreams"][0]["up"] is None
