"""Scoring: how evidence adds up, and how matched specialists are ranked.

Owns :func:`saturate` (distinct signals add with diminishing returns, so that many mentions of
one technology do not drown a decisive one) and the seed's ranking of the specialists whose
domains matched: ``success_rate * rate + usage * min(requests / saturation, 1) + match *
strength`` with the cold-start prior of :class:`ScoringWeights`. Imports only the standard
library.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from registry.dispatch.records import ScoringWeights, Specialist

#: Each further signal counts this fraction of the one before it.
DECAY = 0.5
#: Signals beyond this many are ignored.
MAX_TERMS = 8


def saturate(weights: Iterable[float]) -> float:
    """``w1 + DECAY * w2 + DECAY**2 * w3 ...`` over the weights sorted from largest."""
    total = 0.0
    factor = 1.0
    for weight in sorted(weights, reverse=True)[:MAX_TERMS]:
        total += factor * weight
        factor *= DECAY
    return total


def success_rate_of(specialist: Specialist, weights: ScoringWeights) -> float:
    """The measured success rate, or the cold-start prior while there is no history."""
    if specialist.request_count <= 0 or specialist.success_rate is None:
        return weights.cold_start_success_rate
    return min(max(specialist.success_rate, 0.0), 1.0)


def score(specialist: Specialist, match_strength: float, weights: ScoringWeights) -> float:
    """The seed's score of one matched specialist; ``match_strength`` is within [0, 1]."""
    usage = min(max(specialist.request_count, 0) / weights.usage_saturation, 1.0)
    return (
        weights.success_rate * success_rate_of(specialist, weights)
        + weights.usage * usage
        + weights.match * min(max(match_strength, 0.0), 1.0)
    )


def rank(
    candidates: Sequence[tuple[Specialist, float]], weights: ScoringWeights
) -> list[tuple[Specialist, float]]:
    """Candidates (specialist, match strength) by score, best first.

    Ties go to the stronger match, then to the name (so a decision is deterministic).
    """
    scored = [(spec, score(spec, strength, weights), strength) for spec, strength in candidates]
    scored.sort(key=lambda item: (-item[1], -item[2], item[0].name))
    return [(spec, value) for spec, value, _ in scored]
