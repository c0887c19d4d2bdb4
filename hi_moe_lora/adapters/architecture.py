"""Tensor names and shapes of a LoRA adapter, checked on their own and against the base model.

vLLM refuses a tensor name it cannot place and a shape that does not fit the layer only when it
loads the adapter, and the client then gets a generic 400. Two levels of checks run before that:

- :func:`check_tensor_names` (always, from the adapter alone): every tensor is a PEFT LoRA tensor
  (``<module>.lora_A.weight``, ``lora_B.weight``, ``lora_embedding_A/B``, DoRA's
  ``lora_magnitude_vector``) of a module that ``target_modules`` names (a list, or PEFT's regex
  matched in full against the module path), A and B come in pairs, both 2-D, with the same rank
  and none above the configured rank.
- :func:`check_against_model` (when the served base model is a local directory whose
  ``config.json`` describes a Llama-like decoder: ``model_type`` in :data:`LLAMA_LIKE`): every
  target module exists in that architecture, every tensor belongs to a layer below
  ``num_hidden_layers`` and to the right block (attention or MLP), and every input/output
  dimension equals the layer's (``hidden_size``, ``intermediate_size``, heads * ``head_dim``,
  key/value heads * ``head_dim``, ``vocab_size``).

A base model given as a hub id (no local ``config.json``), or of another architecture, gets the
first level only. Stdlib only.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.safetensors_header import TensorInfo, quoted

logger = logging.getLogger(__name__)

MODEL_CONFIG_FILE = "config.json"
MAX_MODEL_CONFIG_BYTES = 1 << 20
#: ``model_type`` values whose decoder layers are Llama's (q/k/v/o_proj, gate/up/down_proj).
LLAMA_LIKE = frozenset({"llama", "mistral", "qwen2", "qwen3"})
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")

# <module path>.<kind>; kind: lora_A/B (linear), lora_embedding_A/B, DoRA's magnitude vector
_LORA_KEY = re.compile(
    r"base_model\.model\.(?P<module>(?:[A-Za-z0-9_]+\.)*[A-Za-z0-9_]+)\."
    r"(?P<kind>lora_A\.weight|lora_B\.weight|lora_embedding_A|lora_embedding_B"
    r"|lora_magnitude_vector(?:\.weight)?)"
)
_LAYER_MODULE = re.compile(
    r"model\.layers\.(?P<layer>\d+)\.(?P<block>self_attn|mlp)\.(?P<name>\w+)"
)


class ModelConfigError(Exception):
    """The served base model's ``config.json`` exists but cannot be used."""


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a Llama-like decoder, from its ``config.json``."""

    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int

    def linear(self, module: str) -> tuple[int, int] | None:
        """``(in_features, out_features)`` of a projection of a decoder layer, if it has one."""
        q_out = self.num_attention_heads * self.head_dim
        kv_out = self.num_key_value_heads * self.head_dim
        dims = {
            "q_proj": (self.hidden_size, q_out),
            "k_proj": (self.hidden_size, kv_out),
            "v_proj": (self.hidden_size, kv_out),
            "o_proj": (q_out, self.hidden_size),
            "gate_proj": (self.hidden_size, self.intermediate_size),
            "up_proj": (self.hidden_size, self.intermediate_size),
            "down_proj": (self.intermediate_size, self.hidden_size),
        }
        return dims.get(module)

    @property
    def modules(self) -> frozenset[str]:
        """Module names ``target_modules`` may use for this architecture."""
        return frozenset({*ATTENTION_MODULES, *MLP_MODULES, "embed_tokens", "lm_head"})


def _dimension(config: dict[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelConfigError(f"{MODEL_CONFIG_FILE}: {key} is missing or not a positive integer")
    return value


def model_shape_from_config(config: dict[str, Any]) -> ModelShape | None:
    """The shape of a Llama-like model; ``None`` for another architecture."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in LLAMA_LIKE:
        return None
    hidden = _dimension(config, "hidden_size")
    heads = _dimension(config, "num_attention_heads")
    if config.get("head_dim") is not None:
        head_dim = _dimension(config, "head_dim")
    elif hidden % heads == 0:
        head_dim = hidden // heads
    else:
        raise ModelConfigError(f"{MODEL_CONFIG_FILE}: hidden_size is not a multiple of the heads")
    return ModelShape(
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=_dimension(config, "intermediate_size"),
        num_hidden_layers=_dimension(config, "num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=_dimension(config, "num_key_value_heads", heads),
        head_dim=head_dim,
        vocab_size=_dimension(config, "vocab_size"),
    )


def load_model_shape(base_model: str) -> ModelShape | None:
    """The shape of the served base model, if it is a local directory with a Llama-like config.

    ``None`` (only the adapter-level checks apply) for a hub id, a directory without
    ``config.json`` or another architecture; :class:`ModelConfigError` for a config that is
    there but unreadable.
    """
    directory = Path(base_model).expanduser()
    path = directory / MODEL_CONFIG_FILE
    if not directory.is_dir() or not path.is_file():
        return None
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_MODEL_CONFIG_BYTES + 1)
        if len(raw) > MAX_MODEL_CONFIG_BYTES:
            raise ModelConfigError(f"{MODEL_CONFIG_FILE} is larger than {MAX_MODEL_CONFIG_BYTES}")
        config = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{MODEL_CONFIG_FILE} cannot be read: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelConfigError(f"{MODEL_CONFIG_FILE} is not a JSON object")
    shape = model_shape_from_config(config)
    if shape is None:
        logger.info(
            "base model type %r is not Llama-like: adapter shapes are not checked against it",
            config.get("model_type"),
        )
    return shape


