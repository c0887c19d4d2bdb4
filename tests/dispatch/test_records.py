"""Value types: validation of the scoring weights, the decision's helpers."""

from __future__ import annotations

import dataclasses

import pytest

from registry.dispatch.errors import InvalidConfigurationError
from registry.dispatch.records import Decision, ScoringWeights, Specialist, Task


def test_scoring_weights_validation() -> None:
    ScoringWeights(0.0, 0.0, 1.0)
    with pytest.raises(InvalidConfigurationError):
        ScoringWeights(-0.1, 0.3, 0.1)
    with pytest.raises(InvalidConfigurationError):
        ScoringWeights(0.0, 0.0, 0.0)
    with pytest.raises(InvalidConfigurationError):
        ScoringWeights(usage_saturation=0)
    with pytest.raises(InvalidConfigurationError):
        ScoringWeights(cold_start_success_rate=1.5)


def test_records_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Task("x").objective = "y"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Specialist("a", ("python",)).name = "b"  # type: ignore[misc]


def test_nearest_domain() -> None:
    decision = Decision(
        specialist=None,
        tier="fallback",
        domains=(),
        scores={},
        signals=(),
        fallback_reason="none",
        tier_best={},
        domain_scores={"go": 0.8, "python": 0.3},
    )
    assert decision.nearest_domain == ("go", 0.8)
    assert dataclasses.replace(decision, domain_scores={}).nearest_domain is None
