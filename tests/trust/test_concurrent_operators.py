"""64 concurrent operators against one control plane, on SQLite and on PostgreSQL.

A real control plane (``create_app``, uvicorn, real HTTP) on a real database; 64 asyncio tasks
issue interleaved register / promote / rollback / delete / traffic / read calls on the same three
adapters for a few seconds. Conflicts (4xx) are expected; afterwards:

- no answer was a 5xx and no call failed at the transport level;
- every adapter has exactly one active version (an adapter is created with its active first
  version and the active version cannot be deleted);
- the rollback chain is consistent: every ``previous_version`` names another version of the same
  adapter that was registered in this run, and that version either still exists or its deletion
  was acknowledged (204): a rollback onto it then answers 409 ``rollback_target_missing``;
- every acknowledged registration (201) not deleted since is there, with the ``lora_int_id``
  and sha256 it was acknowledged with, and no acknowledged deletion (204) is; the active version
  of each adapter is one that an acknowledged call made active (first registration, promote,
  rollback); candidates' traffic weights sum to at most 1;
- ``lora_int_id``\\ s are unique across every acknowledged registration, never reused after
  deletes, and after a restart of the control plane on the same database a new registration
  gets an id larger than every id seen in the run;
- the audit log holds every acknowledged change exactly once (a promote of the version already
  active changes nothing and is not logged) and nothing that was not acknowledged.

Version strings are never registered twice in a run, so "deleted" is unambiguous.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from hi_moe_lora.app.processes import free_port
from registry.access.scopes import ANONYMOUS
from registry.app import create_app
from registry.db.migrate import upgrade_to_head
from registry.db.models import Adapter, AdapterVersion, AuditEvent
from registry.settings import ControlPlaneSettings
from tests.conftest import VllmServer
from tests.openai.live import ServedApp, register
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

OPERATORS = 64
STORM_S = 4.0
ADAPTERS = ("alpha", "beta", "gamma")
OPERATIONS = ("register", "promote", "promote", "rollback", "delete", "traffic", "read")


@dataclass
class Ledger:
    """What the operators were told: every acknowledged change and every answer's status."""

    statuses: Counter[int] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    #: (name, version) -> (lora_int_id, sha256) of acknowledged registrations
    registered: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    deleted: set[tuple[str, str]] = field(default_factory=set)
    #: versions an acknowledged call made active (first registration, promote, rollback)
    activated: set[tuple[str, str]] = field(default_factory=set)
    #: every version string a registration was attempted with, per adapter
    attempted: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: acknowledged changes as the audit log must show them: (action, adapter, version)
    changes: Counter[tuple[str, str, str | None]] = field(default_factory=Counter)

    def answer(self, operation: str, response: httpx.Response) -> None:
        self.statuses[response.status_code] += 1
        if response.status_code >= 500:
            self.failures.append(f"{operation}: HTTP {response.status_code} {response.text}")
        elif response.status_code >= 400:
            self.codes[response.json().get("code", "?")] += 1


def settings_for(database_url: str, workdir: Path) -> ControlPlaneSettings:
    return ControlPlaneSettings(
        database_url=database_url,
        artifact_dir=workdir / "artifacts",
        base_model=DEFAULT_BASE_MODEL,
        # no vLLM: promote/rollback's bare-name unloads meet a closed port and give up at once
        vllm_urls=[f"http://127.0.0.1:{free_port()}"],
        source_roots=[workdir / "sources"],
        dispatch_embeddings=False,
        health_checks=False,
        warmup=False,
    )


@pytest.fixture
def sources(tmp_path: Path) -> list[Path]:
    """Four small valid adapters (distinct weights), registered under many versions."""
    return [write_adapter(tmp_path / "sources" / f"adapter-{seed}", seed=seed) for seed in range(4)]


@pytest.fixture
def served(database_url: str, tmp_path: Path, sources: list[Path]) -> Iterator[ServedApp]:
    upgrade_to_head(database_url)
    app = ServedApp(create_app(settings_for(database_url, tmp_path))).start()
    try:
        yield app
    finally:
        app.stop()


async def operator(
    client: httpx.AsyncClient,
    rng: random.Random,
    sources: list[Path],
    versions: Iterator[int],
    ledger: Ledger,
    deadline: float,
) -> None:
    while time.monotonic() < deadline:
        name = rng.choice(ADAPTERS)
        known = ledger.attempted[name]
        operation = rng.choice(OPERATIONS) if known else "register"
        try:
            await one_call(client, rng, sources, versions, ledger, name, known, operation)
        except httpx.HTTPError as exc:
            ledger.failures.append(f"{operation} {name}: {type(exc).__name__}: {exc}")


