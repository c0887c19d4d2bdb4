"""The Dispatcher end to end: real decisions, boundaries, scoring, fallbacks, tier 3, safety."""

from __future__ import annotations

import threading
import time

import pytest

from registry.dispatch import (
    Catalogue,
    Decision,
    Dispatcher,
    Embedder,
    ScoringWeights,
    Specialist,
    Task,
    UnavailableEmbedder,
    group_by_specialist,
)
from registry.dispatch.engine import SemanticStep
from tests.dispatch.conftest import SEED_FLEET, WordsEmbedder


def decide(engine: Dispatcher, objective: str, *refs: str) -> Decision:
    return engine.decide(Task(objective, tuple(refs)))


# --- tiers 1-2 ---------------------------------------------------------------------------


def test_keyword_decisions(lexical: Dispatcher) -> None:
    cases = {
        "kubectl rollout undo vs redeploying the previous tag": "devops-lora",
        "cudaMemcpyAsync does not overlap with my kernels": "cuda-lora",
        "useEffect fires twice in development": "web-lora",
        "Postgres window function for a running total": "data-lora",
        "valgrind reports an invalid read in my parser": "systems-lora",
        "prove by induction that 2^n > n": "math-lora",
        "pytest fixture with scope=module is rebuilt each time": "python-lora",
        "add Doxygen comments to the public API": "docs-lora",
    }
    for objective, expected in cases.items():
        decision = decide(lexical, objective)
        assert decision.specialist == expected, (objective, decision)
        assert decision.tier == "keyword"
        assert decision.fallback_reason is None
        assert decision.signals
        assert decision.domains


def test_the_language_and_the_data_tool_outrank_the_setting(lexical: Dispatcher) -> None:
    # labelling rules 3 and 4: the testing around C++ code is C++ work; a dbt test failing on
    # CI is pipeline work; an ORM's query pattern is SQL work, though the app is Python
    cases = {
        "write unit tests for our C++ matrix class with a hand-written harness": "systems-lora",
        "the nightly dbt run fails in the CI job on a not_null test of customers.email": (
            "data-lora"
        ),
        "SQLAlchemy issues one extra SELECT per row when the view touches order.customer": (
            "data-lora"
        ),
    }
    for objective, expected in cases.items():
        decision = decide(lexical, objective)
        assert decision.specialist == expected, (objective, decision)


def test_everyday_senses_of_bash_and_proofread_fall_back(lexical: Dispatcher) -> None:
    for objective in (
        "throwing a bash for my sister's graduation, menu ideas for 30 people?",
        "proofread my wedding speech, the ending feels flat",
    ):
        decision = decide(lexical, objective)
        assert decision.specialist is None, (objective, decision)
    assert decide(lexical, "bash: my loop over files with spaces breaks").specialist == (
        "devops-lora"
    )


def test_file_decisions(lexical: Dispatcher) -> None:
    decision = decide(lexical, "make the cache key depend on the lock file", ".gitlab-ci.yml")
    assert (decision.specialist, decision.tier) == ("devops-lora", "extension")
    decision = decide(lexical, "speed this up", "kernels/scan.cu")
    assert (decision.specialist, decision.tier) == ("cuda-lora", "extension")
    decision = decide(lexical, "Write a Makefile with automatic header dependencies")
    assert decision.specialist == "systems-lora"


def test_dot_py_is_a_python_file_but_py_is_not_a_keyword(lexical: Dispatcher) -> None:
    assert decide(lexical, "rename every .py file in the folder").specialist == "python-lora"
    assert decide(lexical, "rename it", "tools/cleanup.py").specialist == "python-lora"
    assert decide(lexical, "open it with py").specialist is None


def test_c_plus_plus_versus_c(catalogue: Catalogue) -> None:
    engine = Dispatcher(catalogue=catalogue)
    engine.set_fleet([Specialist("c-lora", ("c",)), Specialist("cpp-lora", ("c++",))])
    assert decide(engine, "my C++ class leaks in its destructor").specialist == "cpp-lora"
    assert decide(engine, "a C program that calls malloc in a loop").specialist == "c-lora"
    assert decide(engine, "port this to C++20 modules").specialist == "cpp-lora"
    assert decide(engine, "I got a C in organic chemistry").specialist is None


