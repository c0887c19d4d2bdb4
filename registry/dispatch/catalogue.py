"""The domain catalogue: what each domain's keywords, files and exemplar requests are.

Owns the parsing of a :class:`~registry.dispatch.domain_spec.DomainSpec`'s compact keyword and
file notation into :class:`Term` and :class:`FileRule`
entries, name resolution (``"K8s"`` -> ``k8s``, ``"HTML/CSS"`` -> ``html/css``) and the
shipped :func:`default_catalogue`. Imports only the standard library.

Notation (``|``-separated, lowercase):

- keywords: ``word``, ``two words``, ``c++``/``ci/cd`` (kept whole), ``cuda*`` (word prefix),
  ``kernel(s)``/``compile(r,d)`` (all forms), ``~python`` (ambiguous: has an everyday
  sense, counts only with corroboration), ``term=1.4`` (explicit weight);
- files: ``.py`` (extension), ``dockerfile``/``package.json`` (file name), ``test_*.py``
  (pattern on the file name), ``tests/`` or ``.github/workflows/`` (a directory on the path),
  each with an optional ``=weight``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from registry.dispatch.domain_spec import DomainKind, DomainSpec
from registry.dispatch.errors import InvalidConfigurationError
from registry.dispatch.tokens import split_words, tokenize

#: Weights of the keyword classes.
DECISIVE_WEIGHT = 1.6
STRONG_WEIGHT = 1.0
WEAK_WEIGHT = 0.35
#: Weight of a file rule without ``=weight``.
FILE_WEIGHT = 1.0

TermKind = Literal["word", "phrase", "compound", "prefix"]
FileKind = Literal["extension", "name", "pattern", "directory"]

_WEIGHT_SUFFIX = re.compile(r"^(.*?)=(\d+(?:\.\d+)?)$")
_SUFFIXES = re.compile(r"^(.*?)\(([a-z,]+)\)$")


@dataclass(frozen=True)
class Term:
    """A keyword: ``key`` is what the tokenizer's output is looked up with."""

    text: str
    key: tuple[str, ...]
    kind: TermKind
    domain: str
    weight: float
    ambiguous: bool = False


@dataclass(frozen=True)
class FileRule:
    """A file signal: an extension, a file name, a name pattern or a directory."""

    text: str
    kind: FileKind
    domain: str
    weight: float


@dataclass(frozen=True)
class Domain:
    """A parsed domain: its terms, file rules and exemplars."""

    name: str
    aliases: tuple[str, ...]
    terms: tuple[Term, ...]
    files: tuple[FileRule, ...]
    exemplars: tuple[str, ...]
    related: tuple[tuple[str, float], ...] = ()
    kind: DomainKind = "topic"
    deliverables: tuple[Term, ...] = ()
    outranks: frozenset[str] = frozenset()
    yields_to_code: bool = False


def normalize_name(name: str) -> str:
    """The lookup form of a domain name: lowercase words joined by single spaces, with
    ``/``, ``+`` and ``#`` kept (``" HTML / CSS "`` -> ``"html/css"``)."""
    text = re.sub(r"\s*/\s*", "/", name.strip().lower())
    text = re.sub(r"[\s_\-]+", " ", text)
    return text


def _split(notation: str) -> Iterator[str]:
    for item in notation.split("|"):
        item = " ".join(item.split())
        if item:
            yield item


def _weighted(item: str, default: float) -> tuple[str, float]:
    found = _WEIGHT_SUFFIX.match(item)
    if found:
        return found.group(1).strip(), float(found.group(2))
    return item, default


def parse_terms(notation: str, domain: str, default_weight: float) -> list[Term]:
    """Parse a keyword notation string into terms (see the module docstring)."""
    terms: list[Term] = []
    for raw in _split(notation):
        item, weight = _weighted(raw, default_weight)
        ambiguous = item.startswith("~")
        item = item.lstrip("~").strip()
        suffixed = _SUFFIXES.match(item)
        forms = [item]
        if suffixed:
            base = suffixed.group(1)
            forms = [base, *(base + suffix for suffix in suffixed.group(2).split(",") if suffix)]
        for form in forms:
            terms.append(_term(form, domain, weight, ambiguous, raw))
    return terms


def _term(form: str, domain: str, weight: float, ambiguous: bool, raw: str) -> Term:
    if not form:
        raise InvalidConfigurationError(f"empty keyword in domain {domain!r}: {raw!r}")
    text = form.lower()
    if text.endswith("*") and len(text) > 1:
        return Term(text, (text[:-1],), "prefix", domain, weight, ambiguous)
    words = split_words(text)
    if not words:
        raise InvalidConfigurationError(f"keyword without letters in {domain!r}: {raw!r}")
    if " " not in text and (len(words) > 1 or words[0] != text):
        if tokenize(text).compounds != (text,):
            raise InvalidConfigurationError(
                f"keyword {raw!r} of {domain!r} is never a whole token (see tokens.py)"
            )
        return Term(text, (text,), "compound", domain, weight, ambiguous)
    if len(words) == 1:
        return Term(text, words, "word", domain, weight, ambiguous)
    return Term(text, words, "phrase", domain, weight, ambiguous)