async def one_call(
    client: httpx.AsyncClient,
    rng: random.Random,
    sources: list[Path],
    versions: Iterator[int],
    ledger: Ledger,
    name: str,
    known: list[str],
    operation: str,
) -> None:
    base = f"/admin/v1/adapters/{name}"
    if operation == "register":
        version = f"1.{next(versions)}.0"
        known.append(version)
        body = {"version": version, "source": str(rng.choice(sources))}
        response = await client.post(f"{base}/versions", json=body)
        ledger.answer(operation, response)
        if response.status_code == 201:
            info = response.json()
            ledger.registered[name, version] = (info["lora_int_id"], info["sha256"])
            ledger.changes["version.register", name, version] += 1
            if info["is_active"]:
                ledger.activated.add((name, version))
        return
    version = rng.choice(known)
    if operation == "promote":
        response = await client.post(f"{base}/versions/{version}/promote")
        ledger.answer(operation, response)
        if response.status_code == 200:
            ledger.activated.add((name, response.json()["version"]))
            ledger.changes["version.promote", name, version] += 1  # at most: no-ops unrecorded
    elif operation == "rollback":
        response = await client.post(f"{base}/rollback")
        ledger.answer(operation, response)
        if response.status_code == 200:
            ledger.activated.add((name, response.json()["version"]))
            ledger.changes["adapter.rollback", name, response.json()["version"]] += 1
    elif operation == "delete":
        response = await client.delete(f"{base}/versions/{version}")
        ledger.answer(operation, response)
        if response.status_code == 204:
            ledger.deleted.add((name, version))
            ledger.changes["version.delete", name, version] += 1
    elif operation == "traffic":
        weights = {version: rng.choice([0.0, 0.1, 0.25])}
        response = await client.put(f"{base}/traffic", json={"weights": weights})
        ledger.answer(operation, response)
        if response.status_code == 200:
            ledger.changes["adapter.traffic", name, None] += 1
    else:
        response = await client.get(rng.choice(["/admin/v1/adapters", base]))
        ledger.answer(operation, response)


async def storm(url: str, sources: list[Path], ledger: Ledger, seconds: float) -> None:
    versions = itertools.count()
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=OPERATORS, max_keepalive_connections=OPERATORS)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await asyncio.gather(
            *(
                operator(client, random.Random(seed), sources, versions, ledger, deadline)
                for seed in range(OPERATORS)
            )
        )


def rows(database_url: str) -> list[tuple[str, AdapterVersion]]:
    engine = create_engine(database_url)
    try:
        with Session(engine) as session:
            statement = select(Adapter.name, AdapterVersion).join(
                Adapter, Adapter.id == AdapterVersion.adapter_id
            )
            return [(name, version) for name, version in session.execute(statement)]
    finally:
        engine.dispose()


def check_invariants(ledger: Ledger, database_url: str) -> None:
    found = rows(database_url)
    by_key = {(name, row.version): row for name, row in found}
    for name in ADAPTERS:
        active = [row.version for n, row in found if n == name and row.is_active]
        assert len(active) == 1, f"{name}: active versions {active}"
        assert (name, active[0]) in ledger.activated, f"{name}@{active[0]} active unasked"
        candidates = sum(row.traffic_weight for n, row in found if n == name and not row.is_active)
        assert candidates <= 1.0 + 1e-9, f"{name}: candidates' weights sum to {candidates}"
    for name, row in found:
        previous = row.previous_version
        if previous is None:
            continue
        assert previous != row.version, f"{name}@{row.version} is its own previous version"
        assert previous in ledger.attempted[name], f"{name}@{row.version} -> unknown {previous}"
        assert (name, previous) in by_key or (name, previous) in ledger.deleted, (
            f"{name}@{row.version}'s previous version {previous} vanished unacknowledged"
        )
    for key, (lora_int_id, sha256) in ledger.registered.items():
        if key in ledger.deleted:
            assert key not in by_key, f"{key} was deleted (204) but is still there"
            continue
        assert key in by_key, f"{key} was registered (201) but is gone"
        assert (by_key[key].lora_int_id, by_key[key].sha256) == (lora_int_id, sha256)
    assert ledger.deleted <= set(ledger.registered)
    assert set(by_key) <= set(ledger.registered), "rows nobody was told about"
    ids = [lora_int_id for lora_int_id, _ in ledger.registered.values()]
    assert len(ids) == len(set(ids)), "a lora_int_id was handed out twice"
    check_audit_log(ledger, database_url)


def check_audit_log(ledger: Ledger, database_url: str) -> None:
    """Every acknowledged change is in the audit log once, as the anonymous caller (access is
    open here), and nothing else is: a promote of the version already active records nothing,
    so promotes are bounded above by the acknowledged ones."""
    engine = create_engine(database_url)
    try:
        with Session(engine) as session:
            events = list(session.scalars(select(AuditEvent)))
    finally:
        engine.dispose()
    assert {event.actor for event in events} <= {ANONYMOUS}
    logged = Counter((event.action, event.adapter, event.version) for event in events)
    for change, count in ledger.changes.items():
        if change[0] == "version.promote":
            assert logged[change] <= count, f"{change}: {logged[change]} events, {count} promotes"
        else:
            assert logged[change] == count, f"{change}: {logged[change]} events, {count} answers"
    unexplained = set(logged) - set(ledger.changes)
    assert not unexplained, f"audit events nobody was told about: {sorted(unexplained)[:5]}"


