"""The audit log on a real app (SQLite and PostgreSQL): one event per acknowledged change, with
the caller's token name and the state before and after; none for a refused change; listing
filters and paging."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.access.conftest import ADMIN, bearer

ADMIN_HEADERS = bearer(ADMIN)


async def _events(http: httpx.AsyncClient, **query: Any) -> list[dict[str, Any]]:
    answer = await http.get("/admin/v1/audit", params=query, headers=ADMIN_HEADERS)
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


async def test_each_change_is_recorded_with_its_actor(
    closed: httpx.AsyncClient, make_adapter: Callable[..., Path]
) -> None:
    ops = await closed.post(
        "/admin/v1/tokens", json={"name": "ops-bob", "scope": "admin"}, headers=ADMIN_HEADERS
    )
    bob = bearer(ops.json()["token"])
    base = "/admin/v1/adapters/aud-lora"
    for version, seed in (("1.0.0", 1), ("1.1.0", 2)):
        source = str(make_adapter(version, seed=seed))
        answer = await closed.post(
            f"{base}/versions", json={"version": version, "source": source}, headers=bob
        )
        assert answer.status_code == 201
    assert (
        await closed.put(f"{base}/traffic", json={"weights": {"1.1.0": 0.25}}, headers=bob)
    ).status_code == 200
    assert (await closed.post(f"{base}/versions/1.1.0/promote", headers=bob)).status_code == 200
    assert (await closed.post(f"{base}/rollback", headers=ADMIN_HEADERS)).status_code == 200
    hints = {"keywords": ["pytest"], "exemplars": ["write a test"]}
    assert (await closed.put(f"{base}/dispatch", json=hints, headers=bob)).status_code == 200
    assert (await closed.delete(f"{base}/versions/1.1.0", headers=bob)).status_code == 204

    events = await _events(closed)
    actions = [(e["actor"], e["action"], e["version"]) for e in reversed(events)]
    assert actions == [
        ("admin", "token.create", None),
        ("ops-bob", "version.register", "1.0.0"),
        ("ops-bob", "version.register", "1.1.0"),
        ("ops-bob", "adapter.traffic", None),
        ("ops-bob", "version.promote", "1.1.0"),
        ("admin", "adapter.rollback", "1.0.0"),
        ("ops-bob", "adapter.dispatch_hints", None),
        ("ops-bob", "version.delete", "1.1.0"),
    ]
    by_action = {e["action"]: e for e in events}
    assert by_action["token.create"]["after"] == {"name": "ops-bob", "scope": "admin"}
    assert by_action["adapter.traffic"]["before"] == {"weights": {}}
    assert by_action["adapter.traffic"]["after"] == {"weights": {"1.1.0": 0.25}}
    assert by_action["version.promote"]["before"] == {"active_version": "1.0.0"}
    assert by_action["version.promote"]["after"] == {
        "active_version": "1.1.0",
        "previous_version": "1.0.0",
    }
    assert by_action["adapter.rollback"]["after"] == {"active_version": "1.0.0"}
    assert by_action["adapter.dispatch_hints"]["after"] == {"keywords": ["pytest"], "exemplars": 1}
    assert by_action["version.delete"]["after"] is None
    assert all(e["adapter"] == "aud-lora" for e in events if e["action"] != "token.create")
    # filters and paging
    assert [e["action"] for e in await _events(closed, actor="admin")] == [
        "adapter.rollback",
        "token.create",
    ]
    assert len(await _events(closed, adapter="aud-lora")) == 7
    assert len(await _events(closed, action="version.register")) == 2
    page = await closed.get("/admin/v1/audit", params={"limit": 3}, headers=ADMIN_HEADERS)
    first = page.json()
    assert len(first["events"]) == 3
    older = await _events(closed, limit=1000, before_id=first["next_before_id"])
    assert [e["id"] for e in first["events"] + older] == [e["id"] for e in events]
    assert await _events(closed, since="2999-01-01T00:00:00Z") == []
    naive = await closed.get(
        "/admin/v1/audit", params={"since": "2026-01-01T00:00:00"}, headers=ADMIN_HEADERS
    )
    assert naive.status_code == 422
    assert (
        await closed.get("/admin/v1/audit", params={"limit": 1001}, headers=ADMIN_HEADERS)
    ).status_code == 422


async def test_refused_changes_leave_no_event(
    closed: httpx.AsyncClient, make_adapter: Callable[..., Path]
) -> None:
    base = "/admin/v1/adapters/no-lora"
    source = str(make_adapter("a"))
    assert (
        await closed.post(
            f"{base}/versions", json={"version": "1.0.0", "source": source}, headers=ADMIN_HEADERS
        )
    ).status_code == 201
    before = await _events(closed)
    refused = [
        await closed.post(
            f"{base}/versions", json={"version": "1.0.0", "source": source}, headers=ADMIN_HEADERS
        ),
        await closed.post(f"{base}/versions/9.9.9/promote", headers=ADMIN_HEADERS),
        await closed.post(f"{base}/rollback", headers=ADMIN_HEADERS),
        await closed.delete(f"{base}/versions/1.0.0", headers=ADMIN_HEADERS),
        await closed.put(
            f"{base}/traffic", json={"weights": {"7.0.0": 0.5}}, headers=ADMIN_HEADERS
        ),
        await closed.post(
            f"{base}/versions", json={"version": "2.0.0", "source": "/etc"}, headers=ADMIN_HEADERS
        ),
        await closed.post(
            "/admin/v1/tokens", json={"name": "admin", "scope": "admin"}, headers=ADMIN_HEADERS
        ),
        await closed.post(f"{base}/versions/1.0.0/promote"),  # no token
    ]
    assert all(400 <= r.status_code < 500 for r in refused), [r.status_code for r in refused]
    noop = await closed.post(f"{base}/versions/1.0.0/promote", headers=ADMIN_HEADERS)
    assert noop.status_code == 200  # already active: nothing changed, nothing recorded
    assert await _events(closed) == before


async def test_open_access_records_anonymous(
    open_client: httpx.AsyncClient, make_adapter: Callable[..., Path]
) -> None:
    answer = await open_client.post(
        "/admin/v1/adapters/anon-lora/versions",
        json={"version": "1.0.0", "source": str(make_adapter("x"))},
    )
    assert answer.status_code == 201
    events = (await open_client.get("/admin/v1/audit")).json()["events"]
    assert [(e["actor"], e["action"]) for e in events] == [("_anonymous", "version.register")]
