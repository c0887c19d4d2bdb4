"""Inspecting a PEFT adapter directory: config, safetensors header, tensor names and values.

Reads ``adapter_config.json`` and ``adapter_model.safetensors`` (header, tensor names and shapes,
and every value, streamed: weights must be finite) and returns an :class:`AdapterManifest`.
Pickled weights (``adapter_model.bin``/``.pt``) are refused (``pickle_weights``): loading a
pickle runs arbitrary code. Messages name files by their adapter file name only, never the
directory. Stdlib only: this module is imported inside vLLM as well as by the control plane.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from hi_moe_lora.adapters.architecture import check_tensor_names
from hi_moe_lora.adapters.checksum import CONFIG_FILE, adapter_sha256
from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.manifest import AdapterManifest, Variant
from hi_moe_lora.adapters.safetensors_header import TensorInfo, read_safetensors_layout
from hi_moe_lora.adapters.tensors import check_tensor_values

logger = logging.getLogger(__name__)

SAFETENSORS_FILE = "adapter_model.safetensors"
PICKLE_WEIGHT_FILES = ("adapter_model.bin", "adapter_model.pt")
SUPPORTED_PEFT_TYPES = frozenset({"LORA"})
MAX_CONFIG_BYTES = 1 << 20
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


def read_config(directory: Path) -> dict[str, Any]:
    """``adapter_config.json`` as a JSON object (at most 1 MiB); AdapterValidationError if not."""
    if not directory.is_dir():
        raise AdapterValidationError("missing_config", "the adapter source is not a directory")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise AdapterValidationError("missing_config", f"{CONFIG_FILE} not found")
    with path.open("rb") as handle:
        raw = handle.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise AdapterValidationError(
            "malformed_config", f"{CONFIG_FILE} is larger than {MAX_CONFIG_BYTES} bytes"
        )
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AdapterValidationError(
            "malformed_config", f"{CONFIG_FILE} is not valid JSON"
        ) from exc
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
            "unsupported_peft_type",
            f"peft_type {peft_type!r} is not supported (LORA; ADALORA is converted at "
            "registration)",
        )
    use_dora = config.get("use_dora", False)
    if not isinstance(use_dora, bool):
        raise AdapterValidationError("malformed_config", "use_dora is not a boolean")
    return "dora" if use_dora else "lora"


def _rank(config: dict[str, Any]) -> int:
    """The largest rank of any module: ``r``, or a bigger one from ``rank_pattern``."""
    rank = config.get("r")
    if not _positive_int(rank):
        raise AdapterValidationError("malformed_config", "r must be a positive integer")
    assert isinstance(rank, int)
    pattern = config.get("rank_pattern") or {}
    if not isinstance(pattern, dict) or not all(_positive_int(v) for v in pattern.values()):
        raise AdapterValidationError("malformed_config", "rank_pattern must map names to ranks")
    ranks = [rank, *(int(v) for v in pattern.values())]
    return max(ranks)


def _alpha(config: dict[str, Any]) -> float:
    alpha = config.get("lora_alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or alpha <= 0:
        raise AdapterValidationError("malformed_config", "lora_alpha must be a positive number")
    return float(alpha)


def _target_modules(config: dict[str, Any]) -> tuple[str, ...]:
    modules = config.get("target_modules")
    if isinstance(modules, str):
        try:
            re.compile(modules)
        except re.error as exc:
            raise AdapterValidationError(
                "bad_target_modules", f"target_modules is not a valid regular expression ({exc})"
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
            "bad_target_modules", "target_modules must be a non-empty list of names or a regex"
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


def checked_weights(directory: Path) -> tuple[str, list[TensorInfo]]:
    """Name of the weight file and its tensors (header checked, every value finite)."""
    safetensors = directory / SAFETENSORS_FILE
    if safetensors.is_file():
        layout = read_safetensors_layout(safetensors)
        if not layout.tensors:
            raise AdapterValidationError("corrupt_weights", f"{SAFETENSORS_FILE} has no tensors")
        check_tensor_values(safetensors, layout)
        return SAFETENSORS_FILE, layout.tensors
    for name in PICKLE_WEIGHT_FILES:
        if (directory / name).exists():
            raise AdapterValidationError(
                "pickle_weights",
                f"{name} is a pickle, which can run code when loaded: only {SAFETENSORS_FILE} "
                "is accepted (convert with safetensors' torch save_file)",
            )
    raise AdapterValidationError("missing_weights", f"{SAFETENSORS_FILE} not found")


def inspect_adapter(directory: Path) -> AdapterManifest:
    """Read and check a PEFT LoRA/DoRA adapter directory; raise AdapterValidationError if bad."""
    config = read_config(directory)
    variant = _peft_variant(config)
    rank = _rank(config)
    alpha = _alpha(config)
    target_modules = _target_modules(config)
    base_model = _base_model(config)
    weight_file, tensors = checked_weights(directory)
    check_tensor_names(
        tensors,
        target_modules=target_modules,
        is_regex=isinstance(config.get("target_modules"), str),
        rank=rank,
        dora=variant == "dora",
    )
    return AdapterManifest(
        rank=rank,
        alpha=alpha,
        target_modules=target_modules,
        variant=variant,
        base_model=base_model,
        weight_file=weight_file,
        tensor_count=len(tensors),
        sha256=adapter_sha256(directory),
        tensors=tuple(tensors),
        target_modules_regex=isinstance(config.get("target_modules"), str),
    )
