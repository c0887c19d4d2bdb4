"""Hostile and broken input: every case a clear 4xx in the path's error shape, nothing changed.

Admin API: ``application/problem+json`` (``type, title, status, detail, code``); ``/v1``:
OpenAI's ``{"error": {"message", "type", "param", "code"}}``. After each case the registry is
exactly as before: every row of every table (the ``lora_id_counter`` included) and every file
under the artifact store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, inspect, select, table, text
from sqlalchemy.pool import NullPool

from registry.app import create_app
from registry.settings import ControlPlaneSettings
from tests.registry.conftest import AdapterFactory

PROBLEM_JSON = "application/problem+json"
MIB = 1024 * 1024
LIMIT = 8 * MIB  # the default HI_MOE_LORA_MAX_BODY_BYTES
ADMIN = "/admin/v1/adapters"
NAME = "hostile-lora"
CYRILLIC_A = "\u0430"  # looks like 'a'
QUICK_S = 5.0  # a refused list of up to 10**6 items: parsed once, never processed item by item


@pytest.fixture
def database_url(request: pytest.FixtureRequest) -> str:
    """SQLite for the whole matrix; PostgreSQL (which refuses NUL) where a test asks for it."""
    kind = getattr(request, "param", "sqlite")
    url: str = request.getfixturevalue("sqlite_url" if kind == "sqlite" else "postgres_url")
    return url


POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)


@pytest.fixture
def settings(settings: ControlPlaneSettings) -> ControlPlaneSettings:
    # no vLLM behind this app: a closed port (a completion that got that far would be a 503)
    return settings.model_copy(update={"vllm_urls": ["http://127.0.0.1:9"]})


@pytest.fixture
async def client(settings: ControlPlaneSettings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://registry", timeout=60
        ) as http:
            yield http


def _snapshot(database_url: str, artifact_dir: Path) -> dict[str, Any]:
    """Rows of every table (the id counter too) and every file (with its digest) in the store."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        rows: dict[str, list[tuple[Any, ...]]] = {}
        with engine.connect() as connection:
            for name in sorted(inspect(connection).get_table_names()):
                result = connection.execute(select(text("*")).select_from(table(name)))
                rows[name] = sorted((tuple(row) for row in result), key=repr)
    finally:
        engine.dispose()
    files = {
        str(path.relative_to(artifact_dir)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(artifact_dir.rglob("*"))
        if path.is_file()
    }
    return {"rows": rows, "files": files}


@pytest.fixture
async def fleet(client: httpx.AsyncClient, make_adapter: AdapterFactory) -> None:
    """``hostile-lora`` 1.0.0 (active, nothing to roll back to) and 1.1.0 (inactive)."""
    for seed, version in enumerate(["1.0.0", "1.1.0"]):
        body = {"version": version, "source": str(make_adapter(version, seed=seed))}
        response = await client.post(f"{ADMIN}/{NAME}/versions", json=body)
        assert response.status_code == 201, response.text


Body = Callable[[], bytes]


def _json(value: Any) -> Body:
    return lambda: json.dumps(value).encode()


def _raw(data: bytes) -> Body:
    return lambda: data


def _items(count: int, item: str = "a") -> list[str]:
    return [item] * count


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    status: int
    code: str | None = None  # the problem's or error's code, where it is stable
    body: Body | None = None
    chunked: bool = False  # no Content-Length: the limit counts the bytes as they stream in
    content_type: str = "application/json"

    @property
    def openai(self) -> bool:
        return self.path.startswith("/v1/")


def _register(body: Any, status: int = 422, code: str | None = "request_validation") -> Case:
    return Case("POST", f"{ADMIN}/new-lora/versions", status, code, _json(body))


def _chat(body: Any, status: int = 400, code: str | None = "invalid_request") -> Case:
    return Case("POST", "/v1/chat/completions", status, code, _json(body))


VALID = {"version": "1.0.0", "source": "/nowhere"}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}
DEEP = b"[" * 100_000
PAD = "x" * (LIMIT + 1)

