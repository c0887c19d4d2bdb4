"""One domain of the catalogue as it is written (:mod:`registry.dispatch.domains` holds them).

A module of its own so that the catalogue's data (``domains/``) and its parser
(:mod:`registry.dispatch.catalogue`) both import it and not each other. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: ``topic``: routable; ``corroboration``: general programming words, only to confirm that an
#: ambiguous keyword is meant technically; ``background``: everyday requests, tier 3 only.
DomainKind = Literal["topic", "corroboration", "background"]


@dataclass(frozen=True)
class DomainSpec:
    """One domain of the catalogue (keyword strings use the notation of the module doc)."""

    name: str
    aliases: tuple[str, ...] = ()
    decisive: str = ""
    strong: str = ""
    weak: str = ""
    files: str = ""
    exemplars: tuple[str, ...] = ()
    #: Domains whose specialist may take this domain's tasks when none serves it directly.
    related: tuple[tuple[str, float], ...] = ()
    kind: DomainKind = "topic"
