"""The shipped domain catalogue, as Python data (packaged with the code, typed, commented).

One module per area; :data:`ALL_DOMAINS` is what :func:`registry.dispatch.catalogue.
default_catalogue` parses. The seed fleet's domains (python, debugging, testing, cuda, gpu
optimization, math, algorithms, proofs, c, c++, low-level, javascript, typescript, html/css,
sql, pandas, data pipelines, docker, k8s, ci/cd, shell, documentation, markdown) come with
keywords, files and exemplars; so do common domains outside it (rust, go, java, terraform,
cloud, servers, networking, security, ...), which let a fleet recognise tasks it has no
specialist for. Imports only the standard library and the catalogue's types.
"""

from __future__ import annotations

from dataclasses import replace

from registry.dispatch.domain_spec import DomainSpec
from registry.dispatch.domains import (
    compute,
    data,
    examples_code,
    examples_compute,
    examples_general,
    examples_ops_docs,
    examples_web_data,
    general,
    infra,
    languages,
    python,
    systems,
    web,
    writing,
)

#: Exemplars kept apart from the keyword modules (domain name -> more exemplars).
_MORE_EXEMPLARS: dict[str, tuple[str, ...]] = {
    "python": examples_code.PYTHON,
    "debugging": examples_code.DEBUGGING,
    "testing": examples_code.TESTING,
    "c": examples_code.C,
    "c++": examples_code.CPP,
    "low-level": examples_code.LOW_LEVEL,
    "cuda": examples_compute.CUDA,
    "gpu optimization": examples_compute.GPU,
    "math": examples_compute.MATH,
    "algorithms": examples_compute.ALGORITHMS,
    "proofs": examples_compute.PROOFS,
    "javascript": examples_web_data.JAVASCRIPT,
    "typescript": examples_web_data.TYPESCRIPT,
    "html/css": examples_web_data.HTML_CSS,
    "sql": examples_web_data.SQL,
    "pandas": examples_web_data.PANDAS,
    "data pipelines": examples_web_data.PIPELINES,
    "docker": examples_ops_docs.DOCKER,
    "k8s": examples_ops_docs.K8S,
    "ci/cd": examples_ops_docs.CICD,
    "shell": examples_ops_docs.SHELL,
    "documentation": examples_ops_docs.DOCUMENTATION,
    "markdown": examples_ops_docs.MARKDOWN,
    "general": examples_general.GENERAL,
}


def _with_more(spec: DomainSpec) -> DomainSpec:
    more = _MORE_EXEMPLARS.get(spec.name, ())
    return replace(spec, exemplars=spec.exemplars + more) if more else spec


ALL_DOMAINS: tuple[DomainSpec, ...] = tuple(
    _with_more(spec)
    for spec in (
        *python.DOMAINS,
        *compute.DOMAINS,
        *systems.DOMAINS,
        *web.DOMAINS,
        *data.DOMAINS,
        *infra.DOMAINS,
        *writing.DOMAINS,
        *languages.DOMAINS,
        *general.DOMAINS,
    )
)
