"""The rules that turn evidence into a choice: when tiers 1-2 are confident, and tier 3.

Owns :class:`Thresholds` and two pure functions, in the spirit of a router whose rules return a
typed match with a score:

- :func:`lexical_verdict`: tiers 1-2 decide when the strongest owner has enough evidence
  (``keyword_min``), that evidence is confirmed (an everyday word alone is not), and no owner
  that shares none of its matched domains comes within ``margin_ratio`` of it. Candidates are
  the specialists that share a matched domain with it (the seed's "matching domains").
  *The deliverable decides*: when a request verb asks for a domain's deliverable ("write a
  README for my CUDA library", :mod:`registry.dispatch.intent`), the owner of that domain
  leads whatever the subject's evidence, provided its own evidence is enough and confirmed.
- :func:`semantic_verdict`: tier 3 compares the task with every owner's exemplars and with
  everyday requests (the background); lexical evidence adds up to ``lexical_boost``. After an
  ambiguous lexical match only the lexical contenders compete; otherwise a specialist must
  reach ``embedding_min`` and beat the base model's side (everyday requests and the domains no
  specialist serves) by ``embedding_margin``; among specialists the best score wins.

Imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from registry.dispatch.errors import InvalidConfigurationError
from registry.dispatch.evidence import OwnerEvidence
from registry.dispatch.fleet import FleetIndex, Owner
from registry.dispatch.semantic import DomainSimilarity

#: The key under which the background (everyday requests) competes in tier 3.
BACKGROUND = "background:general"


@dataclass(frozen=True)
class Thresholds:
    """When a tier is confident (see the module docstring)."""

    keyword_min: float = 0.9
    margin_ratio: float = 0.75
    candidate_ratio: float = 0.5
    embedding_min: float = 0.2
    embedding_margin: float = 0.02
    everyday_margin: float = 0.06
    lexical_boost: float = 0.2
    tie_boost: float = 0.2
    lexical_cap: float = 2.0
    top_k: int = 5

    def __post_init__(self) -> None:
        ratios = (self.margin_ratio, self.candidate_ratio)
        if not all(0.0 < r <= 1.0 for r in ratios):
            raise InvalidConfigurationError(f"ratios must be within (0, 1], got {ratios}")
        if self.keyword_min <= 0 or self.lexical_cap <= 0 or self.top_k < 1:
            raise InvalidConfigurationError("keyword_min and lexical_cap > 0, top_k >= 1")
        margins = (self.embedding_margin, self.everyday_margin)
        if min(*margins, self.lexical_boost, self.tie_boost) < 0:
            raise InvalidConfigurationError("margins and boosts must be >= 0")


@dataclass(frozen=True)
class Verdict:
    """A tier's conclusion: a leader and its candidates, or why there is none.

    An ambiguous lexical verdict (``confident`` false, ``len(contenders) > 1``) still names
    its leader and candidates: without tier 3 the engine goes with them.
    """

    confident: bool
    reason: str
    leader: str | None = None
    candidates: tuple[tuple[str, float], ...] = ()
    contenders: tuple[str, ...] = ()
    #: the lead rests on unconfirmed words that have an everyday sense ("which docs do I need
    #: for a passport"): tier 3 then asks ``everyday_margin`` over the base model's side.
    everyday: bool = False


def lexical_verdict(ranked: Sequence[OwnerEvidence], limits: Thresholds) -> Verdict:
    """Whether tiers 1-2 decide, and for whom (``ranked`` strongest first)."""
    if not ranked:
        return Verdict(False, "no keyword or file signal")
    lead = ranked[0]
    delivers = next((o for o in ranked if o.deliverable), None)
    if delivers is not None and delivers.strength >= limits.keyword_min and delivers.confirmed:
        # The deliverable decides: the other owners' evidence names the subject, not the work.
        candidates = _candidates(ranked, delivers, limits)
        return Verdict(True, "", leader=delivers.owner.key, candidates=candidates)
    key = lead.owner.key
    everyday = not lead.confirmed and lead.everyday_words
    if lead.strength < limits.keyword_min:
        return Verdict(
            False,
            f"only weak signals (best: {key} {lead.strength:.2f})",
            contenders=(key,),
            everyday=everyday,
        )
    if not lead.confirmed:
        return Verdict(
            False,
            f"keywords of {key} may have an everyday sense here",
            contenders=(key,),
            everyday=everyday,
        )
    close = [o for o in ranked[1:] if o.strength >= limits.margin_ratio * lead.strength]
    rivals = [o for o in close if not (o.matched & lead.matched)]
    settled = _outranking(lead, rivals, limits)
    if settled is not None:
        candidates = _candidates(ranked, settled, limits)
        return Verdict(True, "", leader=settled.owner.key, candidates=candidates)
    candidates = _candidates(ranked, lead, limits)
    if rivals:
        rival = rivals[0]
        return Verdict(
            False,
            f"ambiguous between {key} ({lead.strength:.2f}) and "
            f"{rival.owner.key} ({rival.strength:.2f})",
            leader=key,
            candidates=candidates,
            contenders=(key, *(o.owner.key for o in rivals)),
        )
    return Verdict(True, "", leader=key, candidates=candidates)


def _candidates(
    ranked: Sequence[OwnerEvidence], leader: OwnerEvidence, limits: Thresholds
) -> tuple[tuple[str, float], ...]:
    """The routable owners that share a matched domain with ``leader`` and come close enough to
    it, with their strength relative to it (the leader itself included)."""
    return tuple(
        (o.owner.key, o.strength / leader.strength)
        for o in ranked
        if o.owner.routable
        and o.matched & leader.matched
        and o.strength >= limits.candidate_ratio * leader.strength
    )


def _outranking(
    lead: OwnerEvidence, rivals: Sequence[OwnerEvidence], limits: Thresholds
) -> OwnerEvidence | None:
    """The contender of a lexical tie whose matched domains outrank the dominant domain of
    every other contender (GPU work over the language it is written in, data tooling over
    Python, the code's language over the markup it handles), or ``None``."""
    if not rivals:
        return None
    contenders = [lead, *rivals]
    for item in contenders:
        if item.strength < limits.keyword_min or not item.confirmed or not item.outranks:
            continue
        if all(other is item or other.dominant in item.outranks for other in contenders):
            return item
    return None


def owner_similarity(owner: Owner, sims: dict[str, DomainSimilarity]) -> float:
    """An owner's tier-3 score: its best domain's score."""
    return max((sims[name].score for name in owner.domains if name in sims), default=0.0)


def semantic_scores(
    fleet: FleetIndex,
    sims: dict[str, DomainSimilarity],
    lexical: dict[str, float],
    limits: Thresholds,
    *,
    tie_break: bool = False,
) -> dict[str, float]:
    """Every owner's tier-3 score (similarity plus the lexical boost: ``tie_boost`` when
    breaking a lexical tie, ``lexical_boost`` otherwise) and the background's."""
    weight = limits.tie_boost if tie_break else limits.lexical_boost
    scores: dict[str, float] = {}
    for owner in fleet.owners:
        boost = weight * min(lexical.get(owner.key, 0.0), limits.lexical_cap)
        scores[owner.key] = owner_similarity(owner, sims) + boost / limits.lexical_cap
    background = [
        sim.score
        for name, sim in sims.items()
        if name in fleet.domains and fleet.domains[name].kind == "background"
    ]
    if background:
        scores[BACKGROUND] = max(background)
    return scores


def semantic_verdict(
    fleet: FleetIndex, scores: dict[str, float], after: Verdict, limits: Thresholds
) -> Verdict:
    """Tier 3's decision over ``scores``; ``after`` is the lexical verdict that led here."""
    owners = {owner.key: owner for owner in fleet.owners}
    contest = list(scores)
    tie_break = after.leader is not None and len(after.contenders) > 1
    if tie_break:
        contest = [key for key in after.contenders if key in scores]
    contest.sort(key=lambda key: (-scores[key], key))
    if not contest:
        return Verdict(False, "nothing to compare with")
    winner = contest[0]
    best = scores[winner]
    owner = owners.get(winner)
    if owner is None or owner.specialist is None:
        what = "everyday requests" if winner == BACKGROUND else f"'{winner.split(':', 1)[-1]}'"
        return Verdict(False, f"closest to {what} ({best:.2f}), which no specialist serves")

    def shares(key: str) -> bool:
        other = owners.get(key)
        return other is not None and bool(set(other.domains) & set(owner.domains))

    # Specialists compete on score alone; the base model's side (the background and the
    # domains no specialist serves) must be beaten by a margin.
    outside = [key for key in contest[1:] if not shares(key) and not _routable(owners, key)]
    if not tie_break:
        if best < limits.embedding_min:
            return Verdict(
                False, f"no specialist is close enough (best: {winner} {best:.2f})", winner
            )
        margin = limits.everyday_margin if after.everyday else limits.embedding_margin
        if outside and best - scores[outside[0]] < margin:
            runner = outside[0]
            what = "everyday requests" if runner == BACKGROUND else f"'{runner.split(':', 1)[-1]}'"
            return Verdict(
                False,
                f"{winner} ({best:.2f}) is hardly closer than {what} ({scores[runner]:.2f})",
                winner,
            )
    candidates = tuple(
        (key, scores[key] / best if best > 0 else 1.0)
        for key in sorted(scores, key=lambda key: (-scores[key], key))
        if (key == winner or shares(key))
        and owners[key].specialist is not None
        and scores[key] >= limits.candidate_ratio * best
    )
    return Verdict(True, "", leader=winner, candidates=candidates)


def _routable(owners: dict[str, Owner], key: str) -> bool:
    owner = owners.get(key)
    return owner is not None and owner.specialist is not None
