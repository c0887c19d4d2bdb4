"""Scoring: saturation and the seed's ranking formula with the cold-start prior."""

from __future__ import annotations

import pytest

from registry.dispatch.records import ScoringWeights, Specialist
from registry.dispatch.scoring import rank, saturate, score, success_rate_of


def test_saturate_adds_with_diminishing_returns() -> None:
    assert saturate([]) == 0.0
    assert saturate([1.0]) == 1.0
    assert saturate([0.5, 1.0]) == pytest.approx(1.25)
    assert saturate([1.0] * 100) < 2.0
    assert saturate([1.6]) > saturate([1.0, 0.5])


def test_the_seed_formula() -> None:
    weights = ScoringWeights()
    spec = Specialist("a", ("python",), success_rate=0.9, request_count=500)
    assert score(spec, 1.0, weights) == pytest.approx(0.6 * 0.9 + 0.3 * 0.5 + 0.1 * 1.0)
    veteran = Specialist("b", ("python",), success_rate=0.9, request_count=50_000)
    assert score(veteran, 0.0, weights) == pytest.approx(0.6 * 0.9 + 0.3)


def test_cold_start_uses_the_prior() -> None:
    weights = ScoringWeights(cold_start_success_rate=0.5)
    new = Specialist("new", ("python",))
    assert success_rate_of(new, weights) == 0.5
    no_requests = Specialist("x", ("python",), success_rate=1.0, request_count=0)
    assert success_rate_of(no_requests, weights) == 0.5
    assert score(new, 1.0, weights) == pytest.approx(0.6 * 0.5 + 0.1)


def test_a_new_specialist_beats_a_poor_veteran_but_not_a_good_one() -> None:
    weights = ScoringWeights()
    new = Specialist("new", ("python",))
    poor = Specialist("poor", ("python",), success_rate=0.2, request_count=200)
    good = Specialist("good", ("python",), success_rate=0.9, request_count=200)
    assert rank([(new, 1.0), (poor, 1.0)], weights)[0][0].name == "new"
    assert rank([(new, 1.0), (good, 1.0)], weights)[0][0].name == "good"


def test_weights_are_configurable() -> None:
    strong_match = Specialist("match", ("python",))
    busy = Specialist("busy", ("python",), success_rate=0.5, request_count=5000)
    default = rank([(strong_match, 1.0), (busy, 0.2)], ScoringWeights())
    assert default[0][0].name == "busy"
    match_only = rank([(strong_match, 1.0), (busy, 0.2)], ScoringWeights(0.0, 0.0, 1.0))
    assert match_only[0][0].name == "match"


def test_ties_break_on_match_then_name() -> None:
    a = Specialist("a", ("x",))
    b = Specialist("b", ("x",))
    weights = ScoringWeights(success_rate=1.0, usage=0.0, match=0.0)
    assert [s.name for s, _ in rank([(b, 0.5), (a, 0.5)], weights)] == ["a", "b"]
    assert [s.name for s, _ in rank([(a, 0.4), (b, 0.5)], weights)] == ["b", "a"]
