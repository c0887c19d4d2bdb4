"""Reading vLLM's ``/v1/models``: base models (no ``parent``) and loaded adapters."""

from __future__ import annotations

from typing import Any

from registry.fleet.model_cards import (
    LoraCard,
    adapter_cards,
    adapter_ids,
    base_model_ids,
    served_base_name,
)


def test_base_models_and_adapters_are_told_apart() -> None:
    listing = {"data": [{"id": "m"}, {"id": "l@1.0.0", "parent": "m"}, {"nope": 1}, "x"]}
    assert base_model_ids(listing) == ["m"]
    assert adapter_ids(listing) == ["l@1.0.0"]


def test_malformed_listings_read_as_empty() -> None:
    listings: tuple[Any, ...] = ({"data": None}, [], None, {"data": [{"id": ""}]})
    for listing in listings:
        assert base_model_ids(listing) == []
        assert adapter_ids(listing) == []
        assert adapter_cards(listing) == []


def test_adapter_cards_carry_the_path_vllm_loaded_from() -> None:
    listing = {
        "data": [
            {"id": "m", "root": "/models/m"},
            {"id": "l@1.0.0", "parent": "m", "root": "/store/l/1.0.0"},
            {"id": "odd", "parent": "m", "root": 7},
            {"id": "bare", "parent": "m"},
        ]
    }
    assert adapter_cards(listing) == [
        LoraCard("l@1.0.0", "/store/l/1.0.0"),
        LoraCard("odd", None),
        LoraCard("bare", None),
    ]


def test_the_served_base_name_prefers_the_configured_one() -> None:
    assert served_base_name({"/m", "alias"}, "alias") == "alias"
    assert served_base_name({"/m", "alias"}, "other") == "/m"
    assert served_base_name(set(), "alias") is None
