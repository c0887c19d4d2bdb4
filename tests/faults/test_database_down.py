"""The registry's PostgreSQL server stopped (``pg_ctl stop -m immediate``) under a running
control plane, and started again: what fails fast, what keeps serving, what is kept and written
once the database is back, all without a restart of the control plane."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hi_moe_lora.tinymodel import TinyFleet
from tests.faults.conftest import PostgresStack, demo_adapter
from tests.faults.postgres import PrivatePostgres
from tests.metrics.scrape import value
from tests.openai.live import register
from tests.operations.live import eventually, metrics_text

pytestmark = [pytest.mark.vllm, pytest.mark.postgres]

#: connection refused is immediate; the engine's connect timeout (5 s) bounds the rest
FAIL_FAST_S = 6.0


def complete(client: httpx.Client, model: str) -> httpx.Response:
    body = {"model": model, "prompt": "def add(a, b):", "max_tokens": 4, "temperature": 0}
    return client.post("/v1/completions", json=body)


def version_of(client: httpx.Client, name: str, version: str) -> dict[str, Any]:
    info = client.get(f"/admin/v1/adapters/{name}").json()
    found: dict[str, Any] = next(v for v in info["versions"] if v["version"] == version)
    return found


def timed(call: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


@pytest.fixture
def outage(private_postgres: PrivatePostgres) -> Iterator[PrivatePostgres]:
    """The test stops the server; it always runs again afterwards (the next tests need it)."""
    try:
        yield private_postgres
    finally:
        if not private_postgres.running():
            private_postgres.start()


def test_a_database_outage_fails_fast_serves_from_snapshots_and_recovers(
    faults_stack: PostgresStack, tiny_fleet: TinyFleet, outage: PrivatePostgres
) -> None:
    url = faults_stack.control_plane_url
    register(url, "db-known", "1.0.0", demo_adapter(tiny_fleet))
    register(url, "db-unseen", "1.0.0", demo_adapter(tiny_fleet, "math-lora"))
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/readyz").status_code == 200
        assert complete(client, "db-known").status_code == 200  # the snapshot and vLLM's slot
        assert client.post("/v1/dispatch/batch", json={"tasks": [{"objective": "x"}]}).is_success
        eventually(lambda: version_of(client, "db-known", "1.0.0"), lambda v: v["request_count"])
        before = version_of(client, "db-known", "1.0.0")["request_count"]
        # the gap of the task "x" above is written in the background: wait for it
        gaps_before = eventually(
            lambda: client.get("/admin/v1/routing-gaps").json()["total"], lambda n: n >= 1
        )

        outage.stop("immediate")
        time.sleep(1.5)  # past the version table's TTL: its snapshots have expired

        # requests that need the database: a quick 503 in each surface's error shape
        for call in (
            lambda: client.get("/admin/v1/adapters"),
            lambda: client.get("/admin/v1/adapters/db-known"),
            lambda: client.put("/admin/v1/adapters/db-known/dispatch", json={"keywords": ["x"]}),
            lambda: client.get("/admin/v1/routing-gaps"),
        ):
            answer, seconds = timed(call)
            assert answer.status_code == 503, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["code"] == "database_unavailable"
            assert seconds < FAIL_FAST_S
        ready, seconds = timed(lambda: client.get("/readyz"))
        assert ready.status_code == 503
        assert ready.json()["code"] == "database_unavailable"
        assert seconds < FAIL_FAST_S
        assert client.get("/healthz").status_code == 200
        unseen, seconds = timed(lambda: complete(client, "db-unseen"))
        assert unseen.status_code == 503
        assert unseen.json()["error"]["code"] == "database_unavailable"
        assert seconds < FAIL_FAST_S

        # the front door keeps serving what its snapshot holds (by name and by version)
        served_ids = []
        for model in ("db-known", "db-known@1.0.0", "db-known", "db-known"):
            answer = complete(client, model)
            assert answer.status_code == 200, answer.text
            served_ids.append(answer.headers["X-HiMoE-Request-Id"])
        # model="auto" still decides, with the fleet it read last (its 1 s refresh fails);
        # the fallbacks become routing gaps
        tasks = [{"objective": f"bake sourdough bread, attempt {i}"} for i in range(3)]
        assert client.post("/v1/dispatch/batch", json={"tasks": tasks}).is_success
        feedback = client.post("/v1/feedback", json={"request_id": served_ids[0], "success": False})
        assert feedback.status_code == 503
        assert feedback.json()["error"]["code"] == "database_unavailable"
        # acknowledged statistics wait in the bounded buffer, nothing dropped
        time.sleep(1.0)
        text = metrics_text(faults_stack)
        assert value(text, "hi_moe_lora_statistics_pending", writer="outcomes") >= 4
        assert value(text, "hi_moe_lora_statistics_pending", writer="routing_gaps") >= 3
        assert value(text, "hi_moe_lora_statistics_dropped_total", writer="outcomes") == 0

        outage.start()

        # everything comes back by itself: readiness, admin, buffered statistics and gaps
        assert eventually(lambda: client.get("/readyz").status_code, lambda s: s == 200) == 200
        assert client.get("/admin/v1/adapters").status_code == 200
        counted = eventually(
            lambda: version_of(client, "db-known", "1.0.0")["request_count"],
            lambda n: n >= before + 4,
        )
        assert counted == before + 4
        gaps = eventually(
            lambda: client.get("/admin/v1/routing-gaps").json()["total"],
            lambda n: n >= gaps_before + 3,
        )
        assert gaps == gaps_before + 3
        # the request records were written too: feedback for a request served in the outage
        answer = client.post("/v1/feedback", json={"request_id": served_ids[1], "success": True})
        assert answer.status_code == 200, answer.text
        assert answer.json()["recorded"] is True
        assert complete(client, "db-unseen").status_code == 200
        text = eventually(
            lambda: metrics_text(faults_stack),
            lambda t: value(t, "hi_moe_lora_statistics_pending", writer="outcomes") == 0,
        )
        assert value(text, "hi_moe_lora_statistics_pending", writer="outcomes") == 0
        assert value(text, "hi_moe_lora_statistics_dropped_total", writer="outcomes") == 0
    log = (faults_stack.log_dir / "control-plane.log").read_text(errors="replace")
    assert log.count("routing from the last known snapshots") == 1
