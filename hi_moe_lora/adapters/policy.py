"""Serving policy applied to an inspected adapter: rank limit, base model, architecture.

Base models are compared by full identity: the adapter's ``base_model_name_or_path`` and the served
base model match when they name the same hub repository (``org/name``, compared exactly) or the
same local path (compared after normalisation: ``~`` expanded, ``.``/``..``/doubled ``/``
collapsed, trailing ``/`` removed). Nothing looser: ``evil-org/model`` is not ``/models/model``,
and a hub id never matches a local copy of it. The same rule decides in the resolver plugin, which
compares vLLM's ``base_model_name`` (its ``--model`` argument) with the base model recorded at
registration. An adapter that does not name its base model is rejected.

When the served base model is a local directory whose ``config.json`` we understand, the tensors
are also checked against its architecture (:mod:`hi_moe_lora.adapters.architecture`).
"""

from __future__ import annotations

import logging
import os.path

from hi_moe_lora.adapters.architecture import ModelShape, check_against_model
from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.manifest import AdapterManifest

logger = logging.getLogger(__name__)


def _is_local_path(model: str) -> bool:
    return model.startswith(("/", "~", "./", "../")) or model in (".", "..")


def normalise_model_id(model: str) -> str:
    """The identity of a base model: a hub id as given, a local path normalised (not resolved)."""
    text = model.strip()
    if not text:
        return ""
    if _is_local_path(text):
        return os.path.normpath(os.path.expanduser(text))
    return text.rstrip("/")


def base_models_match(adapter_base: str, served_base: str) -> bool:
    """Whether both name the same model (full identity, see the module docstring)."""
    left, right = normalise_model_id(adapter_base), normalise_model_id(served_base)
    return bool(left) and left == right


def check_policy(
    manifest: AdapterManifest,
    *,
    max_rank: int,
    base_model: str,
    model: ModelShape | None = None,
) -> None:
    """Raise unless the adapter can be served on ``base_model`` (of shape ``model``, if known).

    Codes: ``rank_too_high``, ``base_model_mismatch``, and with ``model``: ``unknown_module``,
    ``tensor_shape_mismatch``. Messages never quote either base model (they may be local paths);
    both are logged.
    """
    if manifest.rank > max_rank:
        raise AdapterValidationError(
            "rank_too_high", f"rank {manifest.rank} exceeds the maximum LoRA rank {max_rank}"
        )
    if manifest.base_model is None:
        raise AdapterValidationError(
            "base_model_mismatch", "adapter_config.json does not name base_model_name_or_path"
        )
    if not base_models_match(manifest.base_model, base_model):
        logger.info(
            "adapter trained on %r refused: the served base model is %r",
            manifest.base_model,
            base_model,
        )
        raise AdapterValidationError(
            "base_model_mismatch",
            "the adapter's base_model_name_or_path is not the served base model (compared as a "
            "full hub id or normalised local path)",
        )
    if model is not None:
        check_against_model(
            manifest.tensors,
            target_modules=manifest.target_modules,
            is_regex=manifest.target_modules_regex,
            model=model,
        )
