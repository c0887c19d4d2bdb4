"""The dispatcher's admin API: routing gaps (pages, windows, summaries; bad queries are 422s)
and its status."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest

from registry.db.engine import make_engine
from registry.db.session import Database
from registry.services.routing_gaps import GapRecord, RoutingGapLog
from tests.registry.conftest import AdapterFactory

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


@pytest.fixture
async def recorded(migrated_url: str) -> None:
    database = Database(make_engine(migrated_url))
    await RoutingGapLog(database).record(
        [
            GapRecord(
                objective=f"task {i}",
                reason="no confident match",
                terms=("terraform",) if i % 3 == 0 else ("sourdough",),
                nearest_domain="devops" if i % 3 == 0 else None,
                created_at=T0 + timedelta(minutes=i),
            )
            for i in range(6)
        ]
    )
    database.dispose()


@pytest.mark.usefixtures("recorded")
async def test_list_and_summary(client: httpx.AsyncClient) -> None:
    page = (await client.get("/admin/v1/routing-gaps", params={"limit": 2})).json()
    assert (page["total"], page["limit"], page["offset"]) == (6, 2, 0)
    assert [g["task_excerpt"] for g in page["gaps"]] == ["task 5", "task 4"]
    since = (T0 + timedelta(minutes=4)).isoformat()
    window = (await client.get("/admin/v1/routing-gaps", params={"since": since})).json()
    assert [g["task_excerpt"] for g in window["gaps"]] == ["task 5", "task 4"]
    summary = (await client.get("/admin/v1/routing-gaps/summary", params={"top": 1})).json()
    assert summary == {
        "gaps": 6,
        "terms": [{"value": "sourdough", "count": 4}],
        "nearest_domains": [{"value": "devops", "count": 2}],
    }


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"limit": 0}, "request_validation"),
        ({"limit": 501}, "request_validation"),
        ({"offset": -1}, "request_validation"),
        ({"since": "yesterday"}, "request_validation"),
        ({"since": "2026-11-01T00:00:00"}, "naive_time"),
        ({"since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"}, "empty_window"),
    ],
)
async def test_bad_queries_are_problems(
    client: httpx.AsyncClient, params: dict[str, object], code: str
) -> None:
    response = await client.get("/admin/v1/routing-gaps", params=params)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code


async def test_status_lists_the_dispatchable_fleet(
    client: httpx.AsyncClient, make_adapter: AdapterFactory
) -> None:
    for name, domains in (("py-lora", ["python"]), ("bare-lora", [])):
        answer = await client.post(
            f"/admin/v1/adapters/{name}/versions",
            json={"version": "1.0.0", "source": str(make_adapter(name)), "domains": domains},
        )
        assert answer.status_code == 201, answer.text
    status = (await client.get("/admin/v1/dispatcher")).json()
    assert isinstance(status["embeddings"], bool)
    assert status["embeddings_reason"]
    # an adapter without domains or exemplars cannot be dispatched to
    assert [s["name"] for s in status["specialists"]] == ["py-lora"]
    assert status["specialists"][0]["domains"] == ["python"]
