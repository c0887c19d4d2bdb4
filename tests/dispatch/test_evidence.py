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
