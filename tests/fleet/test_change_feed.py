"""registry/fleet/change_feed.py: two real control-plane instances on one PostgreSQL registry.

Each test builds two apps with ``create_app`` on one fresh, migrated schema (their lifespans
run: the feed listens on a real ``psycopg`` connection) and drives them over ASGI in one event
loop. Their caches are kept for a minute (the routing snapshots, the keyring and the
dispatcher's fleet), so a change seen on the other instance within ``FEED_TIMEOUT_S`` was carried
by the feed, not by expiry. How fast it travels is a benchmark's business
(``benchmarks/fleet/change_feed_delay.py``: two server processes, real HTTP), not a test's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool

from registry.app import create_app
from registry.components import ControlPlaneApp
from registry.db.engine import make_engine
from registry.db.migrate import upgrade_to_head
from registry.db.models import AdapterVersion
from registry.db.session import Database
from registry.errors import NotFoundError
from registry.fleet.change_feed import Change, ChangeFeed, channel_for, wants_change_feed
from registry.metrics.families import ControlPlaneMetrics
from registry.repositories.adapters import AdapterRepository
from registry.services.requests import FinishedRequest
from registry.settings import ControlPlaneSettings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

ADMIN = "hml_test-admin-secret-0123456789abcdefghijklmnop"
#: How long every cache of these instances is kept (routing snapshots, keyring, the dispatcher's
#: fleet): far past ``FEED_TIMEOUT_S``, so expiry never stands in for the change feed.
CACHE_S = 60.0
#: How long a test waits for a change to arrive on the other instance. Arrival within it proves
#: the feed carried the change; its delay (under 10 ms typically, 0.28 s once on a loaded 2-core
#: CI machine) is measured by ``benchmarks/fleet/change_feed_delay.py``.
FEED_TIMEOUT_S = 10.0
TASK = {"objective": "write a python function that parses dates"}


def _settings(url: str, tmp_path: Path, **update: Any) -> ControlPlaneSettings:
    return ControlPlaneSettings(
        database_url=url,
        artifact_dir=tmp_path / "artifacts",  # shared storage, as instances share a volume
        base_model=DEFAULT_BASE_MODEL,
        max_lora_rank=16,
        source_roots=[tmp_path / "sources"],
        dispatch_embeddings=False,
        health_checks=False,
        warmup=False,
        vllm_urls=["http://127.0.0.1:9"],
        dispatch_refresh_s=CACHE_S,
        routing_snapshot_ttl_s=CACHE_S,
        access_refresh_s=CACHE_S,
        **update,
    )


@pytest.fixture
def pg_url(postgres_url: str) -> str:
    upgrade_to_head(postgres_url)
    return postgres_url


@asynccontextmanager
async def _running(settings: ControlPlaneSettings) -> AsyncIterator[ControlPlaneApp]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


def _client(app: ControlPlaneApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://registry")


@pytest.fixture
async def pair(
    pg_url: str, tmp_path: Path
) -> AsyncIterator[tuple[ControlPlaneApp, ControlPlaneApp]]:
    """Instances A and B on one registry, both listening."""
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(_running(_settings(pg_url, tmp_path)))
        b = await stack.enter_async_context(_running(_settings(pg_url, tmp_path)))
        for app in (a, b):
            assert _feed(app).channel == channel_for(_schema(pg_url))
            assert await _feed(app).wait_connected(5.0)
            assert app.components.front_door.router.versions.ttl_s == CACHE_S
        yield a, b


def _feed(app: ControlPlaneApp) -> ChangeFeed:
    feed = app.components.change_feed
    assert feed is not None
    return feed


def _schema(url: str) -> str:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return str(connection.execute(text("SELECT current_schema()")).scalar_one())
    finally:
        engine.dispose()


async def _register(http: httpx.AsyncClient, tmp_path: Path, name: str, version: str) -> None:
    source = write_adapter(tmp_path / "sources" / f"{name}-{version}", seed=len(version))
    answer = await http.post(
        f"/admin/v1/adapters/{name}/versions",
        json={"version": version, "source": str(source), "domains": ["python"]},
    )
    assert answer.status_code == 201, answer.text


async def _python_lora(a: ControlPlaneApp, tmp_path: Path) -> None:
    """``py-lora`` 1.0.0 (active) and 1.1.0, registered through A, the dispatcher's python
    specialist."""
    async with _client(a) as http:
        await _register(http, tmp_path, "py-lora", "1.0.0")
        await _register(http, tmp_path, "py-lora", "1.1.0")
        hints = await http.put(
            "/admin/v1/adapters/py-lora/dispatch", json={"keywords": ["python"], "exemplars": []}
        )
        assert hints.status_code == 200, hints.text


async def _settled(b: ControlPlaneApp, changes: int) -> None:
    """Until B has applied ``changes`` notifications (they arrive after A's answers)."""

    async def applied() -> bool:
        return _count(b, "applied") >= changes

    await _until(applied)


async def _routed(http: httpx.AsyncClient) -> str:
    """The model B's front door routes a python task to (``POST /v1/dispatch``)."""
    answer = await http.post("/v1/dispatch", json=TASK)
    assert answer.status_code == 200, answer.text
    model: str = answer.json()["model"]
    return model


async def _until(
    probe: Callable[[], Awaitable[bool]],
    *,
    timeout_s: float = FEED_TIMEOUT_S,
    step_s: float = 0.002,
) -> float:
    """Seconds until ``probe()`` holds (polled); fails past ``timeout_s``."""
    started = time.perf_counter()
    while not await probe():
        if time.perf_counter() - started > timeout_s:
            pytest.fail(f"not seen within {timeout_s} s")
        await asyncio.sleep(step_s)
    return time.perf_counter() - started


def _notify(pg_url: str, feed: ChangeFeed, payload: str) -> None:
    """``payload`` on ``feed``'s channel, sent from a connection of no instance."""
    engine = create_engine(pg_url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("SELECT pg_notify(:channel, :payload)"),
                {"channel": feed.channel, "payload": payload},
            )
    finally:
        engine.dispose()


async def _stopped_within(feed: ChangeFeed, timeout_s: float) -> bool:
    """Whether ``feed.stop()`` finished within ``timeout_s`` (never waits on a stuck stop)."""
    stopping = asyncio.get_running_loop().create_task(feed.stop())
    done, _ = await asyncio.wait({stopping}, timeout=timeout_s)
    return bool(done)


def _count(app: ControlPlaneApp, outcome: str) -> float:
    value = app.components.metrics.registry.get_sample_value(
        "hi_moe_lora_change_feed_notifications_total", {"outcome": outcome}
    )
    return value or 0.0


@pytest.mark.postgres
async def test_a_promote_through_a_is_routed_by_b_by_the_feed(
    pair: tuple[ControlPlaneApp, ControlPlaneApp], tmp_path: Path
) -> None:
    a, b = pair
    await _python_lora(a, tmp_path)
    async with _client(a) as http_a, _client(b) as http_b:
        assert await _routed(http_b) == "py-lora@1.0.0"  # B holds a snapshot now
        promoted = await http_a.post("/admin/v1/adapters/py-lora/versions/1.1.0/promote")
        assert promoted.status_code == 200, promoted.text

        async def moved() -> bool:
            return await _routed(http_b) == "py-lora@1.1.0"

        await _until(moved)
    # A announced and ignored its own changes; B applied them and announced none
    assert _count(a, "own") >= 4
    assert _count(a, "applied") == 0
    assert _count(b, "applied") >= 4
    assert _count(b, "own") == 0
    scrape = (await _client(b).get("/metrics")).text
    assert "hi_moe_lora_change_feed_connected 1.0" in scrape


@pytest.mark.postgres
async def test_rollback_traffic_and_delete_are_seen_by_b_at_once(
    pair: tuple[ControlPlaneApp, ControlPlaneApp], tmp_path: Path
) -> None:
    a, b = pair
    await _python_lora(a, tmp_path)
    table = b.components.front_door.router.versions
    async with _client(a) as http_a, _client(b) as http_b:
        assert (await http_a.post("/admin/v1/adapters/py-lora/versions/1.1.0/promote")).is_success
        assert await _routed(http_b) == "py-lora@1.1.0"

        rolled = await http_a.post("/admin/v1/adapters/py-lora/rollback")
        assert rolled.status_code == 200, rolled.text

        async def rolled_back() -> bool:
            return await _routed(http_b) == "py-lora@1.0.0"

        await _until(rolled_back)

        split = await http_a.put(
            "/admin/v1/adapters/py-lora/traffic", json={"weights": {"1.1.0": 1}}
        )
        assert split.status_code == 200, split.text

        async def candidate_takes_all() -> bool:
            return await _routed(http_b) == "py-lora@1.1.0"

        await _until(candidate_takes_all)

        assert (await table.choose("py-lora@1.0.0")).version == "1.0.0"  # snapshot held
        assert (
            await http_a.put("/admin/v1/adapters/py-lora/traffic", json={"weights": {}})
        ).is_success
        assert (await http_a.post("/admin/v1/adapters/py-lora/versions/1.1.0/promote")).is_success
        assert (await table.choose("py-lora@1.0.0")).version == "1.0.0"
        deleted = await http_a.delete("/admin/v1/adapters/py-lora/versions/1.0.0")
        assert deleted.status_code == 204, deleted.text

        async def gone() -> bool:
            try:
                await table.choose("py-lora@1.0.0")
            except NotFoundError:
                return True
            return False

        await _until(gone)


@pytest.mark.postgres
async def test_dispatch_hints_through_a_change_b_dispatcher(
    pair: tuple[ControlPlaneApp, ControlPlaneApp], tmp_path: Path
) -> None:
    a, b = pair
    await _python_lora(a, tmp_path)
    async with _client(a) as http_a, _client(b) as http_b:
        unrelated = {"objective": "draft a sonnet about autumn leaves"}
        before = (await http_b.post("/v1/dispatch", json=unrelated)).json()
        assert before["specialist"] is None  # B's dispatcher holds its fleet now
        hints = await http_a.put(
            "/admin/v1/adapters/py-lora/dispatch", json={"keywords": ["sonnet"], "exemplars": []}
        )
        assert hints.status_code == 200

        async def dispatched() -> bool:
            answer = (await http_b.post("/v1/dispatch", json=unrelated)).json()
            return bool(answer["specialist"] == "py-lora")

        await _until(dispatched)


@pytest.mark.postgres
async def test_tokens_made_or_revoked_through_a_apply_on_b_at_once(
    pg_url: str, tmp_path: Path
) -> None:
    closed = {"admin_token": SecretStr(ADMIN)}
    async with (
        _running(_settings(pg_url, tmp_path, **closed)) as a,
        _running(_settings(pg_url, tmp_path, **closed)) as b,
        _client(a) as http_a,
        _client(b) as http_b,
    ):
        assert await _feed(b).wait_connected(5.0)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        made = await http_a.post(
            "/admin/v1/tokens", json={"name": "ops", "scope": "admin"}, headers=admin
        )
        assert made.status_code == 201, made.text
        ops = {"Authorization": f"Bearer {made.json()['token']}"}

        async def accepted() -> bool:
            return (await http_b.get("/admin/v1/adapters", headers=ops)).status_code == 200

        await _until(accepted)
        revoked = await http_a.delete("/admin/v1/tokens/ops", headers=admin)
        assert revoked.status_code == 200, revoked.text

        async def refused() -> bool:
            return (await http_b.get("/admin/v1/adapters", headers=ops)).status_code == 401

        await _until(refused)


@pytest.mark.postgres
async def test_the_listener_reconnects_and_forgets_every_snapshot(
    pair: tuple[ControlPlaneApp, ControlPlaneApp],
    tmp_path: Path,
    pg_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = pair
    await _python_lora(a, tmp_path)
    feed = _feed(b)
    resyncs = feed.resyncs
    backend = feed.backend_pid
    assert backend is not None
    async with _client(a) as http_a, _client(b) as http_b:
        assert await _routed(http_b) == "py-lora@1.0.0"
        primed = time.perf_counter()
        engine = create_engine(pg_url, poolclass=NullPool)
        try:
            with engine.begin() as connection:
                killed = connection.execute(
                    text("SELECT pg_terminate_backend(:pid)"), {"pid": backend}
                ).scalar_one()
            assert killed
        finally:
            engine.dispose()

        async def lost() -> bool:
            return not feed.connected

        await _until(lost)
        # committed while B does not listen: its notification never reaches B
        assert (await http_a.post("/admin/v1/adapters/py-lora/versions/1.1.0/promote")).is_success
        assert await feed.wait_connected(5.0)
        assert feed.resyncs == resyncs + 1
        assert feed.backend_pid not in (None, backend)
        assert await _routed(http_b) == "py-lora@1.1.0"
        # ... long before the snapshot would have expired: the reconnection dropped it
        assert time.perf_counter() - primed < CACHE_S
        # and the new connection carries changes again
        assert (await http_a.post("/admin/v1/adapters/py-lora/rollback")).is_success

        async def rolled_back() -> bool:
            return await _routed(http_b) == "py-lora@1.0.0"

        await _until(rolled_back)
    outage = [r.getMessage() for r in caplog.records if r.name == "registry.fleet.change_feed"]
    assert sum("change feed lost" in m for m in outage) == 1, outage  # once per outage
    assert sum("listening again" in m for m in outage) == 1, outage


@pytest.mark.postgres
async def test_an_idle_listener_pings_and_keeps_listening(pg_url: str) -> None:
    database = Database(make_engine(pg_url))
    feed = ChangeFeed(database, pg_url, ControlPlaneMetrics(), connect_timeout_s=2.0, ping_s=0.02)
    heard: list[str] = []
    feed.add_adapter_listener(heard.append)
    try:
        await feed.start()
        assert await feed.wait_connected(5.0)
        backend = feed.backend_pid
        await asyncio.sleep(0.2)  # several pings
        assert feed.connected
        assert feed.backend_pid == backend
        assert feed.resyncs == 1
        other = Change("adapter.traffic", "x-lora", None, "another-instance")
        _notify(pg_url, feed, other.payload())

        async def heard_it() -> bool:
            return heard == ["x-lora"]

        await _until(heard_it)
    finally:
        await feed.stop()
        database.dispose()
    assert not feed.connected


@pytest.mark.postgres
async def test_a_feed_pinging_flat_out_stops_at_once(pg_url: str) -> None:
    """Stopped at any point of its ping cycle, the feed stops. (Through ``asyncio.wait_for``,
    Python 3.11 lost a cancellation that came as the ping answered, and ``stop()`` waited on a
    feed that went on pinging: CI hung here.)"""
    database = Database(make_engine(pg_url))
    try:
        for attempt in range(40):
            feed = ChangeFeed(
                database, pg_url, ControlPlaneMetrics(), connect_timeout_s=2.0, ping_s=0.0
            )
            await feed.start()
            assert await feed.wait_connected(5.0)
            await asyncio.sleep(0.0005 * (attempt % 8))
            assert await _stopped_within(feed, 5.0), f"stop() still waiting (attempt {attempt})"
            assert not feed.connected
    finally:
        database.dispose()


@pytest.mark.postgres
async def test_stopping_while_a_listener_runs_closes_the_connection(pg_url: str) -> None:
    """Stopped while a notification is being applied (the notifications generator suspended,
    holding the connection's lock), the feed stops at once and its connection closes: nothing
    is left listening on the server."""
    database = Database(make_engine(pg_url))
    feed = ChangeFeed(database, pg_url, ControlPlaneMetrics(), connect_timeout_s=2.0)
    entered, never = asyncio.Event(), asyncio.Event()

    async def slow_listener(_name: str) -> None:
        entered.set()
        await never.wait()

    try:
        await feed.start()
        assert await feed.wait_connected(5.0)
        backend = feed.backend_pid
        feed.add_adapter_listener(slow_listener)
        other = Change("adapter.traffic", "x-lora", None, "another-instance")
        _notify(pg_url, feed, other.payload())
        engine = create_engine(pg_url, poolclass=NullPool)
        try:
            await asyncio.wait_for(entered.wait(), 5.0)
            assert await _stopped_within(feed, 5.0), "stop() still waiting"
            assert not feed.connected

            async def closed() -> bool:  # the server notices the closed socket a moment later
                with engine.connect() as connection:
                    query = text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid")
                    return connection.execute(query, {"pid": backend}).scalar_one() == 0

            await _until(closed)  # fails if the listening connection was left open
        finally:
            engine.dispose()
    finally:
        await feed.stop()
        database.dispose()


@pytest.mark.postgres
async def test_own_and_malformed_notifications_change_nothing(
    pair: tuple[ControlPlaneApp, ControlPlaneApp], tmp_path: Path, pg_url: str
) -> None:
    a, b = pair
    await _python_lora(a, tmp_path)
    await _settled(b, 3)
    feed = _feed(b)
    forgotten: list[str] = []
    feed.add_adapter_listener(forgotten.append)
    own = Change("version.promote", "py-lora", "py-lora@1.1.0", feed.instance)
    assert await feed.receive(own.payload()) is None
    assert await feed.receive('{"kind": "version.promote"}') is None
    assert await feed.receive("not json") is None
    assert forgotten == []
    assert _count(b, "own") == 1
    assert _count(b, "malformed") == 2
    # sent by someone else on the channel: ignored, and the listener goes on
    _notify(pg_url, feed, "garbage")

    async def counted() -> bool:
        return _count(b, "malformed") == 3

    await _until(counted)
    assert feed.connected
    async with _client(a) as http_a:
        assert (await http_a.post("/admin/v1/adapters/py-lora/versions/1.1.0/promote")).is_success

    async def applied() -> bool:
        return bool(forgotten)

    await _until(applied)
    await asyncio.sleep(0.1)
    assert forgotten == ["py-lora"]


@pytest.mark.postgres
async def test_a_change_rolled_back_is_not_announced(
    pair: tuple[ControlPlaneApp, ControlPlaneApp], tmp_path: Path
) -> None:
    a, b = pair
    await _python_lora(a, tmp_path)
    await _settled(b, 3)
    forgotten: list[str] = []
    _feed(b).add_adapter_listener(forgotten.append)
    async with _client(a) as http_a:
        refused = await http_a.delete("/admin/v1/adapters/py-lora/versions/1.0.0")  # active
        assert refused.status_code == 409
        await http_a.post("/admin/v1/adapters/py-lora/versions/9.9.9/promote")
        assert (await http_a.post("/admin/v1/adapters/py-lora/rollback")).status_code == 409
    await asyncio.sleep(0.2)
    assert forgotten == []


async def test_sqlite_has_no_feed_and_works_beside_a_postgres_one(
    sqlite_url: str, tmp_path: Path
) -> None:
    assert not wants_change_feed(sqlite_url, True)
    assert not wants_change_feed("postgresql://postgres@127.0.0.1/x", False)
    assert wants_change_feed("postgresql://postgres@127.0.0.1/x", True)
    upgrade_to_head(sqlite_url)
    async with _running(_settings(sqlite_url, tmp_path)) as app:
        assert app.components.change_feed is None
        await _python_lora(app, tmp_path)
        async with _client(app) as http:
            assert await _routed(http) == "py-lora@1.0.0"
            assert (await http.post("/admin/v1/adapters/py-lora/versions/1.1.0/promote")).is_success
            assert await _routed(http) == "py-lora@1.1.0"  # its own listeners, as before
            scrape = (await http.get("/metrics")).text
            assert "hi_moe_lora_change_feed_connected 0.0" in scrape


@pytest.mark.postgres
async def test_sqlite_changes_are_not_announced_while_a_feed_runs(
    pair: tuple[ControlPlaneApp, ControlPlaneApp], sqlite_url: str, tmp_path: Path
) -> None:
    """The announcing hook sees every audit insert of the process: only its own registry's
    may NOTIFY (SQLite has no pg_notify: the change would fail)."""
    _, b = pair
    forgotten: list[str] = []
    _feed(b).add_adapter_listener(forgotten.append)
    upgrade_to_head(sqlite_url)
    async with _running(_settings(sqlite_url, tmp_path / "sqlite")) as app, _client(app) as http:
        await _register(http, tmp_path / "sqlite", "lite-lora", "1.0.0")
    await asyncio.sleep(0.1)
    assert forgotten == []


# ---------------------------------------------------------------------- statistics


@pytest.mark.postgres
async def test_outcomes_recorded_through_both_instances_add_up(
    pair: tuple[ControlPlaneApp, ControlPlaneApp], tmp_path: Path
) -> None:
    a, b = pair
    await _python_lora(a, tmp_path)
    rounds, per_batch = 20, 5

    def batch(instance: str, round_: int, order: list[str]) -> list[FinishedRequest]:
        return [
            FinishedRequest(
                f"{instance}-{round_}-{served}-{i}", served, True, 10.0 + i, ok=i % 5 != 0
            )
            for served in order
            for i in range(per_batch)
        ]

    one, other = "py-lora@1.0.0", "py-lora@1.1.0"
    # A folds (1.0.0, 1.1.0) and B (1.1.0, 1.0.0) in one transaction each, concurrently
    await asyncio.gather(
        *(a.components.requests.record(batch("a", r, [one, other])) for r in range(rounds)),
        *(b.components.requests.record(batch("b", r, [other, one])) for r in range(rounds)),
    )

    def versions(uow: Any) -> dict[str, tuple[int, int]]:
        rows = uow.session.scalars(select(AdapterVersion)).all()
        return {row.version: (row.request_count, row.success_count) for row in rows}

    counts = a.components.database.run(versions, write=False)
    expected = (2 * rounds * per_batch, 2 * rounds * (per_batch - 1))
    assert counts == {"1.0.0": expected, "1.1.0": expected}


@pytest.mark.postgres
async def test_last_used_at_never_goes_back(
    pair: tuple[ControlPlaneApp, ControlPlaneApp], tmp_path: Path
) -> None:
    """Two instances' batches commit in any order: the later use is the one kept."""
    a, _ = pair
    await _python_lora(a, tmp_path)
    later = datetime.now(timezone.utc)
    earlier = later - timedelta(seconds=3)

    def fold(at: datetime) -> Any:
        def work(uow: Any) -> Any:
            repo = AdapterRepository(uow.session)
            row = uow.session.scalars(
                select(AdapterVersion).where(AdapterVersion.version == "1.0.0")
            ).one()
            repo.record_outcomes(row.id, latencies_ms=[5.0], oks=[True], at=at)
            uow.session.flush()
            uow.session.refresh(row)
            return row.last_used_at

        return a.components.database.run(work)

    assert fold(later) == later
    assert fold(earlier) == later