CASES: dict[str, Case] = {
    # ------------------------------------------------------------ malformed JSON, nesting
    "admin-malformed-json": Case(
        "POST", f"{ADMIN}/new-lora/versions", 422, "request_validation", _raw(b'{"version": ')
    ),
    "admin-not-json-traffic": Case(
        "PUT", f"{ADMIN}/{NAME}/traffic", 422, "request_validation", _raw(b"weights=1")
    ),
    "admin-deep-nesting": Case(
        "POST", f"{ADMIN}/new-lora/versions", 400, "malformed_json", _raw(DEEP)
    ),
    "admin-deep-nesting-in-field": Case(
        "PUT", f"{ADMIN}/{NAME}/traffic", 400, "malformed_json", _raw(b'{"weights": ' + DEEP)
    ),
    "admin-warmup-deep-nesting": Case(
        "POST", "/admin/v1/warmup", 400, "malformed_json", _raw(DEEP)
    ),
    "v1-malformed-json": Case("POST", "/v1/chat/completions", 400, "invalid_request", _raw(b"{")),
    "v1-deep-nesting-chat": Case(
        "POST", "/v1/chat/completions", 400, "invalid_request", _raw(DEEP)
    ),
    "v1-deep-nesting-completions": Case(
        "POST", "/v1/completions", 400, "invalid_request", _raw(b'{"prompt": ' + DEEP)
    ),
    "v1-deep-nesting-dispatch": Case("POST", "/v1/dispatch", 400, "invalid_request", _raw(DEEP)),
    "v1-deep-nesting-feedback": Case("POST", "/v1/feedback", 400, "invalid_request", _raw(DEEP)),
    "v1-not-an-object": Case("POST", "/v1/dispatch/batch", 400, "invalid_request", _json([1])),
    # ------------------------------------------------------------ bodies over the limit
    "admin-too-large": _register({**VALID, "description": PAD}, 413, "body_too_large"),
    "admin-too-large-chunked": Case(
        "POST",
        f"{ADMIN}/new-lora/versions",
        413,
        "body_too_large",
        _json({**VALID, "description": PAD}),
        chunked=True,
    ),
    "admin-too-large-hints-chunked": Case(
        "PUT",
        f"{ADMIN}/{NAME}/dispatch",
        413,
        "body_too_large",
        _json({"keywords": [PAD]}),
        chunked=True,
    ),
    "v1-too-large": _chat({"model": NAME, **CHAT, "pad": PAD}, 413, "body_too_large"),
    "v1-too-large-chunked": Case(
        "POST",
        "/v1/chat/completions",
        413,
        "body_too_large",
        _json({"model": NAME, **CHAT, "pad": PAD}),
        chunked=True,
    ),
    "v1-dispatch-too-large-chunked": Case(
        "POST", "/v1/dispatch", 413, "body_too_large", _json({"objective": PAD}), chunked=True
    ),
    "v1-feedback-too-large": Case(
        "POST", "/v1/feedback", 413, "body_too_large", _json({"request_id": PAD, "success": True})
    ),
    # ------------------------------------------------------------ wrong types, unknown fields
    "register-version-int": _register({**VALID, "version": 100}),
    "register-domains-string": _register({**VALID, "domains": "python"}),
    "register-description-list": _register({**VALID, "description": ["x"]}),
    "register-body-list": _register([VALID]),
    "register-unknown-field": _register({**VALID, "active": True}),
    "traffic-weights-list": Case(
        "PUT", f"{ADMIN}/{NAME}/traffic", 422, "request_validation", _json({"weights": [0.1]})
    ),
    "traffic-weight-string": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        422,
        "request_validation",
        _json({"weights": {"1.1.0": "lots"}}),
    ),
    "traffic-unknown-field": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        422,
        "request_validation",
        _json({"weights": {}, "sticky": True}),
    ),
    "hints-keywords-object": Case(
        "PUT", f"{ADMIN}/{NAME}/dispatch", 422, "request_validation", _json({"keywords": {}})
    ),
    "warmup-adapters-string": Case(
        "POST", "/admin/v1/warmup", 422, "request_validation", _json({"adapters": NAME})
    ),
    "warmup-unknown-field": Case(
        "POST",
        "/admin/v1/warmup",
        422,
        "request_validation",
        _json({"adapters": [NAME], "force": True}),
    ),
    "chat-model-int": _chat({"model": 7, **CHAT}),
    "chat-messages-string": _chat({"model": NAME, "messages": "hi"}),
    "completions-prompt-object": Case(
        "POST", "/v1/completions", 400, "invalid_request", _json({"model": NAME, "prompt": {}})
    ),
    "dispatch-objective-int": Case(
        "POST", "/v1/dispatch", 400, "invalid_request", _json({"objective": 1})
    ),
    "dispatch-unknown-field": Case(
        "POST", "/v1/dispatch", 400, "invalid_request", _json({"objective": "x", "k": 1})
    ),
    "feedback-success-string": Case(
        "POST", "/v1/feedback", 400, "invalid_request", _json({"request_id": "a", "success": "y"})
    ),
    "auto-hint-unknown-field": _chat({"model": "auto", **CHAT, "dispatch": {"files": []}}),
    # ------------------------------------------------------------ names and versions
    "register-cyrillic-name": Case(
        "POST", f"{ADMIN}/hostile-lor{CYRILLIC_A}/versions", 422, "invalid_name", _json(VALID)
    ),
    "register-dotdot-name": Case(
        "POST", f"{ADMIN}/%2E%2E/versions", 422, "invalid_name", _json(VALID)
    ),
    "register-dotdot-slash-name": Case(  # the decoded '/' matches no route
        "POST", f"{ADMIN}/..%2F..%2Fetc/versions", 404, "not_found", _json(VALID)
    ),
    "register-nul-name": Case(
        "POST", f"{ADMIN}/hostile%00/versions", 422, "invalid_name", _json(VALID)
    ),
    "register-long-name": Case(
        "POST", f"{ADMIN}/{'a' * 10_000}/versions", 422, "invalid_name", _json(VALID)
    ),
    "register-cyrillic-version": _register(
        {**VALID, "version": f"1.0.0-{CYRILLIC_A}"}, 422, "invalid_version"
    ),
    "register-fullwidth-version": _register(
        {**VALID, "version": "\uff11.0.0"}, 422, "invalid_version"
    ),
    "register-dotdot-version": _register({**VALID, "version": "../1.0.0"}, 422, "invalid_version"),
    "register-nul-version": _register({**VALID, "version": "1.0.0\x00"}),
    "register-long-version": _register({**VALID, "version": "1" * 10_000}),
    "register-nul-source": _register({**VALID, "source": "/tmp/\x00"}),
    "register-long-source": _register({**VALID, "source": "/" + "a" * 10_000}),
    "get-cyrillic-name": Case("GET", f"{ADMIN}/hostile-lor{CYRILLIC_A}", 404, "adapter_not_found"),
    "get-nul-name": Case("GET", f"{ADMIN}/hostile%00", 404, "adapter_not_found"),
    "get-long-name": Case("GET", f"{ADMIN}/{'a' * 10_000}", 404, "adapter_not_found"),
    "get-nul-version": Case("GET", f"{ADMIN}/{NAME}/versions/1.0.0%00", 404, "version_not_found"),
    "promote-long-version": Case(
        "POST", f"{ADMIN}/{NAME}/versions/{'1' * 10_000}/promote", 404, "version_not_found"
    ),
    "promote-dotdot-version": Case(
        "POST", f"{ADMIN}/{NAME}/versions/%2E%2E/promote", 404, "version_not_found"
    ),
    "delete-nul-name": Case("DELETE", f"{ADMIN}/a%00/versions/1.0.0", 404, "adapter_not_found"),
    "rollback-cyrillic-name": Case(
        "POST", f"{ADMIN}/hostile-lor{CYRILLIC_A}/rollback", 404, "adapter_not_found"
    ),
    "traffic-nul-name": Case(
        "PUT", f"{ADMIN}/a%00/traffic", 404, "adapter_not_found", _json({"weights": {}})
    ),
    "hints-long-name": Case(
        "PUT", f"{ADMIN}/{'a' * 10_000}/dispatch", 404, "adapter_not_found", _json({})
    ),
    "resolve-nul": Case("GET", "/admin/v1/resolve/a%00@1.0.0", 404, "adapter_not_found"),
    "chat-cyrillic-model": _chat(
        {"model": f"hostile-lor{CYRILLIC_A}", **CHAT}, 404, "model_not_found"
    ),
    "chat-nul-model": _chat({"model": f"{NAME}\x00@1.0.0", **CHAT}, 404, "model_not_found"),
    "chat-long-model": _chat({"model": "a" * 10_000, **CHAT}, 404, "model_not_found"),
    "feedback-nul-request-id": Case(
        "POST",
        "/v1/feedback",
        400,
        "invalid_request",
        _json({"request_id": "ab\x00cd", "success": True}),
    ),
    "feedback-cyrillic-request-id": Case(
        "POST",
        "/v1/feedback",
        400,
        "invalid_request",
        _json({"request_id": f"{CYRILLIC_A}bc", "success": True}),
    ),
    # ------------------------------------------------------------ strings and lists bounded
    "description-2001-chars": _register({**VALID, "description": "x" * 2_001}),
    "description-nul": _register({**VALID, "description": "a\x00b"}),
    "description-4-mib": _register({**VALID, "description": "x" * (4 * MIB)}),
    "domain-nul": _register({**VALID, "domains": ["py\x00"]}),
    "domain-empty": _register({**VALID, "domains": [""]}),
    "domain-long": _register({**VALID, "domains": ["d" * 65]}),
    "domains-10k": _register({**VALID, "domains": _items(10_000)}),
    "domains-1m": _register({**VALID, "domains": _items(1_000_000)}),
    "weights-10k": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        422,
        "request_validation",
        _json({"weights": {f"1.0.{i}": 0.0 for i in range(10_000)}}),
    ),
    "weights-300k": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        422,
        "request_validation",
        _json({"weights": {f"{i}": 0 for i in range(300_000)}}),
    ),
    "keywords-1m": Case(
        "PUT",
        f"{ADMIN}/{NAME}/dispatch",
        422,
        "request_validation",
        _json({"keywords": _items(1_000_000)}),
    ),
    "exemplars-100k": Case(
        "PUT",
        f"{ADMIN}/{NAME}/dispatch",
        422,
        "request_validation",
        _json({"exemplars": _items(100_000)}),
    ),
    "keyword-newline": Case(
        "PUT", f"{ADMIN}/{NAME}/dispatch", 422, "request_validation", _json({"keywords": ["a\nb"]})
    ),
    "warmup-adapters-1m": Case(
        "POST", "/admin/v1/warmup", 422, "request_validation", _json({"adapters": _items(10**6)})
    ),
    "warmup-adapters-empty": Case(
        "POST", "/admin/v1/warmup", 422, "request_validation", _json({"adapters": []})
    ),
    "warmup-adapter-long": Case(
        "POST", "/admin/v1/warmup", 422, "request_validation", _json({"adapters": ["a" * 10_000]})
    ),
    "dispatch-refs-1m": Case(
        "POST",
        "/v1/dispatch",
        400,
        "invalid_request",
        _json({"objective": "fix my test", "context_refs": _items(1_000_000)}),
    ),
    "dispatch-batch-100k": Case(
        "POST",
        "/v1/dispatch/batch",
        400,
        "invalid_request",
        _json({"tasks": [{"objective": "x"}] * 100_000}),
    ),
    "auto-hint-refs-1m": _chat(
        {"model": "auto", **CHAT, "dispatch": {"context_refs": _items(1_000_000)}}
    ),
    "dispatch-objective-too-long": Case(
        "POST", "/v1/dispatch", 400, "invalid_request", _json({"objective": "x" * 32_001})
    ),
    # ------------------------------------------------------------ the registry's own rules
    "traffic-over-one": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        422,
        "invalid_traffic",
        _json({"weights": {"1.1.0": 1.5}}),
    ),
    "traffic-active-not-remainder": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        422,
        "invalid_traffic",
        _json({"weights": {"1.1.0": 0.8, "1.0.0": 0.5}}),
    ),
    "traffic-negative": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        422,
        "invalid_traffic",
        _json({"weights": {"1.1.0": -0.1}}),
    ),
    "traffic-nan": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        422,
        "invalid_traffic",
        _raw(b'{"weights": {"1.1.0": NaN}}'),
    ),
    "traffic-unknown-version": Case(
        "PUT",
        f"{ADMIN}/{NAME}/traffic",
        404,
        "version_not_found",
        _json({"weights": {"9.9.9": 0.1}}),
    ),
    "promote-unknown-version": Case(
        "POST", f"{ADMIN}/{NAME}/versions/9.9.9/promote", 404, "version_not_found"
    ),
    "rollback-without-previous": Case(
        "POST", f"{ADMIN}/{NAME}/rollback", 409, "no_previous_version"
    ),
    "delete-active-version": Case(
        "DELETE", f"{ADMIN}/{NAME}/versions/1.0.0", 409, "version_is_active"
    ),
}


