"""Deliverable cues: the verb of a request and what it asks to be produced."""

from __future__ import annotations

import pytest

from registry.dispatch.catalogue import Catalogue
from registry.dispatch.fleet import FleetIndex, build_fleet
from registry.dispatch.intent import Deliverable, find_deliverable
from tests.dispatch.conftest import SEED_FLEET


@pytest.fixture(scope="module")
def fleet(catalogue: Catalogue) -> FleetIndex:
    return build_fleet(catalogue, SEED_FLEET)


def _found(fleet: FleetIndex, text: str) -> Deliverable | None:
    return find_deliverable(text, fleet.deliverables, fleet.files, fleet.deliverable_domains)


@pytest.mark.parametrize(
    ("text", "domain"),
    [
        ("Write a README for the image-resizing library written in Rust", "documentation"),
        ("could you please draft docstrings for the public helpers", "documentation"),
        ("I'd like to add Doxygen comments to the ring buffer header", "documentation"),
        ("Document the gRPC endpoints of the billing service", "documentation"),
        ("create a Dockerfile for the Flask dashboard", "docker"),
        ("set up a GitHub Actions workflow that lints the TypeScript", "ci/cd"),
        ("Derive the update rule of momentum SGD, then I'll write the kernel", "proofs"),
        (
            "First some context. Then: write an installation guide for Windows users.",
            "documentation",
        ),
        ("update the changelog entry for the 2.0 release", "documentation"),  # a part of it
        ("What's the time complexity of this nested loop over the grid?", "algorithms"),
        ("what is the expected value of the longest run in 20 coin flips", "math"),
    ],
)
def test_the_object_of_a_request_verb_is_the_deliverable(
    fleet: FleetIndex, text: str, domain: str
) -> None:
    found = _found(fleet, text)
    assert found is not None
    assert found.domain == domain


def test_a_deliverable_file_in_the_object_counts(fleet: FleetIndex) -> None:
    found = _found(fleet, "please update README.md with the new flags")
    assert found is not None
    assert found.domain == "documentation"
    assert found.term == "readme.md"


@pytest.mark.parametrize(
    "text",
    [
        "Users can write comments in the editor and we render them in the feed",  # no request
        "write tests for the docstring parser",  # the object ends at "for": tests
        "the README says to run make install but it fails",  # a statement, not a request
        "write a document about my trip to Lisbon",  # "document" counts only as the verb
        "write a haiku about the sea",  # no deliverable term
        "what is the best laptop for a student",  # a question, but no deliverable
    ],
)
def test_no_deliverable(fleet: FleetIndex, text: str) -> None:
    assert _found(fleet, text) is None


def test_an_everyday_verb_is_marked_ambiguous(fleet: FleetIndex) -> None:
    found = _found(fleet, "help me document the receipts for my accountant")
    assert found is not None
    assert found.ambiguous
    term = found.as_term()
    assert term.domain == "documentation"
    assert term.ambiguous


def test_reading_is_bounded(fleet: FleetIndex) -> None:
    filler = "This is context. " * 5_000
    assert _found(fleet, filler + "Write a README for it.") is None


def test_a_piece_of_code_as_the_head_is_a_code_deliverable(fleet: FleetIndex) -> None:
    found = _found(fleet, "write a Ruby script that renames every README in a tree")
    assert found is not None
    assert found.code
    assert found.term == "script"
    parser = _found(fleet, "build a changelog parser")
    assert parser is not None
    assert parser.code
    modifier = _found(fleet, "add a comments section to the product page")
    assert modifier is None  # "comments" modifies "section": no documentation deliverable
