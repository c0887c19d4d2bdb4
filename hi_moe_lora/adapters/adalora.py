"""AdaLoRA adapters, converted at registration into the plain LoRA adapter vLLM serves.

AdaLoRA (PEFT ``peft_type: ADALORA``) stores each module's update in SVD form: ``lora_A``
(``r x in``), the singular values ``lora_E`` (``r x 1``) and ``lora_B`` (``out x r``); PEFT's
forward adds ``x (A * E)^T B^T * alpha / (ranknum + 1e-5)``. Its rank allocator prunes singular
values during training; the saved checkpoint already holds only the kept rows (``rank_pattern``
in the config), while PEFT's loader keeps ``ranknum`` at the initial rank ``init_r`` (it resizes
the modules and copies the old ``ranknum`` over: "the scaling is exactly as the previous"), and
the scaling is ``lora_alpha`` (the stored row count when ``lora_alpha`` is not positive).

:func:`convert_adalora` folds that into an equivalent plain LoRA artifact in place:

- per module, ``A' = (A * E)`` over the rows whose singular value is not zero (the effective
  rank), ``B' = B * scaling / (init_r + 1e-5)`` over the same columns; every module padded with
  zero rows to the largest effective rank ``R``; the config says ``r = lora_alpha = R`` (scaling
  1, so the factor lives in ``B'``);
- before anything is written, each module is checked against PEFT's own AdaLoRA layer
  (``SVDLinear``, built around a zero base) on random inputs in float64;
- the original files move to ``original/`` beside the converted ones, and
  ``adalora_conversion.json`` records the effective rank of every module, the scaling and the
  error found by the check.

The conversion needs torch, safetensors and peft (the ``tiny`` extra; vLLM brings torch and
safetensors); they are imported only when an AdaLoRA adapter is registered, so the rest of
:mod:`hi_moe_lora.adapters` stays standard-library only.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hi_moe_lora.adapters.checksum import CONFIG_FILE
from hi_moe_lora.adapters.errors import AdapterValidationError
from hi_moe_lora.adapters.inspection import SAFETENSORS_FILE, checked_weights, read_config
from hi_moe_lora.adapters.safetensors_header import quoted

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

ADALORA_PEFT_TYPE = "ADALORA"
#: Where the original AdaLoRA files are kept, inside the converted artifact's directory.
ORIGINAL_DIR = "original"
#: The conversion's record, beside the converted files.
RECORD_FILE = "adalora_conversion.json"
#: PEFT's guard against a zero rank in the AdaLoRA scaling.
RANKNUM_EPSILON = 1e-5
#: PEFT's default ``init_r`` (``AdaLoraConfig``).
DEFAULT_INIT_R = 12
#: Random inputs per module in the check against PEFT's layer.
CHECK_ROWS = 4
#: Largest relative error accepted by the check, by the stored weights' dtype (the converted
#: weights are rounded to it; the check runs in float64).
TOLERANCE = {"float64": 1e-9, "float32": 1e-5, "bfloat16": 2e-2, "float16": 4e-3}
_PARTS = ("lora_A", "lora_B", "lora_E")


@dataclass(frozen=True)
class AdaLoraConversion:
    """What :func:`convert_adalora` did: the converted rank and every module's effective one."""

    init_r: int
    lora_alpha: float
    rank: int
    effective_ranks: dict[str, int]
    pruned_rows: int
    max_relative_error: float


def is_adalora(directory: Path) -> bool:
    """Whether ``directory`` holds a PEFT AdaLoRA adapter (by its config's ``peft_type``; False
    when the config is unusable: inspection then names the problem)."""
    try:
        peft_type = read_config(directory).get("peft_type")
    except AdapterValidationError:
        return False
    return isinstance(peft_type, str) and peft_type.upper() == ADALORA_PEFT_TYPE


def _malformed(detail: str) -> AdapterValidationError:
    return AdapterValidationError("malformed_config", detail)


def _init_r(config: dict[str, Any]) -> int:
    init_r = config.get("init_r", DEFAULT_INIT_R)
    if isinstance(init_r, bool) or not isinstance(init_r, int) or init_r <= 0:
        raise _malformed("init_r must be a positive integer")
    return init_r


def _alpha(config: dict[str, Any]) -> float:
    alpha = config.get("lora_alpha", 8)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha):
        raise _malformed("lora_alpha must be a number")
    return float(alpha)


def _check_variant(config: dict[str, Any]) -> None:
    if config.get("fan_in_fan_out"):
        raise AdapterValidationError(
            "unsupported_variant",
            "AdaLoRA with fan_in_fan_out (Conv1D layers, as in GPT-2) cannot be served: vLLM "
            "serves LoRA on linear layers",
        )
    if config.get("modules_to_save"):
        raise AdapterValidationError(
            "unsupported_variant",
            "AdaLoRA with modules_to_save cannot be served (vLLM ignores them)",
        )


