"""The :class:`Dispatcher`: the fleet in, one :class:`Decision` per task out.

Owns the engine's state (the compiled fleet and tier 3's encoded exemplars, swapped as one
immutable snapshot, so :meth:`Dispatcher.decide` is safe for concurrent callers while
:meth:`Dispatcher.set_fleet` runs), the order of the tiers (1-2 first; tier 3 only when they are
empty, weak, unconfirmed or ambiguous) and :func:`group_by_specialist` for batches.

Imports only the standard library and this package; the embedding model stays behind the
:class:`~registry.dispatch.embeddings.Embedder` protocol.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from registry.dispatch import explain
from registry.dispatch.catalogue import Catalogue, default_catalogue
from registry.dispatch.embeddings import MAX_QUERY_CHARS, Embedder
from registry.dispatch.errors import DispatchError
from registry.dispatch.evidence import (
    Evidence,
    OwnerEvidence,
    gather,
    weigh,
    without_declined,
)
from registry.dispatch.fleet import FleetIndex, build_fleet, routing_signature, validate
from registry.dispatch.records import (
    Decision,
    FallbackKind,
    ScoringWeights,
    Signal,
    Specialist,
    Task,
)
from registry.dispatch.semantic import ExemplarBank
from registry.dispatch.verdicts import (
    Thresholds,
    Verdict,
    lexical_verdict,
    semantic_scores,
    semantic_verdict,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _State:
    fleet: FleetIndex
    bank: ExemplarBank | None
    embeddings: tuple[bool, str]


class Dispatcher:
    """Picks the specialist for a task, or the base model (see the package README)."""

    def __init__(
        self,
        catalogue: Catalogue | None = None,
        embedder: Embedder | None = None,
        weights: ScoringWeights | None = None,
        thresholds: Thresholds | None = None,
    ) -> None:
        self._catalogue = catalogue if catalogue is not None else default_catalogue()
        self._embedder = embedder
        self._weights = weights if weights is not None else ScoringWeights()
        self._limits = thresholds if thresholds is not None else Thresholds()
        self._lock = threading.Lock()
        if embedder is None:
            status = (False, "no embedding model configured (tiers 1-2 only)")
        else:
            status = embedder.status
        self._state = _State(build_fleet(self._catalogue, ()), None, status)

    @property
    def embeddings_status(self) -> tuple[bool, str]:
        """``(on, reason)``: whether tier 3 runs, and why (not)."""
        return self._state.embeddings

    @property
    def fleet(self) -> tuple[Specialist, ...]:
        return self._state.fleet.specialists

    @property
    def weights(self) -> ScoringWeights:
        return self._weights

    def set_fleet(self, specialists: Sequence[Specialist]) -> None:
        """Compile the routing tables and encode the exemplars (blocking: seconds the first
        time, milliseconds when only statistics changed). Raises InvalidFleetError."""
        with self._lock:
            current = self._state
            kept = validate(specialists)
            if routing_signature(kept) == current.fleet.signature and current.fleet.specialists:
                fleet = current.fleet.with_statistics(kept)
                self._state = _State(fleet, current.bank, current.embeddings)
                return
            fleet = build_fleet(self._catalogue, kept)
            bank, status = self._encode(fleet)
            self._state = _State(fleet, bank, status)
            logger.info(
                "dispatcher fleet set: %d specialists, %d domains, %d keywords; tier 3 %s",
                len(fleet.specialists),
                len(fleet.domains),
                len(fleet.lexicon),
                "on" if bank is not None else "off",
            )

    def _encode(self, fleet: FleetIndex) -> tuple[ExemplarBank | None, tuple[bool, str]]:
        embedder = self._embedder
        if embedder is None:
            return None, self._state.embeddings
        on, reason = embedder.status
        if not on:
            return None, (False, reason)
        try:
            bank = ExemplarBank(embedder, fleet.exemplar_rows, self._limits.top_k)
        except DispatchError as exc:
            logger.warning("tier 3 off: encoding the exemplars failed: %s", exc)
            return None, (False, f"encoding the exemplars failed: {exc}")
        except Exception as exc:  # a model failure turns tier 3 off, never the dispatcher
            logger.exception("tier 3 off: encoding the exemplars failed")
            return None, (False, f"encoding the exemplars failed: {type(exc).__name__}: {exc}")
        return bank, (True, f"{reason}; {len(bank)} exemplars")

    def decide(self, task: Task) -> Decision:
        """The specialist for ``task``, or the base model with a ``fallback_reason``."""
        step = self.first_pass(task)
        return step if isinstance(step, Decision) else step.run()

    def first_pass(self, task: Task) -> Decision | SemanticStep:
        """Tiers 1-2 (well under a millisecond): the decision, or the tier-3 step still to run.

        Tier 3 embeds the task (milliseconds of model time): a caller on an event loop runs the
        returned :class:`SemanticStep` in a worker thread, and only then pays the thread hop.
        """
        state = self._state
        seen = _Lexical.of(state.fleet, task)
        if not state.fleet.specialists:
            return seen.fallback(
                "no specialists are registered", "no_specialists", {}, seen.evidence.total
            )
        verdict = lexical_verdict(seen.ranked, self._limits)
        lead = seen.lead(verdict.leader)
        if verdict.confident and lead is not None:
            if lead.owner.specialist is None:
                domain = lead.owner.key.split(":", 1)[-1]
                reason = f"the task is about '{domain}', which no specialist serves"
                return seen.fallback(
                    reason, "uncovered_domain", seen.strengths, seen.evidence.total
                )
            return self._lexical_choice(seen, verdict)
        tie = verdict.leader is not None and len(verdict.contenders) > 1
        if state.bank is None:
            if tie and verdict.candidates:  # without tier 3 a tie goes to the strongest
                return self._lexical_choice(seen, verdict)
            reason = f"{verdict.reason}; tier 3 is off ({state.embeddings[1]})"
            kind: FallbackKind = "low_confidence" if seen.evidence.total else "no_signal"
            return seen.fallback(reason, kind, seen.strengths, seen.evidence.total)
        bank = state.bank
        return SemanticStep(lambda: self._semantic(bank, seen, task, verdict, tie))

    def _lexical_choice(self, seen: _Lexical, verdict: Verdict) -> Decision:
        lead = seen.lead(verdict.leader) or seen.ranked[0]
        return explain.chosen(
            seen.fleet,
            verdict.candidates,
            self._weights,
            tier="extension" if lead.files > lead.keyword else "keyword",
            domains=seen.evidence.total,
            signals=seen.signals,
            tier_best=seen.tier_best,
            domain_scores=seen.evidence.total,
        )

    def _semantic(
        self, bank: ExemplarBank, seen: _Lexical, task: Task, lexical: Verdict, tie: bool
    ) -> Decision:
        fleet = seen.fleet
        sims = bank.domain_scores(without_declined(task.objective[:MAX_QUERY_CHARS]))
        # Tier 3 gives no head start to words that may have their everyday sense here.
        boosts = {
            item.owner.key: item.strength
            for item in seen.ranked
            if item.confirmed or item.strength < self._limits.keyword_min
        }
        scores = semantic_scores(fleet, sims, boosts, self._limits, tie_break=tie)
        routable = [o.key for o in fleet.owners if o.specialist is not None]
        seen.tier_best["embedding"] = round(max((scores[k] for k in routable), default=0.0), 4)
        similarity = {name: sim.score for name, sim in sims.items()}
        seen.signals.extend(explain.embedding_signals(sims.values()))
        verdict = semantic_verdict(fleet, scores, lexical, self._limits)
        if not verdict.confident:
            reason = f"{lexical.reason}; tier 3: {verdict.reason}"
            return seen.fallback(reason, "low_confidence", scores, similarity)
        return explain.chosen(
            fleet,
            verdict.candidates,
            self._weights,
            tier="embedding",
            domains=similarity,
            signals=seen.signals,
            tier_best=seen.tier_best,
            domain_scores=similarity,
        )


@dataclass
class _Lexical:
    """What tiers 1-2 saw in one task (built per call; never shared between threads)."""

    fleet: FleetIndex
    evidence: Evidence
    ranked: list[OwnerEvidence]
    signals: list[Signal]
    tier_best: dict[str, float]
    strengths: dict[str, float]

    @classmethod
    def of(cls, fleet: FleetIndex, task: Task) -> _Lexical:
        evidence = gather(fleet, task)
        ranked = weigh(fleet, evidence)
        return cls(
            fleet=fleet,
            evidence=evidence,
            ranked=ranked,
            signals=explain.keyword_signals(fleet, evidence) + explain.file_signals(evidence),
            tier_best={
                "keyword": round(max(evidence.keyword.values(), default=0.0), 4),
                "extension": round(max(evidence.files.values(), default=0.0), 4),
            },
            strengths={item.owner.key: item.strength for item in ranked},
        )

    def lead(self, key: str | None) -> OwnerEvidence | None:
        """The evidence of the verdict's leader ``key`` (the strongest owner without one)."""
        if key is not None:
            for item in self.ranked:
                if item.owner.key == key:
                    return item
        return self.ranked[0] if self.ranked else None

    def fallback(
        self,
        reason: str,
        kind: FallbackKind,
        nearest: dict[str, float],
        domains: dict[str, float],
    ) -> Decision:
        return explain.fallback(
            self.fleet,
            self.evidence,
            reason,
            kind,
            nearest=nearest,
            domains=domains,
            signals=self.signals,
            tier_best=self.tier_best,
        )


@dataclass(frozen=True)
class SemanticStep:
    """Tier 3 for one task, still to run (its state is this task's own: any thread may run it)."""

    run: Callable[[], Decision]


def group_by_specialist(decisions: Sequence[tuple[str, Decision]]) -> dict[str | None, list[str]]:
    """Task ids grouped by the specialist that serves them (``None``: the base model), in
    order of first appearance, so a batch can be issued with as few adapter swaps as possible."""
    groups: dict[str | None, list[str]] = {}
    for task_id, decision in decisions:
        groups.setdefault(decision.specialist, []).append(task_id)
    return groups
