"""The fleet as the engine sees it: which owner answers for which domain.

Owns :func:`build_fleet`, which turns the catalogue and the registered specialists into a
:class:`FleetIndex`: every domain in play (catalogue domains, domains built from unknown names,
each specialist's own keywords and exemplars as a private domain ``@name``), the owners (each
specialist, plus one *virtual* owner per catalogue topic that no specialist serves, so that a
Kotlin question is recognised as such and falls back instead of going to the nearest
specialist), the keyword lexicon, the file matcher and the exemplar rows of tier 3.

Deliverable terms (``readme``, ``dockerfile``, ``derive``) go into a lexicon of their own,
read by :mod:`registry.dispatch.intent` on the object of a request's verb only.

A catalogue domain that no specialist serves but that names ``related`` domains (Terraform ->
docker, k8s, ci/cd) is *adopted* by the specialist of the first related domain the fleet has,
at the given affinity. Imports only the standard library.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from registry.dispatch.catalogue import Catalogue, Domain, custom_domain, split_keywords
from registry.dispatch.errors import InvalidFleetError
from registry.dispatch.files import FileMatcher
from registry.dispatch.keywords import Lexicon
from registry.dispatch.records import Specialist

logger = logging.getLogger(__name__)

#: Prefix of the key of a virtual owner (a domain no specialist serves).
VIRTUAL_PREFIX = "domain:"


@dataclass(frozen=True)
class Owner:
    """Who answers for a set of domains: a specialist, or ``None`` for a virtual owner."""

    key: str
    specialist: Specialist | None
    domains: dict[str, float]

    @property
    def routable(self) -> bool:
        return self.specialist is not None


@dataclass(frozen=True)
class FleetIndex:
    """Everything :meth:`Dispatcher.decide` needs about the fleet; immutable once built."""

    specialists: tuple[Specialist, ...]
    domains: dict[str, Domain]
    owners: tuple[Owner, ...]
    lexicon: Lexicon
    files: FileMatcher
    exemplar_rows: tuple[tuple[str, str], ...]
    signature: tuple[object, ...]
    #: the deliverable terms of every domain in play (see :mod:`registry.dispatch.intent`).
    deliverables: Lexicon = field(default_factory=lambda: Lexicon(()))
    #: domain -> the owners that answer for it (derived from ``owners``).
    owners_by_domain: dict[str, tuple[Owner, ...]] = field(default_factory=dict)
    #: domains whose evidence counts (every kind but ``corroboration``).
    routable_domains: frozenset[str] = frozenset()
    #: topic domains that name deliverables (derived from ``domains``).
    deliverable_domains: frozenset[str] = frozenset()
    #: domains whose words are only the subject when a request asks for code (derived).
    code_yielding: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        by_domain: dict[str, list[Owner]] = {}
        for owner in self.owners:
            for name in owner.domains:
                by_domain.setdefault(name, []).append(owner)
        object.__setattr__(self, "owners_by_domain", {k: tuple(v) for k, v in by_domain.items()})
        object.__setattr__(
            self,
            "routable_domains",
            frozenset(n for n, d in self.domains.items() if d.kind != "corroboration"),
        )
        object.__setattr__(
            self,
            "deliverable_domains",
            frozenset(n for n, d in self.domains.items() if d.kind == "topic" and d.deliverables),
        )
        object.__setattr__(
            self, "code_yielding", frozenset(n for n, d in self.domains.items() if d.yields_to_code)
        )

    def owner_of(self, key: str) -> Owner:
        return next(owner for owner in self.owners if owner.key == key)

    def with_statistics(self, specialists: Sequence[Specialist]) -> FleetIndex:
        """The same index with the specialists' statistics replaced (same routing inputs)."""
        by_name = {spec.name: spec for spec in specialists}
        owners = tuple(
            Owner(o.key, by_name[o.key], o.domains) if o.specialist is not None else o
            for o in self.owners
        )
        return FleetIndex(
            tuple(specialists),
            self.domains,
            owners,
            self.lexicon,
            self.files,
            self.exemplar_rows,
            self.signature,
            self.deliverables,
        )


