"""The dispatcher as the control plane runs it: the registry's fleet, decisions, routing gaps.

:class:`DispatchService` keeps the decision engine (:mod:`registry.dispatch`) fed with the
registry's specialists: every adapter with an active version, its domains, its own keywords and
exemplars, and its active version's statistics (success rate, request count). It reads the fleet
again after any change made through the adapter service (its ``generation``) and at most every
``refresh_s`` seconds otherwise (statistics, and changes made by other control-plane instances).
Tiers 1-2 decide on the event loop (well under a millisecond); tier 3, when a task needs it, runs
in a worker thread (~15 ms of CPU); the embedding model is loaded once, at start. A fallback of
a real request is recorded as a routing gap, off the request path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from registry.background import BatchWriter
from registry.dispatch import Decision, Dispatcher, ScoringWeights, Specialist, Task
from registry.dispatch.embeddings import load_default_embedder
from registry.errors import DatabaseUnavailable
from registry.services.adapters import AdapterService
from registry.services.records import AdapterInfo
from registry.services.routing_gaps import GapRecord, RoutingGapLog

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DispatchSettings:
    embeddings: bool = True
    refresh_s: float = 5.0
    weights: ScoringWeights = field(default_factory=ScoringWeights)


@dataclass(frozen=True)
class SpecialistStatus:
    name: str
    domains: tuple[str, ...]
    keywords: tuple[str, ...]
    exemplars: int
    success_rate: float | None
    request_count: int


@dataclass(frozen=True)
class DispatcherStatus:
    embeddings: bool
    embeddings_reason: str
    specialists: tuple[SpecialistStatus, ...]


def specialist_of(info: AdapterInfo) -> Specialist | None:
    """The dispatcher's view of an adapter; None when it cannot be dispatched to."""
    active = next((v for v in info.versions if v.is_active), None)
    if active is None or not (active.domains or info.dispatch_exemplars):
        return None  # nothing to serve, or nothing to match a task against
    return Specialist(
        name=info.name,
        domains=tuple(active.domains),
        keywords=tuple(info.dispatch_keywords),
        exemplars=tuple(info.dispatch_exemplars),
        success_rate=active.success_rate,
        request_count=active.request_count,
    )


class DispatchService:
    def __init__(
        self, adapters: AdapterService, gaps: RoutingGapLog, settings: DispatchSettings
    ) -> None:
        self._adapters = adapters
        self._settings = settings
        self._gap_writer: BatchWriter[GapRecord] = BatchWriter("routing gap", gaps.record)
        self._engine: Dispatcher | None = None
        self._fleet: list[Specialist] = []
        self._generation = -1
        self._fetched_at = float("-inf")
        self._refresh_lock = asyncio.Lock()

    @property
    def embeddings_status(self) -> tuple[bool, str]:
        if self._engine is None:
            return False, "the dispatcher has not started"
        return self._engine.embeddings_status

    async def start(self) -> None:
        """Build the engine (loading the embedding model once) and read the fleet."""
        started = time.perf_counter()
        self._engine = await asyncio.to_thread(self._build_engine)
        on, reason = self._engine.embeddings_status
        logger.info(
            "dispatcher ready in %.1f s; embeddings (tier 3) %s: %s",
            time.perf_counter() - started,
            "on" if on else "off",
            reason,
        )
        await self.refresh()

    def _build_engine(self) -> Dispatcher:
        embedder = load_default_embedder() if self._settings.embeddings else None
        return Dispatcher(embedder=embedder, weights=self._settings.weights)

    async def stop(self) -> None:
        await self._gap_writer.drain()

    async def refresh(self, *, only_if_stale: bool = False) -> None:
        """Read the fleet from the registry and hand it to the engine.

        With ``only_if_stale``, only after a change through the adapter service or once
        ``refresh_s`` has passed; checked under the lock, so requests that find the fleet stale
        together read it once.
        """
        engine = self._require_engine()
        async with self._refresh_lock:
            if only_if_stale and not self._stale():
                return
            generation = self._adapters.generation
            infos = await self._adapters.list_adapters()
            fleet = [s for s in (specialist_of(info) for info in infos) if s is not None]
            await asyncio.to_thread(engine.set_fleet, fleet)
            self._fleet = fleet
            self._generation = generation
            self._fetched_at = time.monotonic()

    def _stale(self) -> bool:
        expired = time.monotonic() - self._fetched_at > self._settings.refresh_s
        return expired or self._adapters.generation != self._generation

    async def _fresh_engine(self) -> Dispatcher:
        """The engine with a current fleet; while the database is unavailable, with the last
        fleet read (retried every ``refresh_s``), or :class:`DatabaseUnavailable` if none was."""
        engine = self._require_engine()
        if self._stale():
            try:
                await self.refresh(only_if_stale=True)
            except DatabaseUnavailable:
                if self._fetched_at == float("-inf"):
                    raise
                # the database logs the outage once; decide with the fleet as last read
                self._fetched_at = time.monotonic()
        return engine

    def _require_engine(self) -> Dispatcher:
        if self._engine is None:
            raise RuntimeError("DispatchService.start() has not run")
        return self._engine

    async def decide(
        self,
        objective: str,
        context_refs: Sequence[str] = (),
        *,
        record_gap: bool = True,
        request_id: str | None = None,
    ) -> Decision:
        """The decision for one task; a fallback is recorded as a routing gap if ``record_gap``."""
        engine = await self._fresh_engine()
        task = Task(objective, tuple(context_refs))
        # tiers 1-2 here (well under a millisecond); only tier 3 is worth a worker thread
        step = engine.first_pass(task)
        decision = step if isinstance(step, Decision) else await asyncio.to_thread(step.run)
        if decision.specialist is None and record_gap:
            self._gap_writer.add(gap_record(task, decision, request_id))
        return decision

    async def decide_many(self, tasks: Sequence[Task]) -> list[Decision]:
        """Decisions for a batch (one thread hop); fallbacks are recorded as routing gaps."""
        engine = await self._fresh_engine()
        decisions = await asyncio.to_thread(lambda: [engine.decide(task) for task in tasks])
        for task, decision in zip(tasks, decisions, strict=True):
            if decision.specialist is None:
                self._gap_writer.add(gap_record(task, decision, None))
        return decisions

    async def status(self) -> DispatcherStatus:
        """Which tiers run and the fleet as the engine sees it now."""
        await self._fresh_engine()
        on, reason = self.embeddings_status
        specialists = tuple(
            SpecialistStatus(
                s.name, s.domains, s.keywords, len(s.exemplars), s.success_rate, s.request_count
            )
            for s in self._fleet
        )
        return DispatcherStatus(on, reason, specialists)

    @property
    def gap_backlog(self) -> BatchWriter[GapRecord]:
        """The writer of routing gaps (its lag and backlog are exported as metrics)."""
        return self._gap_writer

    async def flush_gaps(self) -> None:
        """Write the routing gaps recorded so far (tests, shutdown)."""
        await self._gap_writer.drain()


def gap_record(task: Task, decision: Decision, request_id: str | None) -> GapRecord:
    nearest = decision.nearest_domain
    return GapRecord(
        objective=task.objective,
        reason=decision.fallback_reason or "no confident match",
        context_refs=task.context_refs,
        extracted_domains=decision.domains,
        terms=decision.unmatched_terms,
        tier_scores=dict(decision.tier_best),
        nearest_domain=nearest[0] if nearest else None,
        nearest_score=nearest[1] if nearest else None,
        request_id=request_id,
    )