@dataclass
class _Module:
    path: str  # e.g. "model.layers.0.self_attn.q_proj"
    a: TensorInfo | None = None
    b: TensorInfo | None = None
    magnitude: TensorInfo | None = None
    embedding: bool = False

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


def _modules(tensors: Sequence[TensorInfo]) -> dict[str, _Module]:
    modules: dict[str, _Module] = {}
    for tensor in tensors:
        match = _LORA_KEY.fullmatch(tensor.name)
        if match is None:
            raise AdapterValidationError(
                "unknown_tensor",
                f"tensor {quoted(tensor.name)} is not a PEFT LoRA tensor "
                "(<module>.lora_A.weight, lora_B.weight, lora_embedding_A/B, "
                "lora_magnitude_vector)",
            )
        module = modules.setdefault(match["module"], _Module(match["module"]))
        kind = match["kind"]
        if kind.startswith("lora_magnitude_vector"):
            slot = "magnitude"
        else:
            slot = "a" if kind in ("lora_A.weight", "lora_embedding_A") else "b"
            module.embedding = module.embedding or kind.startswith("lora_embedding")
        if getattr(module, slot) is not None:
            raise AdapterValidationError(
                "unknown_tensor", f"tensor {quoted(tensor.name)} duplicates another tensor"
            )
        setattr(module, slot, tensor)
    return modules


def _targeted(module: _Module, target_modules: tuple[str, ...], is_regex: bool) -> bool:
    if is_regex:
        return re.fullmatch(target_modules[0], module.path) is not None
    return module.name in target_modules