def test_a_domain_no_specialist_serves_falls_back_with_its_name(lexical: Dispatcher) -> None:
    decision = decide(lexical, "Kotlin: when should I use a data class?")
    assert decision.specialist is None
    assert decision.tier == "fallback"
    assert decision.fallback_reason is not None
    assert "kotlin" in decision.fallback_reason
    assert decision.fallback_kind == "uncovered_domain"
    assert decision.nearest_domain is not None
    assert decision.nearest_domain[0] == "kotlin"
    assert "kotlin" in decision.unmatched_terms
    assert decision.tier_best["keyword"] > 0


def test_terraform_goes_to_devops(lexical: Dispatcher) -> None:
    assert decide(lexical, "split the config into modules", "infra/main.tf").specialist == (
        "devops-lora"
    )


def test_weak_signals_alone_do_not_decide(lexical: Dispatcher) -> None:
    decision = decide(lexical, "optimize the kernel")
    assert decision.specialist is None
    assert decision.fallback_reason is not None
    assert "weak" in decision.fallback_reason
    assert decision.fallback_kind == "low_confidence"


def test_without_tier_3_a_tie_goes_to_the_strongest(lexical: Dispatcher) -> None:
    decision = decide(lexical, "Write a Dockerfile for my Flask app running Python 3.11")
    assert decision.specialist in {"devops-lora", "python-lora"}
    assert decision.tier in {"keyword", "extension"}


def test_the_deliverable_decides_and_says_so(lexical: Dispatcher) -> None:
    decision = decide(lexical, "Please write a README for the CUDA ray tracer: nvcc flags, usage")
    assert decision.specialist == "docs-lora"
    assert decision.tier == "keyword"
    assert any(s.term == "write -> readme" for s in decision.signals)


def test_a_deliverable_without_a_specialist_falls_back(catalogue: Catalogue) -> None:
    engine = Dispatcher(catalogue=catalogue)
    engine.set_fleet([s for s in SEED_FLEET if s.name != "docs-lora"])
    decision = decide(engine, "write the API reference for our TypeScript SDK")
    assert decision.specialist is None
    assert decision.fallback_kind == "uncovered_domain"
    assert decision.fallback_reason is not None
    assert "documentation" in decision.fallback_reason


def test_no_specialists_means_base_model(catalogue: Catalogue) -> None:
    engine = Dispatcher(catalogue=catalogue)
    decision = decide(engine, "pytest fixture")
    assert decision.specialist is None
    assert decision.fallback_reason == "no specialists are registered"
    assert decision.fallback_kind == "no_specialists"


# --- scoring among matched specialists ---------------------------------------------------


def test_battle_tested_but_unmatched_is_never_chosen(catalogue: Catalogue) -> None:
    engine = Dispatcher(catalogue=catalogue)
    veteran = Specialist("python-lora", ("python",), success_rate=0.99, request_count=10**6)
    engine.set_fleet([veteran, Specialist("docs-lora", ("documentation",))])
    decision = decide(engine, "write a README with a quickstart section")
    assert decision.specialist == "docs-lora"
    assert "python-lora" not in decision.scores


def test_battle_tested_wins_among_matched_and_weights_are_configurable(
    catalogue: Catalogue,
) -> None:
    fleet = [
        Specialist("py-old", ("python",), success_rate=0.9, request_count=5000),
        Specialist("py-new", ("python", "testing")),
    ]
    task = "pytest fixture with monkeypatch for a Django view"
    engine = Dispatcher(catalogue=catalogue)
    engine.set_fleet(fleet)
    decision = decide(engine, task)
    assert decision.specialist == "py-old"
    assert set(decision.scores) == {"py-old", "py-new"}
    assert decision.scores["py-old"] > decision.scores["py-new"]
    match_only = Dispatcher(catalogue=catalogue, weights=ScoringWeights(0.0, 0.0, 1.0))
    match_only.set_fleet(fleet)
    assert decide(match_only, task).specialist == "py-new"