def _check_shape(case: Case, response: httpx.Response) -> None:
    assert response.status_code == case.status, response.text[:500]
    if case.openai:
        assert response.headers["content-type"].startswith("application/json")
        payload = response.json()
        assert set(payload) == {"error"}
        error = payload["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["message"]
        assert error["type"] == "invalid_request_error"
        if case.code is not None:
            assert error["code"] == case.code
    else:
        assert response.headers["content-type"] == PROBLEM_JSON
        problem = response.json()
        assert {"type", "title", "status", "detail", "code"} <= set(problem)
        assert problem["status"] == case.status
        assert problem["title"]
        assert problem["detail"]
        assert problem["type"]
        if case.code is not None:
            assert problem["code"] == case.code
    assert len(response.content) < 64 * 1024  # hostile input is not echoed back in bulk


async def _send(client: httpx.AsyncClient, case: Case) -> httpx.Response:
    headers = {"content-type": case.content_type}
    if case.body is None:
        return await client.request(case.method, case.path)
    data = case.body()
    if not case.chunked:
        return await client.request(case.method, case.path, content=data, headers=headers)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 64 * 1024):
            yield data[start : start + 64 * 1024]

    return await client.request(case.method, case.path, content=chunks(), headers=headers)


@pytest.mark.usefixtures("fleet")
@pytest.mark.parametrize("case_id", sorted(CASES))
async def test_hostile_input_is_a_clear_4xx_and_changes_nothing(
    client: httpx.AsyncClient, migrated_url: str, artifact_dir: Path, case_id: str
) -> None:
    case = CASES[case_id]
    before = _snapshot(migrated_url, artifact_dir)
    started = time.perf_counter()
    response = await _send(client, case)
    elapsed = time.perf_counter() - started
    _check_shape(case, response)
    assert elapsed < QUICK_S, f"{case_id} took {elapsed:.2f} s"
    assert _snapshot(migrated_url, artifact_dir) == before


