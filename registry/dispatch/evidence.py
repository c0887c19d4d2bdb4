"""Tiers 1 and 2 together: what a task's words and files say about each domain and owner.

Owns :func:`gather` (tokenize, match keywords and files, add up the evidence per domain) and
:func:`weigh` (add up the evidence per owner, with the affinity of adopted domains). It also
decides whether an owner's evidence is *confirmed*: a keyword with an everyday sense
(``python``, ``markdown``, ``docker``, ``proof``) counts as a technical signal only next to
another technical term, a file, or code. A deliverable cue (:mod:`registry.dispatch.intent`:
"write a README for …") counts as keyword evidence of its domain and marks the owners of that
domain (:attr:`OwnerEvidence.deliverable`). A word the request explicitly declines ("the idea
only, no equations please", "explain it without the math") is not evidence for its domain.
Imports only the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from registry.dispatch.files import FileHit
from registry.dispatch.fleet import FleetIndex, Owner
from registry.dispatch.intent import Deliverable, find_deliverable
from registry.dispatch.keywords import KeywordHit
from registry.dispatch.records import Task
from registry.dispatch.scoring import saturate
from registry.dispatch.tokens import Tokens, tokenize

#: The lexical tiers read at most this much of an objective (linear time either way).
MAX_LEXICAL_CHARS = 200_000
#: An owner's own file or unambiguous keyword at least this heavy confirms its evidence.
CONFIRMING_WEIGHT = 0.5
#: Another domain's keyword at least this heavy corroborates an ambiguous one.
CORROBORATING_WEIGHT = 0.6
#: A declined word: "no"/"without" (+ "the"/"any") + one word that ends the clause or is
#: followed by "please" ("no equations please", "without the math."); "No CUDA GPUs are
#: available" and "no such file" are statements, not declined words.
_DECLINED = re.compile(
    r"\b(?:no|without)\s+(?:the\s+|any\s+)?[a-z][\w+#-]*(?=\s*(?:[.,;!?)]|$|please\b))",
    re.IGNORECASE | re.MULTILINE,
)


@dataclass(frozen=True)
class Evidence:
    """Everything tiers 1 and 2 found in one task."""

    tokens: Tokens
    keyword_hits: tuple[KeywordHit, ...]
    file_hits: tuple[FileHit, ...]
    keyword: dict[str, float]
    files: dict[str, float]
    total: dict[str, float]
    #: what a request verb asks to be produced, when it is a domain's deliverable.
    deliverable: Deliverable | None = None


@dataclass(frozen=True)
class OwnerEvidence:
    """One owner's share of the evidence."""

    owner: Owner
    strength: float
    keyword: float
    files: float
    matched: frozenset[str]
    confirmed: bool
    #: the owner answers for the task's deliverable (``Evidence.deliverable``).
    deliverable: bool = False
    #: the domains that the owner's matched domains outrank (``DomainSpec.outranks``).
    outranks: frozenset[str] = frozenset()
    #: the matched domain with the most evidence (what the owner's evidence is mostly about).
    dominant: str = ""
    #: some of the owner's words have an everyday sense (``~docs``, ``~pipeline``, ``~bash``).
    everyday_words: bool = False


def _per_domain(weights: Iterable[tuple[str, float]]) -> dict[str, float]:
    grouped: dict[str, list[float]] = {}
    for domain, weight in weights:
        grouped.setdefault(domain, []).append(weight)
    return {domain: saturate(values) for domain, values in grouped.items()}


def without_declined(text: str) -> str:
    """``text`` without the words it declines ("no equations please")."""
    return _DECLINED.sub(" ", text)