def test_cold_start_competes_with_a_neutral_prior(catalogue: Catalogue) -> None:
    engine = Dispatcher(catalogue=catalogue)
    poor = Specialist("py-poor", ("python",), success_rate=0.1, request_count=100)
    engine.set_fleet([poor, Specialist("py-new", ("python",))])
    assert decide(engine, "django migrations conflict").specialist == "py-new"
    engine.set_fleet(
        [
            Specialist("py-good", ("python",), success_rate=0.8, request_count=100),
            Specialist("py-new", ("python",)),
        ]
    )
    assert decide(engine, "django migrations conflict").specialist == "py-good"


def test_out_of_catalogue_domain_by_name_and_keywords(catalogue: Catalogue) -> None:
    engine = Dispatcher(catalogue=catalogue)
    engine.set_fleet(
        [*SEED_FLEET, Specialist("quantum-lora", ("quantum computing",), keywords=("qiskit",))]
    )
    assert decide(engine, "quantum computing: what is a Bell state").specialist == "quantum-lora"
    assert decide(engine, "qiskit transpiler drops my barrier").specialist == "quantum-lora"


# --- tier 3 ------------------------------------------------------------------------------


def test_embeddings_status(catalogue: Catalogue, lexical: Dispatcher) -> None:
    on, reason = lexical.embeddings_status
    assert not on
    assert "no embedding model" in reason
    off = Dispatcher(catalogue=catalogue, embedder=UnavailableEmbedder("not installed: torch"))
    off.set_fleet(SEED_FLEET)
    assert off.embeddings_status == (False, "not installed: torch")
    decision = decide(off, "the page jumps around while images load")
    assert decision.specialist is None
    assert decision.fallback_reason is not None
    assert "tier 3 is off" in decision.fallback_reason
    assert decision.fallback_kind in {"no_signal", "low_confidence"}
    assert decide(off, "a song about the sea").fallback_kind == "no_signal"
    assert decide(off, "kubectl get pods").specialist == "devops-lora"  # tiers 1-2 still work


def test_an_everyday_word_needs_a_clear_tier_3_margin(full: Dispatcher) -> None:
    # "docs" and "pipeline" have an everyday sense and nothing technical confirms them: tier 3
    # must put the task clearly closer to the specialist than to everyday requests
    for objective in (
        "which docs do I need to renew my passport in Germany",
        "the pipeline under our street is being replaced, will our water be cut off?",
    ):
        decision = decide(full, objective)
        assert decision.specialist is None, (objective, decision)
        assert decision.fallback_reason is not None
    assert decide(full, "the docs build fails since we moved to the new theme").specialist == (
        "docs-lora"
    )


def test_no_signal_tasks_go_through_tier_3(full: Dispatcher) -> None:
    assert full.embeddings_status[0]
    cases = {
        "how many ways can five different books be arranged on a shelf": "math-lora",
        "every thread of the block reads the same small table, where should it live": "cuda-lora",
        "the footer overlaps the last paragraph on narrow phones": "web-lora",
        "list every customer whose first order was in March": "data-lora",
    }
    for objective, expected in cases.items():
        decision = decide(full, objective)
        assert decision.specialist == expected, (objective, decision.fallback_reason)
        assert decision.tier == "embedding"
        assert decision.tier_best["embedding"] > 0
        assert any(s.tier == "embedding" for s in decision.signals)


def test_unrelated_and_decoys_fall_back(full: Dispatcher) -> None:
    for objective in (
        "what is the capital of Australia?",
        "tips for passing my driving test the first time",
        "is a ball python a good pet for a ten year old",
        "write a haiku about the first snow",
    ):
        decision = decide(full, objective)
        assert decision.specialist is None, (objective, decision)
        assert decision.fallback_reason
        assert "embedding" in decision.tier_best


def test_tier_3_breaks_a_lexical_tie(full: Dispatcher) -> None:
    decision = decide(
        full,
        "Write a Dockerfile for my Flask app: gunicorn, Python 3.11, non-root user",
        "app.py",
        "requirements.txt",
    )
    assert decision.specialist == "devops-lora"


