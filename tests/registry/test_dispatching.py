"""The dispatch service: the registry's fleet kept fresh, decisions, routing gaps (tiers 1-2;
tier 3 runs in the dispatcher's own tests and on the live stack)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from registry.app import create_app
from registry.components import Components
from registry.dispatch import Task
from registry.services.dispatching import specialist_of
from registry.services.records import AdapterInfo
from registry.settings import ControlPlaneSettings
from tests.registry.conftest import AdapterFactory

PYTHON_TASK = "pytest fixtures leak state between my tests"
UNRELATED = "what is a good recipe for banana bread?"


@pytest.fixture
async def running(settings: ControlPlaneSettings) -> AsyncIterator[Components]:
    components = create_app(settings).components
    async with components.running():
        yield components


async def _register(
    components: Components, make_adapter: AdapterFactory, name: str, domains: list[str]
) -> None:
    await components.adapters.register(name, "1.0.0", str(make_adapter(name)), domains=domains)


async def test_a_new_specialist_is_dispatched_to_at_once(
    running: Components, make_adapter: AdapterFactory
) -> None:
    assert (await running.dispatch.decide(PYTHON_TASK, record_gap=False)).specialist is None
    await _register(running, make_adapter, "py-lora", ["python", "testing"])
    decision = await running.dispatch.decide(PYTHON_TASK, record_gap=False)
    assert (decision.specialist, decision.tier) == ("py-lora", "keyword")


async def test_hints_and_deletions_reach_the_next_decision(
    running: Components, make_adapter: AdapterFactory
) -> None:
    await _register(running, make_adapter, "ops-lora", ["docker"])
    task = "terraform plan keeps recreating my s3 bucket"
    await running.adapters.set_dispatch_hints(
        "ops-lora", keywords=["terraform", "s3 bucket"], exemplars=[]
    )
    assert (await running.dispatch.decide(task, record_gap=False)).specialist == "ops-lora"
    await running.adapters.register("ops-lora", "2.0.0", str(make_adapter("v2", seed=1)))
    await running.adapters.promote("ops-lora", "2.0.0")
    await running.adapters.delete("ops-lora", "1.0.0")  # the new active version has no domains
    status = await running.dispatch.status()
    assert [s.name for s in status.specialists] == []


async def test_fallbacks_become_routing_gaps_but_dry_runs_do_not(
    running: Components, make_adapter: AdapterFactory
) -> None:
    await _register(running, make_adapter, "py-lora", ["python"])
    await running.dispatch.decide(UNRELATED, record_gap=False)
    await running.dispatch.decide(UNRELATED, ["notes/bread.txt"], request_id="r-1")
    decisions = await running.dispatch.decide_many([Task(UNRELATED), Task(PYTHON_TASK)])
    assert [d.specialist for d in decisions] == [None, "py-lora"]
    await running.dispatch.flush_gaps()
    page = await running.routing_gaps.page(limit=10)
    assert page.total == 2
    recorded = {gap.request_id: gap for gap in page.gaps}
    assert recorded["r-1"].context_refs == ("notes/bread.txt",)
    assert recorded["r-1"].task_excerpt == UNRELATED
    assert recorded["r-1"].reason


async def test_tier_3_off_is_reported(running: Components) -> None:
    on, reason = running.dispatch.embeddings_status
    assert not on  # these tests' settings turn it off
    assert reason


async def test_only_adapters_with_an_active_version_and_domains_are_specialists(
    running: Components, make_adapter: AdapterFactory
) -> None:
    await _register(running, make_adapter, "bare-lora", [])
    await _register(running, make_adapter, "sql-lora", ["sql"])
    infos = {info.name: info for info in await running.adapters.list_adapters()}
    assert specialist_of(infos["bare-lora"]) is None
    specialist = specialist_of(infos["sql-lora"])
    assert specialist is not None
    assert (specialist.domains, specialist.request_count) == (("sql",), 0)


async def test_requests_that_find_the_fleet_stale_together_read_it_once(
    running: Components, make_adapter: AdapterFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _register(running, make_adapter, "py-lora", ["python"])  # the fleet is now stale
    reads: list[int] = []
    list_adapters = running.adapters.list_adapters

    async def counted() -> list[AdapterInfo]:
        reads.append(1)
        return await list_adapters()

    monkeypatch.setattr(running.adapters, "list_adapters", counted)
    decisions = await asyncio.gather(
        *(running.dispatch.decide(PYTHON_TASK, record_gap=False) for _ in range(8))
    )
    assert {d.specialist for d in decisions} == {"py-lora"}
    assert len(reads) == 1