def gather(fleet: FleetIndex, task: Task) -> Evidence:
    """Tokenize the task and collect its keyword and file evidence per domain."""
    tokens = tokenize(without_declined(task.objective[:MAX_LEXICAL_CHARS]))
    keyword_hits = tuple(fleet.lexicon.match(tokens))
    file_hits = tuple(fleet.files.match(task.context_refs, tokens.paths))
    routable = fleet.routable_domains
    deliverable = find_deliverable(
        task.objective, fleet.deliverables, fleet.files, fleet.deliverable_domains
    )
    if deliverable is not None and deliverable.code:
        # "write a script that reads every README": the README is the subject, not the work.
        yielding = fleet.code_yielding
        keyword_hits = tuple(hit for hit in keyword_hits if hit.domain not in yielding)
        file_hits = tuple(hit for hit in file_hits if hit.domain not in yielding)
        routable = routable - yielding
    elif (
        deliverable is not None
        and deliverable.domain in routable
        and (not deliverable.ambiguous or _technical(deliverable.domain, keyword_hits, file_hits))
    ):
        keyword_hits += (KeywordHit(deliverable.as_term()),)
    else:
        deliverable = None  # "document my expenses": an everyday verb, nothing technical
    kw = [(hit.domain, hit.weight) for hit in keyword_hits if hit.domain in routable]
    fl = [(hit.domain, hit.weight) for hit in file_hits if hit.domain in routable]
    return Evidence(
        tokens=tokens,
        keyword_hits=keyword_hits,
        file_hits=file_hits,
        keyword=_per_domain(kw),
        files=_per_domain(fl),
        total=_per_domain(kw + fl),
        deliverable=deliverable,
    )


def _technical(domain: str, words: Iterable[KeywordHit], files: Iterable[FileHit]) -> bool:
    """Whether something technical outside ``domain`` stands next to an ambiguous cue."""
    return any(files) or any(
        hit.domain != domain
        and not hit.term.ambiguous
        and (hit.weight >= CORROBORATING_WEIGHT or hit.domain == "programming")
        for hit in words
    )


def _strength(owner: Owner, evidence: dict[str, float]) -> float:
    return saturate(
        evidence[name] * factor for name, factor in owner.domains.items() if name in evidence
    )


def _confirmed(owner: Owner, evidence: Evidence) -> bool:
    own_hits = [hit for hit in evidence.keyword_hits if hit.domain in owner.domains]
    if any(
        hit.domain in owner.domains and hit.weight >= CONFIRMING_WEIGHT
        for hit in evidence.file_hits
    ):
        return True
    if any(not hit.term.ambiguous and hit.weight >= CONFIRMING_WEIGHT for hit in own_hits):
        return True
    ambiguous = {hit.term.text for hit in own_hits if hit.term.ambiguous}
    if not ambiguous:
        return False
    if evidence.tokens.code_like or len(ambiguous) > 1:
        return True  # code, or two such words together ("docker container")
    return any(
        hit.term.text not in ambiguous
        and not hit.term.ambiguous
        and (hit.weight >= CORROBORATING_WEIGHT or hit.domain == "programming")
        for hit in evidence.keyword_hits
    )


def weigh(fleet: FleetIndex, evidence: Evidence) -> list[OwnerEvidence]:
    """Every owner with evidence, strongest first (ties: specialists first, then by key)."""
    weighed: list[OwnerEvidence] = []
    involved = {
        owner.key: owner
        for name in evidence.total
        for owner in fleet.owners_by_domain.get(name, ())
    }
    for owner in involved.values():
        strength = _strength(owner, evidence.total)
        if strength <= 0:
            continue
        matched = frozenset(name for name in owner.domains if name in evidence.total)
        weighed.append(
            OwnerEvidence(
                owner=owner,
                strength=strength,
                keyword=_strength(owner, evidence.keyword),
                files=_strength(owner, evidence.files),
                matched=matched,
                confirmed=_confirmed(owner, evidence),
                deliverable=evidence.deliverable is not None
                and evidence.deliverable.domain in owner.domains,
                outranks=frozenset(
                    other for name in matched for other in fleet.domains[name].outranks
                ),
                dominant=max(
                    sorted(matched), key=lambda name: evidence.total[name] * owner.domains[name]
                ),
                everyday_words=any(
                    hit.term.ambiguous and hit.domain in owner.domains
                    for hit in evidence.keyword_hits
                ),
            )
        )
    weighed.sort(key=lambda item: (-item.strength, not item.owner.routable, item.owner.key))
    return weighed
