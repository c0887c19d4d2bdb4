"""The shipped catalogue data: every seed domain is there, complete and parseable."""

from __future__ import annotations

from registry.dispatch.catalogue import Catalogue
from registry.dispatch.domains import ALL_DOMAINS

SEED_DOMAINS = (
    "python",
    "debugging",
    "testing",
    "cuda",
    "gpu optimization",
    "math",
    "algorithms",
    "proofs",
    "c",
    "c++",
    "low-level",
    "javascript",
    "typescript",
    "html/css",
    "sql",
    "pandas",
    "data pipelines",
    "docker",
    "k8s",
    "ci/cd",
    "shell",
    "documentation",
    "markdown",
)
OTHERS = ("rust", "go", "java", "terraform", "security", "kotlin", "swift", "networking")


def test_every_seed_and_common_domain_is_catalogued(catalogue: Catalogue) -> None:
    for name in (*SEED_DOMAINS, *OTHERS):
        domain = catalogue.get(name)
        assert domain is not None, name
        assert domain.kind == "topic"
        assert domain.terms, name
        assert len(domain.exemplars) >= 3, name


def test_seed_domains_have_enough_material(catalogue: Catalogue) -> None:
    for name in SEED_DOMAINS:
        domain = catalogue.get(name)
        assert domain is not None
        assert len(domain.exemplars) >= 10, name
        assert len(domain.terms) >= 10, name


def test_background_and_corroboration(catalogue: Catalogue) -> None:
    kinds = {d.name: d.kind for d in catalogue.domains}
    assert kinds["general"] == "background"
    assert kinds["programming"] == "corroboration"
    general = catalogue.get("general")
    assert general is not None
    assert len(general.exemplars) >= 100


def test_names_are_unique_and_exemplars_not_duplicated_within_a_domain() -> None:
    names = [spec.name for spec in ALL_DOMAINS]
    assert len(names) == len(set(names))
    for spec in ALL_DOMAINS:
        assert len(spec.exemplars) == len(set(spec.exemplars)), spec.name


def test_related_domains_exist(catalogue: Catalogue) -> None:
    for domain in catalogue.domains:
        for other, affinity in domain.related:
            assert catalogue.resolve(other) is not None, (domain.name, other)
            assert 0 < affinity <= 1
