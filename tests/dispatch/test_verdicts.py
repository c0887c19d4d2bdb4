"""The rules of tiers 1-2 and tier 3 on controlled evidence and scores."""

from __future__ import annotations

import pytest

from registry.dispatch.catalogue import Catalogue
from registry.dispatch.errors import InvalidConfigurationError
from registry.dispatch.evidence import gather, weigh
from registry.dispatch.fleet import build_fleet
from registry.dispatch.records import Specialist, Task
from registry.dispatch.verdicts import (
    BACKGROUND,
    Thresholds,
    Verdict,
    lexical_verdict,
    semantic_verdict,
)
from tests.dispatch.conftest import SEED_FLEET


def _lexical(catalogue: Catalogue, text: str, limits: Thresholds | None = None) -> Verdict:
    fleet = build_fleet(catalogue, SEED_FLEET)
    return lexical_verdict(weigh(fleet, gather(fleet, Task(text))), limits or Thresholds())


def test_confident_weak_and_empty(catalogue: Catalogue) -> None:
    confident = _lexical(catalogue, "kubectl says CrashLoopBackOff")
    assert confident.confident
    assert confident.leader == "devops-lora"
    assert [key for key, _ in confident.candidates] == ["devops-lora"]
    weak = _lexical(catalogue, "optimize the kernel")
    assert not weak.confident
    assert "weak" in weak.reason
    empty = _lexical(catalogue, "good morning")
    assert not empty.confident
    assert empty.leader is None


def test_a_close_rival_makes_it_ambiguous(catalogue: Catalogue) -> None:
    verdict = _lexical(catalogue, "SQL query inside a React component")
    assert not verdict.confident
    assert set(verdict.contenders) == {"web-lora", "data-lora"}
    strict = _lexical(catalogue, "SQL query inside a React component", Thresholds(margin_ratio=1.0))
    assert strict.confident


def test_two_specialists_sharing_a_domain_are_candidates_not_rivals(catalogue: Catalogue) -> None:
    fleet = build_fleet(
        catalogue, [Specialist("py-a", ("python",)), Specialist("py-b", ("python", "testing"))]
    )
    ranked = weigh(fleet, gather(fleet, Task("django view is slow")))
    verdict = lexical_verdict(ranked, Thresholds())
    assert verdict.confident
    assert {key for key, _ in verdict.candidates} == {"py-a", "py-b"}


def test_semantic_background_wins_falls_back(catalogue: Catalogue) -> None:
    fleet = build_fleet(catalogue, SEED_FLEET)
    scores = {o.key: 0.2 for o in fleet.owners} | {BACKGROUND: 0.6, "python-lora": 0.4}
    verdict = semantic_verdict(fleet, scores, Verdict(False, "none"), Thresholds())
    assert not verdict.confident
    assert "everyday" in verdict.reason


def test_semantic_margin_and_minimum(catalogue: Catalogue) -> None:
    fleet = build_fleet(catalogue, SEED_FLEET)
    base = {o.key: 0.1 for o in fleet.owners} | {BACKGROUND: 0.3}
    clear = semantic_verdict(fleet, base | {"math-lora": 0.5}, Verdict(False, ""), Thresholds())
    assert clear.confident
    assert clear.leader == "math-lora"
    close = semantic_verdict(fleet, base | {"math-lora": 0.31}, Verdict(False, ""), Thresholds())
    assert not close.confident
    low = {o.key: 0.0 for o in fleet.owners} | {BACKGROUND: 0.0, "math-lora": 0.1}
    assert not semantic_verdict(fleet, low, Verdict(False, ""), Thresholds()).confident
    # specialists compete on score alone: a close second specialist does not block the first
    near = base | {"math-lora": 0.5, "python-lora": 0.49}
    assert semantic_verdict(fleet, near, Verdict(False, ""), Thresholds()).leader == "math-lora"


def test_semantic_tie_break_only_among_contenders(catalogue: Catalogue) -> None:
    fleet = build_fleet(catalogue, SEED_FLEET)
    after = Verdict(False, "ambiguous", leader="web-lora", contenders=("web-lora", "data-lora"))
    scores = {o.key: 0.1 for o in fleet.owners} | {
        BACKGROUND: 0.9,
        "docs-lora": 0.8,
        "web-lora": 0.30,
        "data-lora": 0.31,
    }
    verdict = semantic_verdict(fleet, scores, after, Thresholds())
    assert verdict.confident
    assert verdict.leader == "data-lora"


def test_threshold_validation() -> None:
    with pytest.raises(InvalidConfigurationError):
        Thresholds(margin_ratio=0.0)
    with pytest.raises(InvalidConfigurationError):
        Thresholds(top_k=0)
    with pytest.raises(InvalidConfigurationError):
        Thresholds(lexical_boost=-1.0)


@pytest.mark.parametrize(
    ("text", "leader"),
    [
        ("Write a README for the CUDA ray tracer: nvcc flags and a usage example", "docs-lora"),
        ("add JSDoc comments to the TypeScript date helpers", "docs-lora"),
        ("create a Dockerfile for the FastAPI service with gunicorn and uvicorn", "devops-lora"),
        ("derive the gradient of the hinge loss, I will write the CUDA kernel later", "math-lora"),
    ],
)
def test_the_deliverable_decides(catalogue: Catalogue, text: str, leader: str) -> None:
    verdict = _lexical(catalogue, text)
    assert verdict.confident
    assert verdict.leader == leader


@pytest.mark.parametrize(
    ("text", "leader"),
    [
        ("my C++ CUDA kernel with cudaMemcpy and std::vector buffers is slow", "cuda-lora"),
        ("pandas groupby in my python script is slow, python 3.12", "data-lora"),
        ("render markdown in a React component with react-markdown", "web-lora"),
    ],
)
def test_an_outranking_domain_settles_a_tie(catalogue: Catalogue, text: str, leader: str) -> None:
    verdict = _lexical(catalogue, text)
    assert verdict.confident
    assert verdict.leader == leader


def test_outranking_needs_every_rival_outranked(catalogue: Catalogue) -> None:
    verdict = _lexical(catalogue, "SQL query inside a React component")
    assert not verdict.confident  # web is not outranked by data: still a tie for tier 3
