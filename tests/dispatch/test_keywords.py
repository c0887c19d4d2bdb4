"""Tier 1: keyword lookup on word and token boundaries."""

from __future__ import annotations

from registry.dispatch.catalogue import Catalogue, parse_terms
from registry.dispatch.keywords import Lexicon
from registry.dispatch.tokens import tokenize


def _lexicon() -> Lexicon:
    return Lexicon(
        [
            *parse_terms("c++|cpp|std", "c++", 1.0),
            *parse_terms("~c|in c|c program", "c", 1.0),
            *parse_terms("python|kernel(s)=0.35", "python", 1.0),
            *parse_terms("ci/cd|github actions", "ci/cd", 1.0),
            *parse_terms("cuda*|__global__", "cuda", 1.0),
        ]
    )


def _found(text: str) -> set[tuple[str, str]]:
    return {(hit.domain, hit.term.text) for hit in _lexicon().match(tokenize(text))}


def test_cpp_is_not_c_and_c_is_not_cpp() -> None:
    assert _found("a C++ question") == {("c++", "c++")}
    assert ("c", "in c") in _found("written in C")
    assert not any(domain == "c++" for domain, _ in _found("written in C"))


def test_words_match_whole_words_only() -> None:
    assert _found("pythonic code") == set()  # "python" is not a prefix term
    assert _found("three kernels") == {("python", "kernels")}
    assert _found("scipy") == set()


def test_compounds_phrases_and_prefixes() -> None:
    assert ("ci/cd", "ci/cd") in _found("our CI/CD pipeline")
    assert ("ci/cd", "github actions") in _found("set up GitHub Actions")
    assert ("cuda", "cuda*") in _found("cudaMemcpyAsync never overlaps")
    assert ("cuda", "__global__") in _found("__global__ void k()")


def test_a_term_counts_once_however_often_it_occurs() -> None:
    hits = _lexicon().match(tokenize("python " * 1000))
    assert len(hits) == 1


def test_the_catalogue_lexicon_on_real_phrasing(catalogue: Catalogue) -> None:
    lexicon = Lexicon(t for d in catalogue.domains for t in d.terms)
    hits = lexicon.match(tokenize("kubectl rollout undo after the Helm upgrade"))
    domains = {hit.domain for hit in hits}
    assert "k8s" in domains
    assert len(lexicon) > 1000


def test_kernel_and_optimize_alone_are_weak(catalogue: Catalogue) -> None:
    lexicon = Lexicon(t for d in catalogue.domains for t in d.terms)
    hits = [h for h in lexicon.match(tokenize("optimize the kernel")) if h.domain != "programming"]
    assert {h.domain for h in hits} >= {"cuda", "math", "low level"}
    assert all(hit.weight < 0.5 for hit in hits)


def test_a_whole_word_is_not_counted_again_by_a_prefix_of_its_domain() -> None:
    lexicon = Lexicon(
        [*parse_terms("tensor|tensor*", "ml", 1.0), *parse_terms("tensor*", "other", 1.0)]
    )
    found = [(hit.domain, hit.term.text) for hit in lexicon.match(tokenize("a tensor"))]
    assert found == [("ml", "tensor"), ("other", "tensor*")]
    prefixed = {(hit.domain, hit.term.text) for hit in lexicon.match(tokenize("tensorflow"))}
    assert prefixed == {("ml", "tensor*"), ("other", "tensor*")}
