"""What a decision says about itself: signals, extracted domains, routing-gap terms.

Owns the assembly of :class:`~registry.dispatch.records.Decision` objects from a verdict: the
signals (tier, domain, term, weight) behind it, capped at :data:`MAX_SIGNALS`; the domain
evidence; and, for routing gaps, the task's salient words plus the catalogue terms of domains
no specialist serves. Imports only the standard library.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from registry.dispatch.evidence import Evidence
from registry.dispatch.fleet import VIRTUAL_PREFIX, FleetIndex
from registry.dispatch.records import (
    Decision,
    FallbackKind,
    ScoringWeights,
    Signal,
    Specialist,
    Tier,
)
from registry.dispatch.scoring import rank
from registry.dispatch.semantic import DomainSimilarity

MAX_SIGNALS = 32
MAX_TERMS = 12
MAX_DOMAINS = 6

_STOPWORD_TEXT = """
    a about above after again against all also am an and any are aren as at be because been
    before being below between both but by can cannot could couldn did didn do does doesn
    doing don down during each even ever every few for from further get gets getting give go
    goes going got had hadn has hasn have haven having he her here hers herself him himself his
    how i if in into is isn it its itself just keep know let like ll make makes me might more
    most much must my myself need needs no nor not now of off on once one only or other our
    ours out over own please re really right same say see seems shan she should so some still
    such sure take tell than thank thanks that the their theirs them then there these they
    thing things think this those though through to too try trying under until up us use used
    using ve very want wants was wasn way we well were weren what when where which while who
    whom why will with without won work works would wouldn yes yet you your yours yourself
    best better good new old
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def keyword_signals(fleet: FleetIndex, evidence: Evidence) -> list[Signal]:
    routable = fleet.routable_domains
    return [
        Signal("keyword", hit.domain, hit.term.text, hit.weight)
        for hit in evidence.keyword_hits
        if hit.domain in routable
    ]


def file_signals(evidence: Evidence) -> list[Signal]:
    return [Signal("extension", hit.domain, hit.path, hit.weight) for hit in evidence.file_hits]


def embedding_signals(sims: Iterable[DomainSimilarity], limit: int = 3) -> list[Signal]:
    top = sorted(sims, key=lambda sim: -sim.score)[:limit]
    return [Signal("embedding", sim.domain, sim.nearest, round(sim.score, 4)) for sim in top]


def top_signals(signals: Iterable[Signal]) -> tuple[Signal, ...]:
    return tuple(sorted(signals, key=lambda s: (-s.weight, s.tier, s.domain))[:MAX_SIGNALS])


def rounded(values: dict[str, float], limit: int = MAX_DOMAINS) -> dict[str, float]:
    ranked = sorted(values.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return {key: round(value, 4) for key, value in ranked}


def unmatched_terms(fleet: FleetIndex, evidence: Evidence) -> tuple[str, ...]:
    """Catalogue terms of domains no specialist serves, then the task's salient words."""
    virtual = {
        owner.key[len(VIRTUAL_PREFIX) :] for owner in fleet.owners if owner.specialist is None
    }
    terms = [hit.term.text for hit in evidence.keyword_hits if hit.domain in virtual]
    words = Counter(
        word
        for word in evidence.tokens.words[:2000]
        if len(word) > 2 and not word.isdigit() and word not in _STOPWORDS
    )
    terms += [word for word, _ in words.most_common(MAX_TERMS)]
    return tuple(dict.fromkeys(terms))[:MAX_TERMS]


def chosen(
    fleet: FleetIndex,
    candidates: Sequence[tuple[str, float]],
    weights: ScoringWeights,
    *,
    tier: Tier,
    domains: dict[str, float],
    signals: Iterable[Signal],
    tier_best: dict[str, float],
    domain_scores: dict[str, float],
) -> Decision:
    """The decision for the best-ranked candidate (the seed's formula over ``candidates``)."""
    by_key = {owner.key: owner for owner in fleet.owners}
    pairs: list[tuple[Specialist, float]] = []
    for key, strength in candidates:
        spec = by_key[key].specialist
        if spec is not None:
            pairs.append((spec, strength))
    ranking = rank(pairs, weights)
    winner = ranking[0][0]
    mine = by_key[winner.name].domains
    extracted = sorted(
        (name for name in domains if name in mine), key=lambda name: (-domains[name], name)
    )
    return Decision(
        specialist=winner.name,
        tier=tier,
        domains=tuple(extracted),
        scores={spec.name: round(value, 4) for spec, value in ranking},
        signals=top_signals(signals),
        fallback_reason=None,
        tier_best=tier_best,
        domain_scores=rounded(domain_scores),
    )


def fallback(
    fleet: FleetIndex,
    evidence: Evidence | None,
    reason: str,
    kind: FallbackKind,
    *,
    nearest: dict[str, float],
    domains: dict[str, float],
    signals: Iterable[Signal],
    tier_best: dict[str, float],
) -> Decision:
    """The base model, with what a routing-gap record keeps."""
    specialists = {spec.name for spec in fleet.specialists}
    return Decision(
        specialist=None,
        tier="fallback",
        domains=tuple(rounded(domains, 3)),
        scores=rounded({k: v for k, v in nearest.items() if k in specialists}, 3),
        signals=top_signals(signals),
        fallback_reason=reason,
        tier_best=tier_best,
        domain_scores=rounded(domains),
        unmatched_terms=unmatched_terms(fleet, evidence) if evidence is not None else (),
        fallback_kind=kind,
    )
