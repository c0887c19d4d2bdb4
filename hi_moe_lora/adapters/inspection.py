"""Inspecting a PEFT adapter directory without loading any tensor.

Reads ``adapter_config.json`` and the header of ``adapter_model.safetensors`` (or checks that
``adapter_model.bin``/``.pt`` is present and non-empty) and returns an :class:`AdapterManifest`.
Stdlib only: this module is imported inside vLLM as well as by the control plane.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from hi_moe_lora.adapters.checksum import CONFIG_FILE, adapter_sha256
from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.manifest import AdapterManifest, Variant
from hi_moe_lora.adapters.safetensors_header import read_safetensors_header

logger = logging.getLogger(__name__)

SAFETENSORS_FILE = "adapter_model.safetensors"
PICKLE_WEIGHT_FILES = ("adapter_model.bin", "adapter_model.pt")
SUPPORTED_PEFT_TYPES = frozenset({"LORA"})
# Module names typical of decoder LLMs; others are accepted (logged) since architectures vary.
KNOWN_TARGET_MODULES = frozenset(
    {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "qkv_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "gate_up_proj",
        "embed_tokens",
        "lm_head",
    }
)


def _read_config(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise AdapterValidationError("missing_config", f"{directory} is not a directory")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise AdapterValidationError("missing_config", f"{CONFIG_FILE} not found in {directory}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterValidationError("malformed_config", f"{CONFIG_FILE}: {exc}") from exc
    if not isinstance(config, dict):
        raise AdapterValidationError("malformed_config", f"{CONFIG_FILE} is not a JSON object")
    return config


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _peft_variant(config: dict[str, Any]) -> Variant:
    peft_type = config.get("peft_type")
    if not isinstance(peft_type, str):
        raise AdapterValidationError("malformed_config", "peft_type is missing or not a string")
    if peft_type.upper() not in SUPPORTED_PEFT_TYPES:
        raise AdapterValidationError(
            "unsupported_peft_type", f"peft_type {peft_type!r} is not supported (only LORA)"
        )
    use_dora = config.get("use_dora", False)
    if not isinstance(use_dora, bool):
        raise AdapterValidationError("malformed_config", "use_dora is not a boolean")
    return "dora" if use_dora else "lora"


def _rank(config: dict[str, Any]) -> int:
    """The largest rank of any module: ``r``, or a bigger one from ``rank_pattern``."""
    rank = config.get("r")
    if not _positive_int(rank):
        raise AdapterValidationError("malformed_config", f"r must be a positive integer: {rank!r}")
    assert isinstance(rank, int)
    pattern = config.get("rank_pattern") or {}
    if not isinstance(pattern, dict) or not all(_positive_int(v) for v in pattern.values()):
        raise AdapterValidationError("malformed_config", "rank_pattern must map names to ranks")
    ranks = [rank, *(int(v) for v in pattern.values())]
    return max(ranks)


def _alpha(config: dict[str, Any]) -> float:
    alpha = config.get("lora_alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or alpha <= 0:
        raise AdapterValidationError(
            "malformed_config", f"lora_alpha must be a positive number: {alpha!r}"
        )
    return float(alpha)


def _target_modules(config: dict[str, Any]) -> tuple[str, ...]:
    modules = config.get("target_modules")
    if isinstance(modules, str):
        try:
            re.compile(modules)
        except re.error as exc:
            raise AdapterValidationError(
                "bad_target_modules", f"target_modules regex {modules!r}: {exc}"
            ) from exc
        if not modules.strip():
            raise AdapterValidationError("bad_target_modules", "target_modules is empty")
        return (modules,)
    if (
        not isinstance(modules, list)
        or not modules
        or not all(isinstance(m, str) and m.strip() for m in modules)
    ):
        raise AdapterValidationError(
            "bad_target_modules",
            f"target_modules must be a non-empty list of names or a regex: {modules!r}",
        )
    unknown = sorted(set(modules) - KNOWN_TARGET_MODULES)
    if unknown:
        logger.debug("adapter targets uncommon modules: %s", unknown)
    return tuple(sorted(set(modules)))


def _base_model(config: dict[str, Any]) -> str | None:
    base = config.get("base_model_name_or_path")
    if base is not None and not isinstance(base, str):
        raise AdapterValidationError("malformed_config", "base_model_name_or_path is not a string")
    return base or None


def _weights(directory: Path, rank: int) -> tuple[str, int | None]:
    """Name of the weight file and its tensor count (None for pickled weights)."""
    safetensors = directory / SAFETENSORS_FILE
    if safetensors.is_file():
        tensors = read_safetensors_header(safetensors)
        if not tensors:
            raise AdapterValidationError("corrupt_weights", f"{SAFETENSORS_FILE} has no tensors")
        for tensor in tensors:
            if "lora_A" in tensor.name and tensor.shape and tensor.shape[0] > rank:
                raise AdapterValidationError(
                    "corrupt_weights",
                    f"{tensor.name} has rank {tensor.shape[0]} but the config allows {rank}",
                )
        return SAFETENSORS_FILE, len(tensors)
    for name in PICKLE_WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            if path.stat().st_size == 0:
                raise AdapterValidationError("corrupt_weights", f"{name} is empty")
            return name, None
    raise AdapterValidationError(
        "missing_weights",
        f"none of {SAFETENSORS_FILE}, {', '.join(PICKLE_WEIGHT_FILES)} found in {directory}",
    )


def inspect_adapter(directory: Path) -> AdapterManifest:
    """Read and check a PEFT LoRA/DoRA adapter directory; raise AdapterValidationError if bad."""
    config = _read_config(directory)
    variant = _peft_variant(config)
    rank = _rank(config)
    alpha = _alpha(config)
    target_modules = _target_modules(config)
    base_model = _base_model(config)
    weight_file, tensor_count = _weights(directory, rank)
    return AdapterManifest(
        rank=rank,
        alpha=alpha,
        target_modules=target_modules,
        variant=variant,
        base_model=base_model,
        weight_file=weight_file,
        tensor_count=tensor_count,
        sha256=adapter_sha256(directory),
    )