def parse_files(notation: str, domain: str) -> list[FileRule]:
    """Parse a file notation string into rules (see the module docstring)."""
    rules: list[FileRule] = []
    for raw in _split(notation):
        item, weight = _weighted(raw, FILE_WEIGHT)
        item = item.lower()
        kind: FileKind
        if item.endswith("/"):
            kind = "directory"
        elif "*" in item or "?" in item:
            kind = "pattern"
        elif item.startswith(".") and "." not in item[1:] and "/" not in item:
            kind = "extension"
        else:
            kind = "name"
        rules.append(FileRule(item, kind, domain, weight))
    return rules


def parse_domain(spec: DomainSpec) -> Domain:
    """Turn a :class:`DomainSpec` into a :class:`Domain`."""
    name = normalize_name(spec.name)
    terms = [
        *parse_terms(spec.decisive, name, DECISIVE_WEIGHT),
        *parse_terms(spec.strong, name, STRONG_WEIGHT),
        *parse_terms(spec.weak, name, WEAK_WEIGHT),
    ]
    aliases = tuple(normalize_name(alias) for alias in spec.aliases)
    return Domain(
        name=name,
        aliases=aliases,
        terms=tuple(terms),
        files=tuple(parse_files(spec.files, name)),
        exemplars=tuple(spec.exemplars),
        related=tuple((normalize_name(other), affinity) for other, affinity in spec.related),
        kind=spec.kind,
        deliverables=tuple(parse_terms(spec.deliverables, name, DECISIVE_WEIGHT)),
        outranks=frozenset(normalize_name(other) for other in spec.outranks),
        yields_to_code=spec.yields_to_code,
    )


@dataclass(frozen=True)
class Catalogue:
    """A set of domains with name resolution; immutable."""

    domains: tuple[Domain, ...]
    _index: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        index: dict[str, str] = {}
        for domain in self.domains:
            for key in (domain.name, *domain.aliases):
                owner = index.setdefault(key, domain.name)
                if owner != domain.name:
                    raise InvalidConfigurationError(
                        f"catalogue name {key!r} belongs to both {owner!r} and {domain.name!r}"
                    )
            for key in _loose_keys(domain.name, domain.aliases):
                index.setdefault(key, domain.name)
        object.__setattr__(self, "_index", index)

    @classmethod
    def from_specs(cls, specs: Iterable[DomainSpec]) -> Catalogue:
        return cls(tuple(parse_domain(spec) for spec in specs))

    def resolve(self, name: str) -> str | None:
        """The catalogue domain a registered domain name means, or ``None``."""
        key = normalize_name(name)
        found = self._index.get(key)
        if found is not None:
            return found
        for loose in _loose_keys(key, ()):
            found = self._index.get(loose)
            if found is not None:
                return found
        return None

    def get(self, name: str) -> Domain | None:
        resolved = self.resolve(name)
        if resolved is None:
            return None
        return next(domain for domain in self.domains if domain.name == resolved)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(domain.name for domain in self.domains)


def _loose_keys(name: str, aliases: Iterable[str]) -> Iterator[str]:
    """Spelling variants a user may register: without spaces or punctuation, singular."""
    for key in (name, *aliases):
        squashed = re.sub(r"[\s/\-_.]+", "", key)
        yield squashed
        for variant in (key, squashed):
            if variant.endswith("s") and len(variant) > 3:
                yield variant[:-1]
            else:
                yield variant + "s"


def custom_domain(name: str, keywords: Iterable[str] = (), exemplars: Iterable[str] = ()) -> Domain:
    """A domain outside the catalogue, built from its name and a specialist's own additions.

    The name itself is a strong keyword (``"quantum computing"``), its single words are weak;
    keywords that look like files (``.tf``, ``*.proto``, ``Jenkinsfile``) become file rules.
    """
    key = normalize_name(name)
    words = split_words(key)
    terms = [*parse_terms(key, key, STRONG_WEIGHT)]
    if len(words) > 1:
        terms += [_term(word, key, WEAK_WEIGHT, False, name) for word in words if len(word) > 2]
    extra_terms, extra_files = split_keywords(keywords, key)
    return Domain(
        name=key,
        aliases=(),
        terms=tuple(terms + extra_terms),
        files=tuple(extra_files),
        exemplars=tuple(exemplars),
    )


def split_keywords(keywords: Iterable[str], domain: str) -> tuple[list[Term], list[FileRule]]:
    """A specialist's own keywords: strong terms, or file rules for file-looking ones."""
    terms: list[Term] = []
    files: list[FileRule] = []
    for keyword in keywords:
        text = keyword.strip().lower()
        if not text:
            continue
        if text.startswith(("*.", ".")) or text.endswith("/"):
            files += parse_files(text.lstrip("*") if text.startswith("*.") else text, domain)
        else:
            terms += parse_terms(text.replace("|", " "), domain, STRONG_WEIGHT)
    return terms, files


def default_catalogue() -> Catalogue:
    """The catalogue that ships with the project (built on every call; cache it yourself)."""
    from registry.dispatch.domains import ALL_DOMAINS

    return Catalogue.from_specs(ALL_DOMAINS)
