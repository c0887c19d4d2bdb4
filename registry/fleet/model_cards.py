"""Reading vLLM's ``GET /v1/models`` answer: base models and loaded adapters.

vLLM lists its base model(s) (``--served-model-name`` or the model path) and every LoRA name its
API server has loaded; a LoRA card carries a ``parent`` (the base model it sits on) and a
``root``: the path vLLM loaded its weights from, as given to it (by the resolver plugin, by
``--lora-modules`` or by a ``/v1/load_lora_adapter`` call).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoraCard:
    """One loaded LoRA name and the path vLLM reports for it (``None``: no usable ``root``)."""

    name: str
    root: str | None


def _cards(models_list: Any) -> list[dict[str, Any]]:
    data = models_list.get("data") if isinstance(models_list, dict) else None
    if not isinstance(data, list):
        return []
    return [card for card in data if isinstance(card, dict) and card.get("id")]


def base_model_ids(models_list: Any) -> list[str]:
    """The base models in a ``/v1/models`` answer (cards without a ``parent``)."""
    return [str(card["id"]) for card in _cards(models_list) if not card.get("parent")]


def adapter_ids(models_list: Any) -> list[str]:
    """The LoRA names vLLM has loaded (cards with a ``parent``)."""
    return [str(card["id"]) for card in _cards(models_list) if card.get("parent")]


def adapter_cards(models_list: Any) -> list[LoraCard]:
    """The LoRA names vLLM has loaded, each with the path it was loaded from."""
    return [
        LoraCard(str(card["id"]), root if isinstance(root := card.get("root"), str) else None)
        for card in _cards(models_list)
        if card.get("parent")
    ]


def served_base_name(bases: Collection[str], configured: str | None) -> str | None:
    """The name to send base-model requests under: the configured base model when vLLM lists
    it, else the first listed base (in name order), else ``None``."""
    if configured in bases:
        return configured
    return min(bases) if bases else None