def test_64_operators_leave_a_consistent_registry(
    served: ServedApp, database_url: str, tmp_path: Path, sources: list[Path]
) -> None:
    ledger = Ledger()
    asyncio.run(storm(served.url, sources, ledger, STORM_S))

    assert not ledger.failures, "\n".join(ledger.failures[:20])
    assert ledger.registered, ledger.statuses
    assert ledger.deleted, ledger.statuses
    assert ledger.activated, ledger.statuses
    assert sum(ledger.statuses.values()) >= OPERATORS, ledger.statuses
    check_invariants(ledger, database_url)

    # a restart on the same database: the counter goes on from where it was, never back
    served.stop()
    restarted = ServedApp(create_app(settings_for(database_url, tmp_path))).start()
    try:
        response = httpx.post(
            f"{restarted.url}/admin/v1/adapters/after-restart/versions",
            json={"version": "1.0.0", "source": str(sources[0])},
            timeout=60,
        )
    finally:
        restarted.stop()
    assert response.status_code == 201, response.text
    seen = [lora_int_id for lora_int_id, _ in ledger.registered.values()]
    assert response.json()["lora_int_id"] > max(seen)


# ------------------------------------------------------------------ with inference traffic


@dataclass(frozen=True)
class Served:
    """One inference request as its client saw it."""

    model: str
    started: float
    status: int
    version: str | None
    tokens: tuple[int, ...]


def greedy(client: httpx.Client, model: str) -> Served:
    started = time.monotonic()
    response = client.post(
        "/v1/completions",
        json={
            "model": model,
            "prompt": "def fibonacci(n):",
            "max_tokens": 8,
            "temperature": 0,
            "ignore_eos": True,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
        },
    )
    tokens: tuple[int, ...] = ()
    if response.status_code == 200:
        logprobs = response.json()["choices"][0]["logprobs"]
        tokens = tuple(int(t.removeprefix("token_id:")) for t in logprobs["tokens"])
    return Served(
        model,
        started,
        response.status_code,
        response.headers.get("X-HiMoE-Adapter-Version"),
        tokens,
    )


@pytest.mark.vllm
def test_no_request_is_served_by_a_deleted_version(
    vllm_server: VllmServer, churn_adapters: list[Path], fresh_name: Callable[[str], str]
) -> None:
    url = vllm_server.control_plane_url
    name, reference = fresh_name("gone"), fresh_name("gone-ref")
    for index, version in enumerate(("1.0.0", "1.1.0", "1.2.0")):
        register(url, name, version, churn_adapters[index])
    register(url, reference, "1.0.0", churn_adapters[3])
    admin = httpx.Client(base_url=f"{url}/admin/v1", timeout=60)
    client = httpx.Client(base_url=url, timeout=120)
    with admin, client:
        solo = {v: greedy(client, f"{name}@{v}").tokens for v in ("1.0.0", "1.1.0", "1.2.0")}
        replacement = greedy(client, f"{reference}@1.0.0").tokens
        assert len(set(solo.values()) | {replacement}) == 4, "the adapters answer alike"
        traffic = {"weights": {"1.1.0": 0.3, "1.2.0": 0.3}}
        assert admin.put(f"/adapters/{name}/traffic", json=traffic).status_code == 200

        stop = threading.Event()
        seen: list[Served] = []
        models = [name, name, f"{name}@1.1.0", f"{name}@1.2.0"]

        def traffic_loop(model: str) -> None:
            with httpx.Client(base_url=url, timeout=120) as own:
                while not stop.is_set():
                    seen.append(greedy(own, model))

        deleted: dict[str, float] = {}
        with ThreadPoolExecutor(max_workers=len(models)) as pool:
            loops = [pool.submit(traffic_loop, model) for model in models]
            try:
                for version in ("1.1.0", "1.2.0"):
                    time.sleep(1.5)
                    response = admin.delete(f"/adapters/{name}/versions/{version}")
                    assert response.status_code == 204, response.text
                    deleted[version] = time.monotonic()
                time.sleep(1.5)
            finally:
                stop.set()
            for loop in loops:
                loop.result()

        # the same version string registered again, with other weights: those must serve it
        # (a new version is routable once the front door's snapshot expires: 1 s)
        register(url, name, "1.1.0", churn_adapters[3])
        deadline = time.monotonic() + 5.0
        again = greedy(client, f"{name}@1.1.0")
        while again.status == 404 and time.monotonic() < deadline:
            time.sleep(0.2)
            again = greedy(client, f"{name}@1.1.0")

    assert all(s.status in (200, 404) for s in seen), Counter(s.status for s in seen)
    late = [
        f"{s.model} started {s.started - deleted[v]:.2f}s after {v} was deleted: "
        f"served by {s.version}, tokens of {v}: {s.tokens == solo[v]}"
        for s in seen
        for v in deleted
        if s.started > deleted[v] and s.status == 200 and (s.version == v or s.tokens == solo[v])
    ]
    assert not late, "\n".join(late[:10])
    assert sum(1 for s in seen if s.status == 200 and s.started < min(deleted.values())) > 0
    assert again.status == 200
    assert again.tokens == replacement, "the re-registered 1.1.0 was served with deleted weights"