NUL_CASES = sorted(case_id for case_id in CASES if "nul" in case_id or "cyrillic" in case_id)


@pytest.mark.usefixtures("fleet")
@pytest.mark.parametrize("database_url", [POSTGRES], indirect=True)
@pytest.mark.parametrize("case_id", NUL_CASES)
async def test_nul_and_look_alikes_on_postgresql(
    client: httpx.AsyncClient, migrated_url: str, artifact_dir: Path, case_id: str
) -> None:
    await test_hostile_input_is_a_clear_4xx_and_changes_nothing(
        client, migrated_url, artifact_dir, case_id
    )


async def test_the_limit_is_a_setting(
    settings: ControlPlaneSettings, migrated_url: str, artifact_dir: Path
) -> None:
    app = create_app(settings.model_copy(update={"max_body_bytes": 4096}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            big = {"objective": "x" * 5000}
            answer = await http.post("/v1/dispatch", json=big)
            assert answer.status_code == 413
            assert answer.json()["error"]["code"] == "body_too_large"
            answer = await http.post(
                f"{ADMIN}/a-lora/versions", json={**VALID, "source": "x" * 5000}
            )
            assert (answer.status_code, answer.json()["code"]) == (413, "body_too_large")
            assert answer.headers["content-type"] == PROBLEM_JSON
            # just under it: an ordinary answer
            small = await http.post("/v1/dispatch", json={"objective": "x" * 3000})
            assert small.status_code != 413
    assert ControlPlaneSettings().max_body_bytes == LIMIT


async def test_real_clients_fit_the_limits(
    client: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    """A long chat request (well under 8 MiB) reaches routing; the CLI's bodies register."""
    long_chat = {
        "model": "ghost-lora",
        "messages": [{"role": "user", "content": "x" * (6 * MIB)}],
        "max_tokens": 4,
    }
    answer = await client.post("/v1/chat/completions", json=long_chat)
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "model_not_found")
    body = {  # what hi_moe_lora.control_api.ControlPlaneClient.register sends
        "version": "1.0.0",
        "source": str(make_adapter("cli")),
        "domains": ["python", "testing"],
        "description": "d" * 2_000,
    }
    assert (await client.post(f"{ADMIN}/cli-lora/versions", json=body)).status_code == 201


@pytest.mark.parametrize("database_url", ["sqlite", POSTGRES], indirect=True)
async def test_nul_in_an_auto_task_is_not_stored(
    client: httpx.AsyncClient, migrated_url: str
) -> None:
    """Routing gaps keep the task's text; PostgreSQL refuses NUL, so it is dropped, not fatal."""
    tasks = {"tasks": [{"objective": "zzq\x00 qqz", "context_refs": ["a\x00.xyz"]}]}
    answer = await client.post("/v1/dispatch/batch", json=tasks)
    assert answer.status_code == 200, answer.text
    gaps = await client.get("/admin/v1/routing-gaps")
    for _ in range(50):
        if gaps.json()["total"]:
            break
        await asyncio.sleep(0.05)
        gaps = await client.get("/admin/v1/routing-gaps")
    assert [g["task_excerpt"] for g in gaps.json()["gaps"]] == ["zzq qqz"]
