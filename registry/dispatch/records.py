"""The engine's value types: specialists, tasks, signals, decisions and scoring weights.

Owns the frozen dataclasses that cross the engine's boundary (the control plane builds
``Specialist`` and ``Task`` and reads ``Decision``). Imports only the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from registry.dispatch.errors import InvalidConfigurationError

Tier = Literal["keyword", "extension", "embedding", "fallback"]
#: Why a task fell back to the base model, as a fixed set (metrics label it by this).
FallbackKind = Literal["no_specialists", "uncovered_domain", "no_signal", "low_confidence"]


@dataclass(frozen=True)
class Specialist:
    """A registered specialist as the dispatcher sees it.

    ``domains`` are names (catalogue names or aliases such as ``"K8s"``, ``"HTML/CSS"``, or new
    domains); ``keywords`` and ``exemplars`` extend the catalogue for this specialist only.
    ``success_rate`` is ``None`` (or ignored) while ``request_count`` is 0: the cold-start
    prior of :class:`ScoringWeights` stands in for it.
    """

    name: str
    domains: tuple[str, ...]
    keywords: tuple[str, ...] = ()
    exemplars: tuple[str, ...] = ()
    success_rate: float | None = None
    request_count: int = 0


@dataclass(frozen=True)
class Task:
    """What is to be dispatched: the objective and the files it is about."""

    objective: str
    context_refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Signal:
    """Why a domain matched: ``term`` seen by ``tier`` counted ``weight`` for ``domain``."""

    tier: str
    domain: str
    term: str
    weight: float


@dataclass(frozen=True)
class Decision:
    """The engine's answer for one task.

    ``specialist`` is ``None`` for the base model; then ``fallback_reason`` says why.
    ``domains`` are the extracted domains (strongest first), ``scores`` the final score of each
    candidate specialist (for a fallback: the nearest specialists' match strengths),
    ``tier_best`` the best score each tier reached (``keyword``, ``extension``, ``embedding``),
    ``domain_scores`` the evidence per domain (including domains no specialist serves) and
    ``unmatched_terms`` the task's salient words and catalogue terms of domains outside the
    fleet: what a routing-gap record keeps. ``fallback_kind`` classifies ``fallback_reason``.
    """

    specialist: str | None
    tier: Tier
    domains: tuple[str, ...]
    scores: dict[str, float]
    signals: tuple[Signal, ...]
    fallback_reason: str | None
    tier_best: dict[str, float]
    domain_scores: dict[str, float] = field(default_factory=dict)
    unmatched_terms: tuple[str, ...] = ()
    fallback_kind: FallbackKind | None = None

    @property
    def nearest_domain(self) -> tuple[str, float] | None:
        """The domain with the most evidence, and that evidence (``None`` without any)."""
        if not self.domain_scores:
            return None
        name = max(self.domain_scores, key=lambda key: (self.domain_scores[key], key))
        return name, self.domain_scores[name]


@dataclass(frozen=True)
class ScoringWeights:
    """How candidates that matched are ranked (seed 001, "Dispatcher Integration").

    score = success_rate * rate + usage * min(requests / usage_saturation, 1) + match * strength

    A specialist without history (``request_count == 0`` or ``success_rate is None``) gets
    ``cold_start_success_rate`` as its rate: a neutral prior, so a new specialist beats an
    established one only where that one's measured success rate is poor, and among new
    specialists the match strength decides.
    """

    success_rate: float = 0.6
    usage: float = 0.3
    match: float = 0.1
    usage_saturation: int = 1000
    cold_start_success_rate: float = 0.5

    def __post_init__(self) -> None:
        weights = (self.success_rate, self.usage, self.match)
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise InvalidConfigurationError(
                f"scoring weights must be >= 0 and not all 0, got {weights}"
            )
        if self.usage_saturation < 1:
            raise InvalidConfigurationError("usage_saturation must be >= 1")
        if not 0.0 <= self.cold_start_success_rate <= 1.0:
            raise InvalidConfigurationError("cold_start_success_rate must be within [0, 1]")
