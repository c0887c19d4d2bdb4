"""``GET /v1/models``: the base model, every adapter, and every ``name@version``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from registry.services.records import AdapterInfo

OWNER = "hi-moe-lora"


def model_card(
    model_id: str, created: datetime | None, *, parent: str | None = None, **extra: Any
) -> dict[str, Any]:
    card: dict[str, Any] = {
        "id": model_id,
        "object": "model",
        "created": int(created.timestamp()) if created is not None else 0,
        "owned_by": OWNER,
    }
    if parent is not None:
        card["parent"] = parent
        card["root"] = parent
    card.update(extra)
    return card


def models_list(base_models: list[str], adapters: list[AdapterInfo]) -> dict[str, Any]:
    """OpenAI list format; adapter cards name their base model as ``parent``."""
    data = [model_card(base, None) for base in base_models]
    for adapter in adapters:
        base = adapter.versions[-1].base_model if adapter.versions else None
        if adapter.active_version is not None:
            data.append(
                model_card(
                    adapter.name,
                    adapter.created_at,
                    parent=base,
                    active_version=adapter.active_version,
                )
            )
        for version in adapter.versions:
            data.append(
                model_card(
                    version.served_name,
                    version.created_at,
                    parent=version.base_model,
                    version=version.version,
                    status=version.status,
                )
            )
    return {"object": "list", "data": data}