def check_tensor_names(
    tensors: Sequence[TensorInfo],
    *,
    target_modules: tuple[str, ...],
    is_regex: bool,
    rank: int,
    dora: bool = False,
) -> None:
    """Adapter-level checks of names and shapes (see the module docstring); ``dora``: the
    config says ``use_dora``, so every module needs its magnitude vector, and only linear
    projections may carry one."""
    for module in _modules(tensors).values():
        _check_variant(module, dora)
        if not _targeted(module, target_modules, is_regex):
            raise AdapterValidationError(
                "unknown_tensor",
                f"tensors for module {quoted(module.path)}, which target_modules does not name",
            )
        if module.a is None or module.b is None:
            raise AdapterValidationError(
                "unknown_tensor", f"module {quoted(module.path)} lacks its lora_A or lora_B tensor"
            )
        if len(module.a.shape) != 2 or len(module.b.shape) != 2:
            raise AdapterValidationError(
                "tensor_shape_mismatch",
                f"LoRA tensors of module {quoted(module.path)} must be 2-D",
            )
        if module.a.shape[0] != module.b.shape[1]:
            raise AdapterValidationError(
                "tensor_shape_mismatch",
                f"module {quoted(module.path)}: lora_A has rank {module.a.shape[0]}, "
                f"lora_B has rank {module.b.shape[1]}",
            )
        if module.a.shape[0] > rank:
            raise AdapterValidationError(
                "corrupt_weights",
                f"{module.a.name} has rank {module.a.shape[0]} but the config allows {rank}",
            )
        if module.magnitude is not None and len(module.magnitude.shape) != 1:
            raise AdapterValidationError(
                "tensor_shape_mismatch",
                f"module {quoted(module.path)}: lora_magnitude_vector must be 1-D",
            )


def _check_variant(module: _Module, dora: bool) -> None:
    """DoRA's magnitude vectors where, and only where, the config's variant puts them."""
    if module.magnitude is not None and not dora:
        raise AdapterValidationError(
            "unsupported_variant",
            f"module {quoted(module.path)} has a lora_magnitude_vector, but adapter_config.json "
            "does not say use_dora",
        )
    if not dora:
        return
    if module.embedding or module.name in ("embed_tokens", "lm_head"):
        raise AdapterValidationError(
            "unsupported_variant",
            f"DoRA on {quoted(module.name)} is not supported: DoRA is served on linear "
            "projections only",
        )
    if module.magnitude is None:
        raise AdapterValidationError(
            "unsupported_variant",
            f"module {quoted(module.path)} lacks its lora_magnitude_vector (use_dora is set)",
        )


def _expected(module: _Module, model: ModelShape) -> tuple[int, int]:
    """``(in_features, out_features)`` the module has in ``model``; raise if it has none."""
    if module.path == "model.embed_tokens" and module.embedding:
        return model.vocab_size, model.hidden_size
    if module.path == "lm_head" and not module.embedding:
        return model.hidden_size, model.vocab_size
    match = _LAYER_MODULE.fullmatch(module.path)
    if match is not None and not module.embedding:
        block = ATTENTION_MODULES if match["block"] == "self_attn" else MLP_MODULES
        dims = model.linear(match["name"])
        if int(match["layer"]) < model.num_hidden_layers and match["name"] in block and dims:
            return dims
    raise AdapterValidationError(
        "unknown_module",
        f"module {quoted(module.path)} does not exist in the served base model "
        f"({model.model_type}, {model.num_hidden_layers} layers)",
    )


def check_against_model(
    tensors: Sequence[TensorInfo],
    *,
    target_modules: tuple[str, ...],
    is_regex: bool,
    model: ModelShape,
) -> None:
    """Model-level checks (see the module docstring); run after :func:`check_tensor_names`."""
    if not is_regex:
        missing = sorted(set(target_modules) - model.modules)
        if missing:
            raise AdapterValidationError(
                "unknown_module",
                f"target_modules names {', '.join(quoted(m) for m in missing)}, which the served "
                f"base model ({model.model_type}) does not have",
            )
    for module in _modules(tensors).values():
        in_features, out_features = _expected(module, model)
        if module.a is None or module.b is None:  # check_tensor_names refuses that first
            continue
        if module.a.shape[1] != in_features or module.b.shape[0] != out_features:
            raise AdapterValidationError(
                "tensor_shape_mismatch",
                f"module {quoted(module.path)} maps {module.a.shape[1]} -> {module.b.shape[0]} "
                f"features; the served base model's maps {in_features} -> {out_features}",
            )
        if module.magnitude is not None and module.magnitude.shape != (out_features,):
            raise AdapterValidationError(
                "tensor_shape_mismatch",
                f"module {quoted(module.path)}: lora_magnitude_vector does not have "
                f"{out_features} entries",
            )
