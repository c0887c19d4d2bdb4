"""Serving policy applied to an inspected adapter: rank limit and base-model match.

Base-model matching is strict-but-sane: the adapter's ``base_model_name_or_path`` and the served
base model match when they are equal after normalisation (surrounding whitespace and trailing
``/`` removed), or when their last path components are equal. The second rule accepts the common
case of one model stored at different places (``/models/tiny-llama`` vs ``/srv/tiny-llama``, or a
hub id ``org/tiny-llama`` vs a local copy ``/cache/tiny-llama``) while rejecting a different model.
An adapter that does not name its base model is rejected.
"""

from __future__ import annotations

from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.manifest import AdapterManifest


def normalise_model_id(model: str) -> str:
    return model.strip().rstrip("/")


def base_models_match(adapter_base: str, served_base: str) -> bool:
    left, right = normalise_model_id(adapter_base), normalise_model_id(served_base)
    if not left or not right:
        return False
    return left == right or left.rsplit("/", 1)[-1] == right.rsplit("/", 1)[-1]


def check_policy(manifest: AdapterManifest, *, max_rank: int, base_model: str) -> None:
    """Raise ``rank_too_high`` or ``base_model_mismatch`` if the adapter cannot be served."""
    if manifest.rank > max_rank:
        raise AdapterValidationError(
            "rank_too_high", f"rank {manifest.rank} exceeds the maximum LoRA rank {max_rank}"
        )
    if manifest.base_model is None:
        raise AdapterValidationError(
            "base_model_mismatch", "adapter_config.json does not name base_model_name_or_path"
        )
    if not base_models_match(manifest.base_model, base_model):
        raise AdapterValidationError(
            "base_model_mismatch",
            f"adapter was trained on {manifest.base_model!r}, the served model is {base_model!r}",
        )
