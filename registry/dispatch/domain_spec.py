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

#: What a programming language's domain outranks: the markup its code handles, and the generic
#: activities (testing, debugging) that the language decides ("unit tests for our C ring
#: buffer" is C work; labelling rule 4: the language of the code to change decides).
LANGUAGE_OUTRANKS = ("markdown", "testing", "debugging")


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
    #: Artefacts this domain's work delivers (``readme``, ``dockerfile``, ``derive``): when a
    #: request's verb asks for one (``write a README for …``), the domain decides
    #: (:mod:`registry.dispatch.intent`). Keyword notation; a request verb itself
    #: (``document``, ``derive``) counts only as the verb.
    deliverables: str = ""
    #: Domains this one outranks when both are in contention: the labelling rules' "GPU work
    #: is cuda even when written in C++", "pandas and SQL are data even when called from
    #: Python". Used only to settle a lexical tie (:func:`registry.dispatch.verdicts.
    #: lexical_verdict`).
    outranks: tuple[str, ...] = ()
    #: When a request asks for code ("write a script that reads every README"), this domain's
    #: words name the subject, not the work: they are not evidence then (documentation, markup).
    yields_to_code: bool = False
    #: Domains whose specialist may take this domain's tasks when none serves it directly.
    related: tuple[tuple[str, float], ...] = ()
    kind: DomainKind = "topic"