def _modules(tensors: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """The checkpoint's tensors by module prefix and part (``lora_A``/``lora_B``/``lora_E``)."""
    modules: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        stem = name.removesuffix(".weight")
        prefix, _, part = stem.rpartition(".")
        if part not in _PARTS or not prefix:
            raise AdapterValidationError(
                "unknown_tensor",
                f"{quoted(name)} is not an AdaLoRA tensor (lora_A, lora_B, lora_E)",
            )
        if part in modules.setdefault(prefix, {}):
            raise AdapterValidationError("unknown_tensor", f"{quoted(prefix)} has {part} twice")
        modules[prefix][part] = tensor
    if not modules:
        raise AdapterValidationError("corrupt_weights", f"{SAFETENSORS_FILE} has no tensors")
    for prefix, parts in modules.items():
        missing = [part for part in _PARTS if part not in parts]
        if missing:
            raise AdapterValidationError(
                "tensor_shape_mismatch", f"module {quoted(prefix)} lacks {', '.join(missing)}"
            )
        a, b, e = parts["lora_A"], parts["lora_B"], parts["lora_E"]
        rows = a.shape[0] if a.dim() == 2 else -1
        if a.dim() != 2 or b.dim() != 2 or tuple(e.shape) != (rows, 1) or b.shape[1] != rows:
            raise AdapterValidationError(
                "tensor_shape_mismatch",
                f"module {quoted(prefix)}: lora_A {tuple(a.shape)}, lora_E {tuple(e.shape)} and "
                f"lora_B {tuple(b.shape)} are not (r, in), (r, 1) and (out, r)",
            )
    return modules


def _scaling(alpha: float, rows: int, init_r: int) -> float:
    """PEFT's AdaLoRA factor for a loaded module of ``rows`` stored rows."""
    return (alpha if alpha > 0 else float(rows)) / (init_r + RANKNUM_EPSILON)


def _fold(parts: dict[str, torch.Tensor], scaling: float) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``A * E`` and ``B * scaling`` over the rows with a non-zero singular value (float64)."""
    a = parts["lora_A"].double()
    b = parts["lora_B"].double()
    e = parts["lora_E"].double()
    kept = e[:, 0] != 0
    return (a * e)[kept], b[:, kept] * scaling, int(kept.sum())


def _padded(a: torch.Tensor, b: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    pad = rank - a.shape[0]
    if pad == 0:
        return a, b
    a = torch.cat([a, a.new_zeros(pad, a.shape[1])])
    b = torch.cat([b, b.new_zeros(b.shape[0], pad)], dim=1)
    return a, b


def _peft_delta(
    parts: dict[str, torch.Tensor], alpha: float, init_r: int, x: torch.Tensor
) -> torch.Tensor:
    """PEFT's own AdaLoRA layer (``SVDLinear`` around a zero base) applied to ``x``, float64,
    with ``ranknum`` at ``init_r`` as PEFT's loader leaves it."""
    import torch
    from peft import AdaLoraConfig
    from peft.tuners.adalora.layer import SVDLinear

    rows, in_features = parts["lora_A"].shape
    out_features = parts["lora_B"].shape[0]
    # (PEFT types lora_alpha as int; the layer computes with whatever number it is given)
    config_class: Any = AdaLoraConfig
    layer_class: Any = SVDLinear
    peft_config = config_class(
        init_r=init_r, lora_alpha=alpha, target_modules=["x"], total_step=10, tinit=0, tfinal=0
    )
    base = _zero_linear(in_features, out_features)
    layer = layer_class(base, "default", peft_config, r=rows, lora_alpha=alpha)
    layer = layer.double()
    with torch.no_grad():
        layer.lora_A["default"].copy_(parts["lora_A"])
        layer.lora_B["default"].copy_(parts["lora_B"])
        layer.lora_E["default"].copy_(parts["lora_E"])
        layer.ranknum["default"].fill_(float(init_r))
        out: torch.Tensor = layer(x)
    return out


def _zero_linear(in_features: int, out_features: int) -> Any:
    """A ``Linear`` that claims ``in_features x out_features`` and answers zeros, holding no
    weight matrix of that size (PEFT's layer needs only the features and a weight to freeze)."""
    import torch

    class ZeroLinear(torch.nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.new_zeros(*x.shape[:-1], self.out_features)

    layer = ZeroLinear(1, 1, bias=False)
    layer.in_features, layer.out_features = in_features, out_features
    return layer


def _relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    scale = float(reference.abs().max())
    diff = float((ours - reference).abs().max())
    return diff / scale if scale > 0 else diff


def _load(directory: Path) -> dict[str, torch.Tensor]:
    checked_weights(directory)  # safetensors only; bounded header; float dtypes, all finite
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = load_file(str(directory / SAFETENSORS_FILE))
    return tensors


def _require_tools() -> None:
    try:
        import peft  # noqa: F401
        import safetensors  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise AdapterValidationError(
            "conversion_unavailable",
            "AdaLoRA adapters are converted at registration, which needs torch, safetensors "
            "and peft where the control plane runs (pip install 'hi-moe-lora[tiny]')",
        ) from exc


def convert_adalora(directory: Path) -> AdaLoraConversion:
    """Convert the AdaLoRA adapter in ``directory`` into an equivalent plain LoRA adapter, in
    place (the original files under ``original/``); raise AdapterValidationError if it cannot
    be converted or the result does not match PEFT's forward."""
    import torch
    from safetensors.torch import save_file

    config = read_config(directory)
    _check_variant(config)
    init_r, alpha = _init_r(config), _alpha(config)
    _require_tools()
    modules = _modules(_load(directory))
    dtype = next(iter(modules.values()))["lora_A"].dtype
    folded = {
        prefix: _fold(parts, _scaling(alpha, parts["lora_A"].shape[0], init_r))
        for prefix, parts in modules.items()
    }
    rank = max(kept for _, _, kept in folded.values())
    if rank == 0:
        raise AdapterValidationError(
            "unsupported_variant", "every singular value is zero: the adapter changes nothing"
        )
    generator = torch.Generator().manual_seed(0)
    converted: dict[str, torch.Tensor] = {}
    worst = 0.0
    for prefix, (a, b, _) in folded.items():
        a, b = _padded(a, b, rank)
        a_stored, b_stored = a.to(dtype).contiguous(), b.to(dtype).contiguous()
        x = torch.randn(CHECK_ROWS, a.shape[1], dtype=torch.float64, generator=generator)
        reference = _peft_delta(modules[prefix], alpha, init_r, x)
        ours = x @ a_stored.double().T @ b_stored.double().T
        error = _relative_error(ours, reference)
        limit = TOLERANCE.get(str(dtype).removeprefix("torch."), 1e-5)
        if not error <= limit:
            raise AdapterValidationError(
                "tensor_shape_mismatch",
                f"module {quoted(prefix)}: the converted LoRA differs from PEFT's AdaLoRA "
                f"forward by {error:.2e} (relative; at most {limit:.0e} allowed)",
            )
        worst = max(worst, error)
        converted[f"{prefix}.lora_A.weight"] = a_stored
        converted[f"{prefix}.lora_B.weight"] = b_stored
    result = AdaLoraConversion(
        init_r=init_r,
        lora_alpha=alpha,
        rank=rank,
        effective_ranks={prefix: kept for prefix, (_, _, kept) in folded.items()},
        pruned_rows=sum(m["lora_A"].shape[0] for m in modules.values())
        - sum(kept for _, _, kept in folded.values()),
        max_relative_error=worst,
    )
    _write(directory, config, converted, result, save_file)
    logger.info(
        "converted an AdaLoRA adapter: %d modules, rank %d (init_r %d), worst relative error "
        "%.1e against PEFT",
        len(modules),
        rank,
        init_r,
        worst,
    )
    return result


def lora_config(config: dict[str, Any], rank: int) -> dict[str, Any]:
    """The plain LoRA config of a converted AdaLoRA adapter (scaling ``rank / rank`` = 1)."""
    return {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": rank,
        "target_modules": config.get("target_modules"),
        "base_model_name_or_path": config.get("base_model_name_or_path"),
        "task_type": config.get("task_type"),
        "bias": "none",
        "lora_dropout": 0.0,
        "fan_in_fan_out": False,
        "use_dora": False,
        "use_rslora": False,
        "modules_to_save": None,
    }


def _write(
    directory: Path,
    config: dict[str, Any],
    tensors: dict[str, torch.Tensor],
    result: AdaLoraConversion,
    save_file: Any,
) -> None:
    """Move the originals to ``original/`` and write the converted files and the record; the
    converted files are written under temporary names first, so a failure leaves the originals
    where they were."""
    original = directory / ORIGINAL_DIR
    original.mkdir()
    new_weights = directory / f".{SAFETENSORS_FILE}.new"
    new_config = directory / f".{CONFIG_FILE}.new"
    save_file(tensors, str(new_weights), metadata={"format": "pt"})
    new_config.write_text(json.dumps(lora_config(config, result.rank), indent=2) + "\n")
    for name in (CONFIG_FILE, SAFETENSORS_FILE):
        os.replace(directory / name, original / name)
    os.replace(new_weights, directory / SAFETENSORS_FILE)
    os.replace(new_config, directory / CONFIG_FILE)
    (directory / RECORD_FILE).write_text(json.dumps(asdict(result), indent=2) + "\n")
