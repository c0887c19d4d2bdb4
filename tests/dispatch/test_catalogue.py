"""Catalogue notation, parsing and name resolution."""

from __future__ import annotations

import pytest

from registry.dispatch.catalogue import (
    DECISIVE_WEIGHT,
    STRONG_WEIGHT,
    WEAK_WEIGHT,
    Catalogue,
    custom_domain,
    normalize_name,
    parse_domain,
    parse_files,
    parse_terms,
    split_keywords,
)
from registry.dispatch.domain_spec import DomainSpec
from registry.dispatch.errors import InvalidConfigurationError


def test_term_kinds_and_weights() -> None:
    terms = {t.text: t for t in parse_terms("python|c++|ci/cd|cuda*|data pipeline|x=1.4", "d", 1.0)}
    assert terms["python"].kind == "word"
    assert terms["c++"].kind == "word"  # the tokenizer keeps c++ as one word
    assert terms["ci/cd"].kind == "compound"
    assert terms["cuda*"].kind == "prefix"
    assert terms["cuda*"].key == ("cuda",)
    assert terms["data pipeline"].kind == "phrase"
    assert terms["data pipeline"].key == ("data", "pipeline")
    assert terms["x"].weight == 1.4


def test_suffix_forms_and_ambiguity() -> None:
    terms = parse_terms("~kernel(s)|compile(r,d)", "d", 0.5)
    assert {t.text for t in terms} == {"kernel", "kernels", "compile", "compiler", "compiled"}
    assert all(t.ambiguous for t in terms if t.text.startswith("kernel"))
    assert not any(t.ambiguous for t in terms if t.text.startswith("compile"))


def test_a_compound_the_tokenizer_never_produces_is_refused() -> None:
    with pytest.raises(InvalidConfigurationError):
        parse_terms("fetch()", "javascript", 1.0)
    with pytest.raises(InvalidConfigurationError):
        parse_terms("===", "javascript", 1.0)


def test_file_rule_kinds() -> None:
    rules = {r.text: r for r in parse_files(".py|dockerfile|test_*.py|.github/workflows/=1.5", "d")}
    assert rules[".py"].kind == "extension"
    assert rules["dockerfile"].kind == "name"
    assert rules["test_*.py"].kind == "pattern"
    assert rules[".github/workflows/"].kind == "directory"
    assert rules[".github/workflows/"].weight == 1.5


def test_keyword_classes_get_their_weights() -> None:
    domain = parse_domain(DomainSpec("x", decisive="a", strong="b", weak="c"))
    weights = {t.text: t.weight for t in domain.terms}
    assert weights == {"a": DECISIVE_WEIGHT, "b": STRONG_WEIGHT, "c": WEAK_WEIGHT}


def test_registered_names_resolve_to_catalogue_domains(catalogue: Catalogue) -> None:
    cases = {
        "Python": "python",
        "K8s": "k8s",
        "kubernetes": "k8s",
        "HTML/CSS": "html/css",
        "html / css": "html/css",
        "GPU optimization": "gpu optimization",
        "Data pipeline": "data pipelines",
        "CI/CD": "ci/cd",
        "low-level": "low level",
        "C": "c",
        "C++": "c++",
        "docs": "documentation",
        "Terraform": "terraform",
    }
    for name, expected in cases.items():
        assert catalogue.resolve(name) == expected, name
    assert catalogue.resolve("quantum computing") is None


def test_normalize_name() -> None:
    assert normalize_name("  HTML / CSS ") == "html/css"
    assert normalize_name("Low_Level") == "low level"


def test_an_alias_claimed_by_two_domains_is_refused() -> None:
    with pytest.raises(InvalidConfigurationError):
        Catalogue.from_specs([DomainSpec("a", aliases=("x",)), DomainSpec("b", aliases=("x",))])


def test_custom_domain_from_a_name() -> None:
    domain = custom_domain("Quantum Computing", keywords=("qiskit", "*.qasm"), exemplars=("e",))
    texts = {t.text: t.weight for t in domain.terms}
    assert texts["quantum computing"] == STRONG_WEIGHT
    assert texts["quantum"] == WEAK_WEIGHT
    assert texts["qiskit"] == STRONG_WEIGHT
    assert [(r.text, r.kind) for r in domain.files] == [(".qasm", "extension")]
    assert domain.exemplars == ("e",)


def test_split_keywords() -> None:
    terms, files = split_keywords(["Terraform", ".tf", "modules/", "  "], "@infra")
    assert [t.text for t in terms] == ["terraform"]
    assert sorted(r.text for r in files) == [".tf", "modules/"]
