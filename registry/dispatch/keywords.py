"""Tier 1: keyword matching on word and token boundaries.

Owns :class:`Lexicon`, the lookup tables compiled from the terms of every domain in play, and
its :meth:`Lexicon.match` over a tokenized objective: single words, compounds (``c++``,
``ci/cd``, ``node.js``, ``std::vector``), phrases of up to :data:`MAX_PHRASE_WORDS` words and
word prefixes (``cuda*`` for ``cudaMemcpyAsync``). Matching is a dictionary lookup per token
and n-gram, so it is linear in the length of the objective and independent of the number of
keywords. Each distinct term counts once per domain, however often it occurs, and a word that a
domain's term matched whole does not count again through one of its prefixes.

Imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from registry.dispatch.catalogue import Term
from registry.dispatch.tokens import Tokens

#: Longest phrase looked up (words).
MAX_PHRASE_WORDS = 4
#: Length of the index key of prefix terms (shorter prefixes are refused).
_PREFIX_KEY = 3
#: At most this many distinct hits are kept per task (a 1 MB objective stays cheap).
MAX_HITS = 512


@dataclass(frozen=True)
class KeywordHit:
    """A term found in the objective."""

    term: Term

    @property
    def domain(self) -> str:
        return self.term.domain

    @property
    def weight(self) -> float:
        return self.term.weight


class Lexicon:
    """Lookup tables for a set of terms; immutable after construction, safe to share."""

    def __init__(self, terms: Iterable[Term]) -> None:
        self._words: dict[str, list[Term]] = {}
        self._compounds: dict[str, list[Term]] = {}
        self._phrases: dict[tuple[str, ...], list[Term]] = {}
        self._phrase_starts: set[str] = set()
        self._prefixes: dict[str, list[Term]] = {}
        self._size = 0
        for term in terms:
            self._add(term)

    def __len__(self) -> int:
        return self._size

    def _add(self, term: Term) -> None:
        self._size += 1
        if term.kind == "word":
            self._words.setdefault(term.key[0], []).append(term)
        elif term.kind == "compound":
            self._compounds.setdefault(term.key[0], []).append(term)
        elif term.kind == "phrase":
            key = term.key[:MAX_PHRASE_WORDS]
            self._phrases.setdefault(key, []).append(term)
            self._phrase_starts.add(key[0])
        else:
            prefix = term.key[0]
            if len(prefix) < _PREFIX_KEY:
                self._words.setdefault(prefix, []).append(term)
            else:
                self._prefixes.setdefault(prefix[:_PREFIX_KEY], []).append(term)

    def match(self, tokens: Tokens) -> list[KeywordHit]:
        """The distinct terms found in ``tokens``, in order of first occurrence."""
        hits: list[KeywordHit] = []
        seen: set[tuple[str, str]] = set()

        def take(found: list[Term] | None) -> None:
            if not found:
                return
            for term in found:
                key = (term.domain, term.text)
                if key not in seen and len(hits) < MAX_HITS:
                    seen.add(key)
                    hits.append(KeywordHit(term))

        compounds, singles, prefixes = self._compounds, self._words, self._prefixes
        for compound in tokens.compounds:
            if compound in compounds:
                take(compounds[compound])
        words = tokens.words
        for index, word in enumerate(words):
            whole = singles.get(word)
            if whole:
                take(whole)
            if prefixes and len(word) >= _PREFIX_KEY:
                candidates = prefixes.get(word[:_PREFIX_KEY])
                if candidates:
                    # A word that a domain's own term matched whole is not counted again
                    # by that domain's prefix (``cuda`` is not also ``cuda*``).
                    named = {term.domain for term in whole} if whole else set()
                    take(
                        [
                            term
                            for term in candidates
                            if word.startswith(term.key[0]) and term.domain not in named
                        ]
                    )
            if word in self._phrase_starts:
                for length in range(2, MAX_PHRASE_WORDS + 1):
                    if index + length > len(words):
                        break
                    take(self._phrases.get(tuple(words[index : index + length])))
        return hits