def test_out_of_catalogue_domain_by_exemplars(catalogue: Catalogue, minilm: Embedder) -> None:
    engine = Dispatcher(catalogue=catalogue, embedder=minilm)
    chemistry = Specialist(
        "chem-lora",
        ("computational chemistry",),
        exemplars=(
            "optimise the geometry of a molecule with density functional theory",
            "which basis set gives accurate energies for small organic molecules",
            "compute the binding energy between a protein and a ligand",
        ),
    )
    engine.set_fleet([*SEED_FLEET, chemistry])
    decision = decide(engine, "estimate how strongly a drug molecule binds to its target protein")
    assert decision.specialist == "chem-lora"


# --- engine mechanics --------------------------------------------------------------------


def test_exemplars_are_encoded_only_when_the_fleet_changes(catalogue: Catalogue) -> None:
    embedder = WordsEmbedder()
    engine = Dispatcher(catalogue=catalogue, embedder=embedder)
    engine.set_fleet(SEED_FLEET)
    assert len(embedder.indexed) == 1
    stats = [Specialist(s.name, s.domains, success_rate=0.7, request_count=9) for s in SEED_FLEET]
    engine.set_fleet(stats)
    assert len(embedder.indexed) == 1
    assert engine.fleet[0].request_count == 9
    engine.set_fleet([*SEED_FLEET, Specialist("go-lora", ("go",))])
    assert len(embedder.indexed) == 2


def test_first_pass_decides_lexically_and_defers_only_tier_3(catalogue: Catalogue) -> None:
    embedder = WordsEmbedder()
    engine = Dispatcher(catalogue=catalogue, embedder=embedder)
    engine.set_fleet(SEED_FLEET)
    clear = engine.first_pass(Task("fix the failing pytest fixture in conftest.py"))
    assert isinstance(clear, Decision)
    assert clear.specialist == "python-lora"
    assert embedder.queries == 0  # no model time for a task tiers 1-2 settle
    vague = engine.first_pass(Task("make it better please"))
    assert isinstance(vague, SemanticStep)
    assert embedder.queries == 0  # deferred: the caller runs it (in a worker thread)
    assert vague.run() == engine.decide(Task("make it better please"))
    assert embedder.queries == 2


def test_concurrent_decisions_while_the_fleet_changes(catalogue: Catalogue) -> None:
    engine = Dispatcher(catalogue=catalogue, embedder=WordsEmbedder())
    engine.set_fleet(SEED_FLEET)
    errors: list[BaseException] = []
    seen: set[str | None] = set()
    stop = threading.Event()

    def worker() -> None:
        try:
            while not stop.is_set():
                seen.add(decide(engine, "kubectl logs show CrashLoopBackOff").specialist)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for i in range(20):
        extra = [Specialist(f"x{i}", ("rust",))] if i % 2 else []
        engine.set_fleet([*SEED_FLEET, *extra])
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors
    assert seen == {"devops-lora"}


def test_a_megabyte_objective_is_safe(lexical: Dispatcher, full: Dispatcher) -> None:
    objective = "my docker container restarts; " + "lorem ipsum dolor sit amet " * 40_000
    assert len(objective) > 1_000_000
    started = time.perf_counter()
    decision = decide(lexical, objective)
    assert time.perf_counter() - started < 5.0
    assert decision.specialist == "devops-lora"
    started = time.perf_counter()
    decide(full, "lorem ipsum " * 100_000)
    assert time.perf_counter() - started < 5.0


def test_group_by_specialist(lexical: Dispatcher) -> None:
    tasks = {
        "a": "kubectl get pods",
        "b": "capital of Peru",
        "c": "helm chart values",
        "d": "pandas groupby is slow",
    }
    decisions = [(key, decide(lexical, text)) for key, text in tasks.items()]
    assert group_by_specialist(decisions) == {
        "devops-lora": ["a", "c"],
        None: ["b"],
        "data-lora": ["d"],
    }


@pytest.mark.parametrize("refs", [(), ("notes/trip.md",)])
def test_personal_files_do_not_make_a_docs_task(full: Dispatcher, refs: tuple[str, ...]) -> None:
    decision = full.decide(Task("turn my packing list into a checklist for each day", refs))
    assert decision.specialist is None
