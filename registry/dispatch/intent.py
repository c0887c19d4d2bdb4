"""Deliverable cues: what a request asks to be produced ("the deliverable decides").

A request such as "write a README for my CUDA library", "add JSDoc comments to this
TypeScript module", "create a Dockerfile for the Flask app" or "derive the gradient before I
write the kernel" names its *subject* (CUDA, TypeScript, Flask, a kernel) and its
*deliverable* (a README, doc comments, a Dockerfile, a derivation). The labelling rules give
the deliverable precedence: documentation artefacts are documentation work, deployment and CI
configuration is infrastructure work, a proof or derivation is mathematics, whatever they are
about.

Owns :func:`find_deliverable`: it reads the clauses of the objective that open with a request
verb (``write``, ``add``, ``document``, ``derive``..., after at most a few polite or auxiliary
words: "could you please write", "I'd like to add"; or a question that asks for a value:
"what's the running time of …"), and looks for a deliverable term of a
domain (:attr:`~registry.dispatch.domain_spec.DomainSpec.deliverables`) or a deliverable file
(``README.md``, ``Dockerfile``) as the head of the verb's object: the words after the verb up
to the first preposition or conjunction ("write tests *for* the docstring parser" delivers
tests, not docstrings), of which the last ones name the deliverable ("JSDoc comments", "API
reference pages"; "a comments section" and "a README parser" deliver no documentation). A
verb that is itself a deliverable (``document``, ``derive``, ``prove``) counts only in the verb
position ("write a document about my trip" delivers no documentation). An object whose head is
a piece of code ("a Python script", "a README parser") is a *code* deliverable: the domains
that yield to code (documentation, markup) are then its subject, not its work.

Linear in the objective (at most :data:`MAX_INTENT_CHARS` characters and
:data:`MAX_CLAUSES` clauses are read). Imports only the standard library and this package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from registry.dispatch.catalogue import Term
from registry.dispatch.files import FileMatcher
from registry.dispatch.keywords import Lexicon
from registry.dispatch.tokens import split_words, tokenize

#: Only the head of an objective is read for deliverable cues (the request is stated there).
MAX_INTENT_CHARS = 2_000
#: At most this many clauses are examined.
MAX_CLAUSES = 12
#: At most this many polite or auxiliary words may precede the verb of a request.
MAX_LEAD_WORDS = 6
#: The verb's object is read for at most this many words.
OBJECT_WORDS = 6
#: The head of the object (its last words) is matched for up to this many words.
HEAD_WORDS = 4
#: A deliverable file in the object counts when its rule is at least this heavy.
FILE_MIN_WEIGHT = 1.0
#: The weight of a deliverable cue as keyword evidence of its domain.
DELIVERABLE_WEIGHT = 1.2

#: Verbs that ask for something to be produced or changed.
_REQUEST_VERBS_TEXT = """
    write rewrite draft add create generate produce prepare compose author update improve
    extend expand finish complete fix review edit polish restructure redo make build set
    give need want document derive prove deduce analyse analyze estimate work calculate
    compute determine find turn convert sketch outline put
    """
REQUEST_VERBS = frozenset(_REQUEST_VERBS_TEXT.split())
#: Words that may precede a request's verb ("could you please", "I'd like to", "help me").
_LEAD_WORDS_TEXT = """
    please pls plz kindly can could would will you u help me us i we d like to also now then
    and so just quickly hey hi ok okay first next finally let s lets go ahead someone anyone
    how do does should shall what is the best way a good quick
    """
LEAD_WORDS = frozenset(_LEAD_WORDS_TEXT.split())
#: Words that end a verb's object ("write tests *for* the parser").
_OBJECT_STOPS_TEXT = """
    for of about on that which who to in into with from so because when where while using by
    via if but or and than as like after before since until
    """
OBJECT_STOPS = frozenset(_OBJECT_STOPS_TEXT.split())

#: Heads of an object that make the deliverable code, of whatever language ("write a Python
#: script that …", "write a README parser").
_CODE_DELIVERABLES_TEXT = """
    script scripts function functions program class parser regex component cli tool app
    application endpoint method helper library package plugin extension bot scraper converter
    generator linter formatter
    """
CODE_DELIVERABLES = frozenset(_CODE_DELIVERABLES_TEXT.split())
#: The question forms :func:`_asks_what` accepts in the verb position.
QUESTION_FORMS = frozenset(("what's", "whats", "what\u2019s", "is", "are"))
#: Parts of a deliverable: "the README section", "the changelog entry", "a runbook chapter"
#: deliver the README, the changelog, the runbook ("a comments section" is a feature of a page,
#: no documentation).
PART_NOUNS = frozenset(
    ("section", "sections", "chapter", "chapters", "paragraph", "paragraphs", "part", "entry")
)
_PUNCTUATION = ".,;:!?\"'`()"
_CLAUSE = re.compile(r"(?<=[.!?;:])\s+|\n+")
_LEAD_CHUNK = re.compile(r"[^\w+#]+")


@dataclass(frozen=True)
class Deliverable:
    """A deliverable cue: the verb, what it asks for, and the domain that owns it."""

    verb: str
    term: str
    domain: str
    #: the deliverable term has an everyday sense (``~document``): it needs corroboration.
    ambiguous: bool = False

    @property
    def code(self) -> bool:
        """The request asks for code (a script, a function, a parser), of no one domain."""
        return not self.domain

    def as_term(self) -> Term:
        """The cue as a keyword term of its domain (it is counted as keyword evidence)."""
        text = f"{self.verb} -> {self.term}"
        return Term(text, (text,), "phrase", self.domain, DELIVERABLE_WEIGHT, self.ambiguous)


def find_deliverable(
    text: str, lexicon: Lexicon, files: FileMatcher, domains: frozenset[str]
) -> Deliverable | None:
    """The first deliverable a request verb of ``text`` asks for, or ``None``.

    ``lexicon`` holds the deliverable terms; ``files`` and ``domains`` let a deliverable file
    (``README.md``, ``Dockerfile``) in the verb's object count for its domain.
    """
    if not domains:
        return None
    for clause in _CLAUSE.split(text[:MAX_INTENT_CHARS], maxsplit=MAX_CLAUSES)[:MAX_CLAUSES]:
        found = _in_clause(clause, lexicon, files, domains)
        if found is not None:
            return found
    return None


def _asks_what(words: list[str], previous: str) -> bool:
    """``what's`` / ``what is`` / ``what are``: a question that asks for a value (the running
    time, the expected value), which counts like a request verb."""
    if words in (["what", "s"], ["whats"]):
        return True
    return len(words) == 1 and words[0] in ("is", "are") and previous.lower() == "what"


def _in_clause(
    clause: str, lexicon: Lexicon, files: FileMatcher, domains: frozenset[str]
) -> Deliverable | None:
    chunks = clause.split(None, MAX_LEAD_WORDS + OBJECT_WORDS + 1)
    verb_at = None
    for index, chunk in enumerate(chunks[: MAX_LEAD_WORDS + 1]):
        words = [w for w in _LEAD_CHUNK.split(chunk.lower()) if w]
        if not words:
            continue
        if words[0] in REQUEST_VERBS and len(words) == 1:
            verb_at = index
            break
        if _asks_what(words, chunks[index - 1] if index else ""):
            verb_at = index  # "what's the running time of …" asks for the analysis
            break
        if not all(word in LEAD_WORDS for word in words):
            return None
    if verb_at is None:
        return None
    verb = chunks[verb_at].lower().strip(_PUNCTUATION)
    if verb in QUESTION_FORMS:
        verb = "what is"  # not itself a deliverable term
    obj: list[str] = []
    for chunk in chunks[verb_at + 1 : verb_at + 1 + OBJECT_WORDS]:
        bare = chunk.lower().strip(_PUNCTUATION)
        if bare in OBJECT_STOPS or bare in REQUEST_VERBS:
            break
        obj.append(chunk)
        if chunk.rstrip().endswith((",", ";", ":", "(", ")")):
            break
    # The verb itself may be the deliverable ("document the API", "derive the gradient").
    for hit in lexicon.match(tokenize(verb)):
        return Deliverable(verb, hit.term.text, hit.domain, hit.term.ambiguous)
    if not obj:
        return None
    # The deliverable is the head of the object, its last words: "JSDoc comments", "a README",
    # "API reference pages"; not a modifier ("a comments section", "a README parser").
    words = [chunk.lower().strip(_PUNCTUATION) for chunk in obj]
    if len(words) > 1 and words[-1] in PART_NOUNS and words[-2] not in ("comment", "comments"):
        words = words[:-1]  # "the README section": a part of the deliverable is the deliverable
    best: Deliverable | None = None
    for size in range(1, min(len(words), HEAD_WORDS) + 1):
        head = " ".join(words[-size:])
        for hit in lexicon.match(tokenize(head)):
            term = hit.term
            if term.text in REQUEST_VERBS or (term.text != head and term.key != split_words(head)):
                continue
            if best is None or term.ambiguous <= best.ambiguous:
                best = Deliverable(verb, term.text, hit.domain, term.ambiguous)
    if best is None:
        for file_hit in files.match((), tokenize(words[-1]).paths):
            if file_hit.domain in domains and file_hit.weight >= FILE_MIN_WEIGHT:
                return Deliverable(verb, file_hit.path, file_hit.domain)
        if words[-1] in CODE_DELIVERABLES:
            return Deliverable(verb, words[-1], "")
    return best