def routing_signature(specialists: Sequence[Specialist]) -> tuple[object, ...]:
    """What of the fleet shapes routing (not the statistics): a cache key for the index."""
    return tuple(
        (spec.name, spec.domains, spec.keywords, spec.exemplars)
        for spec in sorted(specialists, key=lambda s: s.name)
    )


def validate(specialists: Sequence[Specialist]) -> list[Specialist]:
    """Reject duplicate or empty names; skip (with a warning) specialists with nothing to
    route on (no domain, keyword or exemplar)."""
    seen: set[str] = set()
    kept: list[Specialist] = []
    for spec in specialists:
        if not spec.name or not spec.name.strip():
            raise InvalidFleetError("a specialist has an empty name")
        if spec.name in seen:
            raise InvalidFleetError(f"specialist {spec.name!r} appears twice in the fleet")
        seen.add(spec.name)
        if not any(d.strip() for d in spec.domains) and not spec.keywords and not spec.exemplars:
            logger.warning(
                "specialist %r has no domains, keywords or exemplars: skipped", spec.name
            )
            continue
        kept.append(spec)
    return kept


def build_fleet(catalogue: Catalogue, specialists: Sequence[Specialist]) -> FleetIndex:
    """Compile the routing tables for ``specialists`` on top of ``catalogue``."""
    fleet = validate(specialists)
    domains: dict[str, Domain] = {domain.name: domain for domain in catalogue.domains}
    owned: dict[str, list[str]] = {}
    owner_domains: dict[str, dict[str, float]] = {}
    for spec in fleet:
        mine: dict[str, float] = {}
        for raw in spec.domains:
            if not raw.strip():
                continue
            name = catalogue.resolve(raw)
            if name is None:
                custom = custom_domain(raw)
                name = custom.name
                if name not in domains:
                    domains[name] = custom
            mine[name] = 1.0
        if spec.keywords or spec.exemplars:
            private = _private_domain(spec)
            domains[private.name] = private
            mine[private.name] = 1.0
        owner_domains[spec.name] = mine
        for name in mine:
            owned.setdefault(name, []).append(spec.name)
    _adopt(domains, owned, owner_domains)
    owners = [Owner(spec.name, spec, owner_domains[spec.name]) for spec in fleet]
    for name, domain in domains.items():
        if domain.kind == "topic" and name not in owned:
            owners.append(Owner(VIRTUAL_PREFIX + name, None, {name: 1.0}))
    terms = [term for domain in domains.values() for term in domain.terms]
    rules = [rule for domain in domains.values() for rule in domain.files]
    rows = tuple(
        (domain.name, text)
        for domain in domains.values()
        if domain.kind != "corroboration"
        for text in (domain.exemplars or (domain.name,))
    )
    return FleetIndex(
        specialists=tuple(fleet),
        domains=domains,
        owners=tuple(owners),
        lexicon=Lexicon(terms),
        files=FileMatcher(rules),
        exemplar_rows=rows,
        signature=routing_signature(fleet),
        deliverables=Lexicon(
            term
            for domain in domains.values()
            if domain.kind == "topic"
            for term in domain.deliverables
        ),
    )


def _private_domain(spec: Specialist) -> Domain:
    name = "@" + spec.name
    terms, files = split_keywords(spec.keywords, name)
    return Domain(name, (), tuple(terms), tuple(files), tuple(spec.exemplars))


def _adopt(
    domains: dict[str, Domain],
    owned: dict[str, list[str]],
    owner_domains: dict[str, dict[str, float]],
) -> None:
    """Give each unserved catalogue domain to the specialists of its first served relative."""
    for name, domain in domains.items():
        if name in owned or domain.kind != "topic":
            continue
        for related, affinity in domain.related:
            adopters = owned.get(related)
            if adopters:
                for adopter in adopters:
                    owner_domains[adopter][name] = affinity
                owned[name] = list(adopters)
                break


__all__ = ["VIRTUAL_PREFIX", "FleetIndex", "Owner", "build_fleet", "routing_signature"]
