"""Decision assembly: signals, routing-gap terms, fallback records."""

from __future__ import annotations

from registry.dispatch.catalogue import Catalogue
from registry.dispatch.evidence import gather
from registry.dispatch.explain import MAX_SIGNALS, fallback, top_signals, unmatched_terms
from registry.dispatch.fleet import build_fleet
from registry.dispatch.records import Signal, Task
from tests.dispatch.conftest import SEED_FLEET


def test_unmatched_terms_name_the_missing_domain_first(catalogue: Catalogue) -> None:
    fleet = build_fleet(catalogue, SEED_FLEET)
    evidence = gather(fleet, Task("Kotlin: when should I use a sealed class? sealed sealed"))
    terms = unmatched_terms(fleet, evidence)
    assert terms[0] == "kotlin"
    assert "sealed" in terms
    assert "when" not in terms
    assert "should" not in terms


def test_signals_are_capped_and_sorted() -> None:
    signals = [Signal("keyword", "d", f"t{i}", i / 100) for i in range(100)]
    kept = top_signals(signals)
    assert len(kept) == MAX_SIGNALS
    assert kept[0].weight == 0.99


def test_fallback_keeps_what_a_gap_record_needs(catalogue: Catalogue) -> None:
    fleet = build_fleet(catalogue, SEED_FLEET)
    evidence = gather(fleet, Task("Swift: async let for two calls"))
    decision = fallback(
        fleet,
        evidence,
        "because",
        "uncovered_domain",
        nearest={"python-lora": 0.3, "domain:swift": 1.0},
        domains=evidence.total,
        signals=[],
        tier_best={"keyword": 1.0, "extension": 0.0},
    )
    assert decision.specialist is None
    assert decision.tier == "fallback"
    assert decision.fallback_reason == "because"
    assert decision.fallback_kind == "uncovered_domain"
    assert decision.scores == {"python-lora": 0.3}  # specialists only
    assert decision.domains[0] == "swift"
    assert decision.nearest_domain is not None
    assert decision.nearest_domain[0] == "swift"
    assert decision.tier_best == {"keyword": 1.0, "extension": 0.0}
    assert "swift" in decision.unmatched_terms
