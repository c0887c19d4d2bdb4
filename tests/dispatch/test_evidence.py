"""Tiers 1-2 together: evidence per domain and owner, and confirmation of ambiguous words."""

from __future__ import annotations

from registry.dispatch.catalogue import Catalogue
from registry.dispatch.evidence import OwnerEvidence, gather, weigh
from registry.dispatch.fleet import build_fleet
from registry.dispatch.records import Task
from tests.dispatch.conftest import SEED_FLEET


def _ranked(catalogue: Catalogue, text: str, refs: tuple[str, ...] = ()) -> list[OwnerEvidence]:
    fleet = build_fleet(catalogue, SEED_FLEET)
    return weigh(fleet, gather(fleet, Task(text, refs)))


def test_keywords_and_files_add_up_per_owner(catalogue: Catalogue) -> None:
    ranked = _ranked(catalogue, "pytest fixture is rebuilt for every test", ("tests/conftest.py",))
    lead = ranked[0]
    assert lead.owner.key == "python-lora"
    assert lead.keyword > 0
    assert lead.files > 0
    assert lead.strength >= max(lead.keyword, lead.files)
    assert {"python", "testing"} <= lead.matched


def test_an_everyday_word_alone_is_not_confirmed(catalogue: Catalogue) -> None:
    snake = _ranked(catalogue, "Is a ball python a good first pet snake for a child?")
    assert snake[0].owner.key == "python-lora"
    assert not snake[0].confirmed
    code = _ranked(catalogue, "what is the difference between a list and a tuple in python")
    assert code[0].owner.key == "python-lora"
    assert code[0].confirmed


def test_adopted_domains_count_at_their_affinity(catalogue: Catalogue) -> None:
    ranked = _ranked(catalogue, "terraform plan wants to recreate the bucket")
    lead = ranked[0]
    assert lead.owner.key == "devops-lora"
    fleet = build_fleet(catalogue, SEED_FLEET)
    evidence = gather(fleet, Task("terraform plan wants to recreate the bucket"))
    affinity = lead.owner.domains["terraform"]
    assert lead.strength < evidence.total["terraform"]
    assert lead.strength >= affinity * evidence.total["terraform"] - 1e-9


def test_nothing_technical_gives_no_owner(catalogue: Catalogue) -> None:
    assert _ranked(catalogue, "what is the capital of Australia?") == []


def test_a_deliverable_cue_marks_its_owner(catalogue: Catalogue) -> None:
    ranked = _ranked(catalogue, "write a README for the SIMD string search written in C++")
    delivers = [item for item in ranked if item.deliverable]
    assert [item.owner.key for item in delivers] == ["docs-lora"]
    assert delivers[0].confirmed


def test_an_everyday_deliverable_verb_needs_something_technical(catalogue: Catalogue) -> None:
    assert not any(item.deliverable for item in _ranked(catalogue, "document my travel receipts"))
    api = _ranked(catalogue, "document the endpoints of our REST API")
    assert [item.owner.key for item in api if item.deliverable] == ["docs-lora"]


def test_declined_words_are_not_evidence(catalogue: Catalogue) -> None:
    assert _ranked(catalogue, "how do tides work? keep it short, no equations please") == []
    fleet = build_fleet(catalogue, SEED_FLEET)
    plain = gather(fleet, Task("reshape this table in plain python, without pandas."))
    assert "pandas" not in {hit.term.text for hit in plain.keyword_hits}
    assert "python" in {hit.term.text for hit in plain.keyword_hits}
    stated = _ranked(catalogue, "torch says No CUDA GPUs are available on the new box")
    assert stated[0].owner.key == "cuda-lora"


def test_outranked_domains_and_the_dominant_domain(catalogue: Catalogue) -> None:
    ranked = _ranked(catalogue, "a CUDA kernel launched from C++ returns zeros")
    by_key = {item.owner.key: item for item in ranked}
    assert {"c", "c++"} <= by_key["cuda-lora"].outranks
    assert by_key["systems-lora"].dominant in {"c", "c++"}


def test_documentation_words_are_the_subject_when_code_is_asked_for(
    catalogue: Catalogue,
) -> None:
    ranked = _ranked(catalogue, "write a Python script that collects every README into one page")
    assert ranked[0].owner.key == "python-lora"
    assert "docs-lora" not in {item.owner.key for item in ranked}
    asked = _ranked(catalogue, "write a README for the Python script that collects pages")
    assert [item.owner.key for item in asked if item.deliverable] == ["docs-lora"]
