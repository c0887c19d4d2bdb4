"""vLLM plugin: serve PEFT DoRA adapters, unmerged, beside LoRA adapters and the base model.

DoRA (weight-decomposed LoRA) computes ``y = g * (W x + B A x)`` per output feature, with
``g = m / ||W + B A||_row`` (``m``: the adapter's ``lora_magnitude_vector``; the norm runs over
the input dimension; ``B`` already carries the LoRA scaling, as vLLM stores it). vLLM rejects
DoRA ("vLLM does not yet support DoRA"). This plugin lifts that for what it serves:

- vLLM's checkpoint reader (``LoRAModel.from_local_checkpoint``) sets a DoRA adapter's
  magnitude vectors aside (vLLM's loader knows only ``lora_A``/``lora_B``) and keeps them on
  the loaded adapter (``dora_magnitudes``);
- loading checks what the running model can serve and refuses the rest with a ``ValueError``
  naming the reason (vLLM answers the request with it): DoRA on a layer with a bias, on an
  embedding or ``lm_head``, or under tensor parallelism. A quantized base layer (AWQ, GPTQ,
  FP8, ...) is served: its squared row norms are computed once, when the first DoRA adapter
  touching it loads, through the layer's own kernel applied to the identity (what it serves
  is the dequantized weight); a kernel that cannot do that is refused there;
- when vLLM puts an adapter in a slot (``activate_adapter``), each layer's ``g`` is computed
  **once** (:func:`dora_scales`: float32, on the device, from the slot's own copy of A and B
  and one product of the served base layer, batched over the layers of one shape; warmed up
  when the LoRA layers are created) into that layer's scale table (one row per slot, ones for
  LoRA adapters; a last row of ones for base-model tokens) and the slot's DoRA flag is set
  (cleared for a LoRA adapter that follows a DoRA adapter in a slot);
- the output (base plus LoRA delta) of a DoRA slot's tokens is multiplied by the slot's row:
  on CUDA with our kernels (``fused``) in the fused kernel's epilogue (each LoRA layer hands its
  table and flags to our Punica wrapper's ``add_lora_linear``), so DoRA, LoRA and base-model
  tokens share one launch; on the CPU build by a PyTorch multiply after each LoRA layer.

Installed by the ``hi_moe_lora_kernels`` plugin (``plugins.punica``): on the CPU platform, and
on CUDA with our kernels unless vLLM's dual-stream LoRA is on (it hands the kernel a zeroed
output, so there is no base output to scale). ``install`` is idempotent; the caller logs a
failure and vLLM's refusal stays.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from plugins.dora_scales import dora_scales

logger = logging.getLogger(__name__)

#: The suffix of a magnitude vector in a PEFT checkpoint.
MAGNITUDE_SUFFIX = ".lora_magnitude_vector"
#: vLLM's refusal, dropped from its feature check while this plugin is installed.
VLLM_DORA_REFUSAL = "vLLM does not yet support DoRA."
#: The attribute that holds a LoRA layer's DoRA scale table.
SCALE_TABLE = "hi_moe_lora_dora_scale"
#: The attribute that holds a LoRA layer's per-slot DoRA flags (int32, 1: a DoRA adapter).
LIVE_FLAGS = "hi_moe_lora_dora_live"
#: The attribute that holds a base linear layer's squared row norms (kept at load, or computed
#: once through a quantized layer's kernel: :func:`row_norms`).
ROW_NORMS = "hi_moe_lora_row_norm_sq"
#: The manager attribute that holds the slots whose rows a DoRA adapter wrote.
_DORA_SLOTS = "_hi_moe_lora_dora_slots"
#: How many values one identity block may produce when a quantized layer's row norms are
#: computed through its product (float32: 256 MiB).
IDENTITY_BLOCK_VALUES = 1 << 26
_INSTALLED = "_hi_moe_lora_dora_installed"
_LOCK = threading.Lock()


def split_magnitudes(
    tensors: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``tensors`` without the magnitude vectors, and those vectors by their module's key (the
    checkpoint name without :data:`MAGNITUDE_SUFFIX`)."""
    lora: dict[str, torch.Tensor] = {}
    magnitudes: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        stem = name.removesuffix(".weight")
        if stem.endswith(MAGNITUDE_SUFFIX):
            magnitudes[stem.removesuffix(MAGNITUDE_SUFFIX)] = tensor
        else:
            lora[name] = tensor
    return lora, magnitudes


def adapter_uses_dora(lora_dir: str | Path) -> bool:
    """Whether the PEFT adapter in ``lora_dir`` says ``use_dora`` (False when unreadable)."""
    try:
        config = json.loads((Path(lora_dir) / "adapter_config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("use_dora") is True


# --- vLLM integration (imported lazily: vLLM is only there inside vLLM) ---------------------


def _read_dora_checkpoint(model_cls: Any, lora_dir: str, kwargs: dict[str, Any]) -> Any:
    """vLLM's ``LoRAModel`` of a PEFT DoRA checkpoint, magnitudes in ``dora_magnitudes``."""
    import safetensors
    from vllm.lora import utils as lora_utils

    path = Path(lora_dir) / "adapter_model.safetensors"
    if not path.is_file():
        raise ValueError(f"DoRA adapter {lora_dir}: adapter_model.safetensors not found")
    with safetensors.safe_open(str(path), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    lora_tensors, raw = split_magnitudes(tensors)
    mapper = kwargs.get("weights_mapper")
    magnitudes = {}
    for stem, vector in raw.items():
        leaf = stem.rsplit(".", 1)[-1]
        if "embed" in leaf or leaf == "lm_head":
            raise ValueError(f"DoRA on {leaf} is not supported")
        module, _ = lora_utils.parse_fine_tuned_lora_name(f"{stem}.lora_A.weight", mapper)
        magnitudes[module] = vector.to(torch.float32)
    lora_model_id = kwargs.get("lora_model_id")
    new_id: Any = getattr(lora_utils, "get_lora_id", None)
    model = model_cls.from_lora_tensors(
        lora_model_id=new_id() if lora_model_id is None else lora_model_id,
        tensors=lora_tensors,
        peft_helper=kwargs["peft_helper"],
        device=kwargs.get("device", "cpu"),
        dtype=kwargs.get("dtype"),
        model_vocab_size=kwargs.get("model_vocab_size"),
        weights_mapper=mapper,
        skip_prefixes=kwargs.get("skip_prefixes"),
    )
    model.dora_magnitudes = magnitudes
    logger.info("DoRA adapter %s: %d magnitude vectors", lora_dir, len(magnitudes))
    return model


def _patch_lora_model(model_cls: Any) -> None:
    """``LoRAModel.from_local_checkpoint`` reads DoRA checkpoints; ``clone`` keeps magnitudes."""
    read = model_cls.from_local_checkpoint.__func__
    clone = model_cls.clone

    def from_local_checkpoint(cls: Any, lora_dir: str, *args: Any, **kwargs: Any) -> Any:
        if adapter_uses_dora(lora_dir):
            if args:
                kwargs = {"expected_lora_modules": args[0], **kwargs}
            return _read_dora_checkpoint(cls, lora_dir, kwargs)
        return read(cls, lora_dir, *args, **kwargs)

    def clone_with_magnitudes(self: Any, lora_model_id: int) -> Any:
        copy = clone(self, lora_model_id)
        copy.dora_magnitudes = dict(getattr(self, "dora_magnitudes", {}))
        return copy

    model_cls.from_local_checkpoint = classmethod(from_local_checkpoint)
    model_cls.clone = clone_with_magnitudes


def _check_servable(manager: Any, lora: Any) -> None:
    """Refuse (``ValueError``) a DoRA adapter that the running model cannot serve; the row
    norms of a quantized base layer it touches are computed here, once (:func:`row_norms`)."""
    magnitudes: dict[str, torch.Tensor] = getattr(lora, "dora_magnitudes", {})
    if not magnitudes:
        return
    packed_into = {sub: name for name, subs in manager.packed_modules.items() for sub in subs}
    began, computed = time.perf_counter(), 0
    for module_name in magnitudes:
        layer_name = packed_into.get(module_name, module_name)
        layer = manager.modules.get(layer_name)
        if layer is None:
            raise ValueError(f"DoRA: no LoRA layer serves {module_name}")
        if getattr(layer, "tp_size", 1) != 1:
            raise ValueError("DoRA under tensor parallelism is not supported")
        base = getattr(layer, "base_layer", None)
        if getattr(base, "bias", None) is not None:
            raise ValueError(f"DoRA on a layer with a bias ({module_name}) is not supported")
        if getattr(layer, SCALE_TABLE, None) is None:
            raise ValueError(f"DoRA is not supported on {type(layer).__name__} ({module_name})")
        subs = manager.packed_modules.get(layer_name, [layer_name])
        if len(subs) != len(layer.lora_a_stacked):
            raise ValueError(
                f"DoRA on {layer_name}: {len(subs)} packed modules in "
                f"{len(layer.lora_a_stacked)} LoRA slices is not supported"
            )
        try:
            computed += getattr(base, ROW_NORMS, None) is None
            row_norms(layer)
        except Exception as error:  # a quantized kernel that cannot apply to the identity
            method = type(getattr(base, "quant_method", None)).__name__
            raise ValueError(
                f"DoRA on {module_name} ({method}): the base weight's row norms could not be "
                f"computed ({error})"
            ) from error
    if computed:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        logger.info(
            "DoRA: row norms of %d quantized base layers computed through their kernels in "
            "%.1f ms (once)",
            computed,
            (time.perf_counter() - began) * 1e3,
        )


def _add_scale_tables(manager: Any, layer_cls: Any, fused: bool) -> None:
    """Give every plain linear LoRA layer a scale table of ones (a row per slot and a last row,
    index -1, for base-model tokens) and per-slot DoRA flags; ``fused``: only where the layer's
    Punica wrapper applies them (``supports_dora``; elsewhere none, so DoRA adapters there are
    refused). Fully sharded LoRA layers take another path: none."""
    if getattr(manager.lora_config, "fully_sharded_loras", False):
        logger.info("hi-moe-lora DoRA: fully sharded LoRA layers are not supported")
        return
    layer: Any
    for layer in manager.modules.values():
        if not isinstance(layer, layer_cls):
            continue
        wrapper = getattr(layer, "punica_wrapper", None)
        if fused and not getattr(wrapper, "supports_dora", False):
            continue
        slots = manager.lora_slots
        rows = torch.ones(slots + 1, sum(layer.output_slices), device=layer.device)
        live = torch.zeros(slots, dtype=torch.int32, device=layer.device)
        layer.register_buffer(SCALE_TABLE, rows, persistent=False)
        layer.register_buffer(LIVE_FLAGS, live, persistent=False)


def _magnitudes_on(device: torch.device, magnitudes: dict[str, torch.Tensor]) -> dict[str, Any]:
    """``magnitudes`` (the adapter's CPU copies) on ``device`` in one host-to-device copy."""
    names = list(magnitudes)
    sizes = [magnitudes[name].numel() for name in names]
    flat = torch.cat([magnitudes[name].reshape(-1).to(torch.float32) for name in names])
    return dict(zip(names, torch.split(flat.to(device), sizes), strict=True))


def _fill_scales(manager: Any, lora_id: int) -> bool:
    """Write every layer's scale row (and DoRA flag) of the slot that adapter ``lora_id`` now
    holds; True if it is a DoRA adapter. The scales come from the slot's own copy of A and B
    (what the kernel serves, already on the device) and the magnitudes (copied over at once),
    batched over the layers of one shape (:func:`dora_scales`); a LoRA adapter in a slot that
    no DoRA adapter has held since its rows were last reset costs nothing."""
    index = manager.lora_index_to_id.index(lora_id)
    lora = manager._registered_adapters[lora_id]
    magnitudes: dict[str, torch.Tensor] = getattr(lora, "dora_magnitudes", {})
    dora_slots: set[int] = manager.__dict__.setdefault(_DORA_SLOTS, set())
    if not magnitudes and index not in dora_slots:
        return False
    plain, groups = _shape_groups(manager, lambda sub: sub in magnitudes)
    if plain:
        _write_rows(plain, index, None)
    on_device = _magnitudes_on(next(iter(groups))[3], magnitudes) if groups else {}
    for (slices, *_), members in groups.items():
        norms = [row_norms(layer) for layer, _ in members]
        scales = _slot_scales(slices, members, index, norms, on_device.get)
        _write_rows([layer for layer, _ in members], index, scales)
    if magnitudes:
        dora_slots.add(index)
    else:
        dora_slots.discard(index)
    return bool(magnitudes)


def _shape_groups(
    manager: Any, has_magnitude: Callable[[str], bool]
) -> tuple[list[Any], dict[tuple[Any, ...], list[tuple[Any, list[str]]]]]:
    """The layers with a scale table that no magnitude touches, and the others grouped by
    what :func:`dora_scales` batches over: output slices, the shapes of A's slot, which
    slices have magnitudes, device (the last item of each key). Each member: the layer and
    the modules packed into it."""
    plain: list[Any] = []
    groups: dict[tuple[Any, ...], list[tuple[Any, list[str]]]] = {}
    for name, layer in manager.modules.items():
        table: torch.Tensor | None = getattr(layer, SCALE_TABLE, None)
        if table is None:
            continue
        subs = manager.packed_modules.get(name, [name])
        present = tuple(has_magnitude(sub) for sub in subs)
        if not any(present):
            plain.append(layer)
            continue
        a_shapes = tuple(tuple(stacked.shape[-2:]) for stacked in layer.lora_a_stacked)
        key = (tuple(layer.output_slices), a_shapes, present, table.device)
        groups.setdefault(key, []).append((layer, subs))
    return plain, groups


def _warm_up(manager: Any) -> None:
    """Run :func:`dora_scales` once per layer shape on slot 0's (zero) A and B, results
    dropped, so that the first DoRA activation does not pay the device's one-off costs (its
    first batched float32 GEMMs, the first products of those shapes through the base layers'
    kernels: 200-550 ms on an H100). The row norms are stand-ins: a quantized layer's are
    computed only when a DoRA adapter needs them."""
    began = time.perf_counter()
    _, groups = _shape_groups(manager, lambda sub: True)
    for (slices, _, _, device), members in groups.items():
        ones = torch.ones(sum(slices), device=device)
        stand_ins = {
            sub: ones[:size] for _, subs in members for sub, size in zip(subs, slices, strict=True)
        }
        _slot_scales(slices, members, 0, [ones] * len(members), stand_ins.get)
    if groups:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        logger.info(
            "DoRA: scale computation warmed up on %d layer shapes in %.1f ms",
            len(groups),
            (time.perf_counter() - began) * 1e3,
        )


def _slot_scales(
    slices: tuple[int, ...],
    members: Sequence[tuple[Any, list[str]]],
    slot: int,
    norms: Sequence[torch.Tensor],
    magnitude_of: Callable[[str], torch.Tensor | None],
) -> torch.Tensor:
    """:func:`dora_scales` of one group of :func:`_shape_groups` for slot ``slot``: that slot's
    copy of each layer's A and B, each packed module's magnitude (``magnitude_of``), the
    layers' own products."""
    with torch.no_grad():
        return dora_scales(
            slices,
            norms,
            [[stacked[slot, 0] for stacked in layer.lora_a_stacked] for layer, _ in members],
            [[stacked[slot, 0] for stacked in layer.lora_b_stacked] for layer, _ in members],
            [[magnitude_of(sub) for sub in subs] for _, subs in members],
            [_served_product(layer) for layer, _ in members],
        )


def _write_rows(layers: Sequence[Any], index: int, scales: torch.Tensor | None) -> None:
    """Slot ``index``'s scale rows of ``layers`` := ``scales`` (one row per layer; flags set),
    or ones (``None``; flags cleared), in one launch for the rows and one for the flags."""
    rows = [getattr(layer, SCALE_TABLE)[index] for layer in layers]
    flags = [getattr(layer, LIVE_FLAGS)[index : index + 1] for layer in layers]
    if scales is None:
        ones = {row.numel(): torch.ones_like(row) for row in rows}  # one per width
        values = [ones[row.numel()] for row in rows]
    else:
        values = list(scales.to(rows[0].dtype).unbind(0))
    flag = torch.full_like(flags[0], 0 if scales is None else 1)
    torch._foreach_copy_(rows, values)
    torch._foreach_copy_(flags, [flag] * len(flags))


def _served_product(layer: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x W^T`` through the served base layer's own GEMM (packed, or quantized)."""
    base = layer.base_layer
    dtype = getattr(base, "params_dtype", torch.float32)

    def apply_base(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = base.quant_method.apply(base, x.to(device=layer.device, dtype=dtype))
        return out

    return apply_base


def row_norms(layer: Any) -> torch.Tensor:
    """``||W_i||^2`` of LoRA layer ``layer``'s served base weight, float32, kept on the base
    layer: taken from the weight at load where it is a plain tensor (:func:`_keep_row_norms`);
    for any other (quantized) layer computed once, here, through the layer's own product on
    the identity (``e_j W^T`` is column ``j`` of ``W``, as the kernel dequantizes it), a block
    of rows at a time."""
    base = layer.base_layer
    norms: torch.Tensor | None = getattr(base, ROW_NORMS, None)
    if norms is not None:
        return norms
    began = time.perf_counter()
    inputs = int(getattr(base, "input_size_per_partition", 0) or base.input_size)
    outputs = sum(layer.output_slices)
    dtype = getattr(base, "params_dtype", torch.float32)
    apply_base = _served_product(layer)
    total = torch.zeros(outputs, dtype=torch.float32, device=layer.device)
    block = max(1, min(inputs, IDENTITY_BLOCK_VALUES // max(outputs, 1)))
    with torch.no_grad():
        for first in range(0, inputs, block):
            rows = min(block, inputs - first)
            eye = torch.zeros(rows, inputs, dtype=dtype, device=layer.device)
            eye[:, first : first + rows].fill_diagonal_(1.0)
            total += apply_base(eye).to(torch.float32).pow(2).sum(dim=0)
    object.__setattr__(base, ROW_NORMS, total)
    logger.debug(
        "DoRA: row norms of %s (%s, %d x %d) computed through its product in %.1f ms",
        getattr(base, "prefix", type(base).__name__),
        type(getattr(base, "quant_method", None)).__name__,
        outputs,
        inputs,
        (time.perf_counter() - began) * 1e3,
    )
    return total


def _keep_row_norms(method_cls: Any) -> None:
    """Before vLLM packs a linear layer's weight for its CPU GEMM (and drops it), keep the
    squared norm of each row (``ROW_NORMS``): DoRA's scale needs it."""
    process = method_cls.process_weights_after_loading

    def process_weights_after_loading(self: Any, layer: torch.nn.Module) -> Any:
        weight = getattr(layer, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.is_floating_point():
            norms = weight.detach().to(torch.float64).pow(2).sum(dim=1).to(torch.float32)
            object.__setattr__(layer, ROW_NORMS, norms)
        return process(self, layer)

    method_cls.process_weights_after_loading = process_weights_after_loading


def install(fused: bool = False) -> bool:
    """Patch vLLM to serve DoRA; True once installed (idempotent). ``fused``: our Punica
    wrapper's kernel applies the scales (CUDA); else a PyTorch multiply after each LoRA layer."""
    from vllm.lora.layers import base_linear
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.model_manager import LoRAModelManager
    from vllm.lora.peft_helper import PEFTHelper
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    with _LOCK:
        if getattr(PEFTHelper, _INSTALLED, False):
            return True
        _keep_row_norms(UnquantizedLinearMethod)
        validate: Any = PEFTHelper._validate_features

        def validate_features(self: Any) -> list[str]:
            return [m for m in validate(self) if m != VLLM_DORA_REFUSAL]

        PEFTHelper._validate_features = validate_features  # type: ignore[method-assign]

        layer_cls = base_linear.BaseLinearLayerWithLoRA
        apply_lora: Any = layer_cls._apply_lora_to_output
        create_modules: Any = LoRAModelManager._create_lora_modules

        def create_lora_modules(self: Any) -> Any:
            result = create_modules(self)
            _add_scale_tables(self, layer_cls, fused)
            _warm_up(self)
            return result

        def apply_lora_fused(self: Any, x: torch.Tensor, output: torch.Tensor) -> Any:
            """vLLM's ``_apply_lora_to_output`` on CUDA, the layer's DoRA table and flags
            passed to our wrapper (its kernel scales DoRA slots' tokens)."""
            table = getattr(self, SCALE_TABLE, None)
            if table is None:
                return apply_lora(self, x, output)
            shape = output.shape if output.ndim == 3 else None
            if x.ndim == 3 and output.ndim == 3:  # (the transformers backend's batch axis)
                output, x = output.flatten(0, 1), x.flatten(0, 1)
            self.punica_wrapper.add_lora_linear(
                output, x, self.lora_a_stacked, self.lora_b_stacked, 1.0, self.output_slices,
                dora_scales=table, dora_live=getattr(self, LIVE_FLAGS),
            )  # fmt: skip
            return output.reshape(shape) if shape is not None else output

        def apply_lora_to_output(self: Any, x: torch.Tensor, output: torch.Tensor) -> Any:
            output = apply_lora(self, x, output)
            table = getattr(self, SCALE_TABLE, None)
            if table is None:
                return output
            flat = output.flatten(0, -2) if output.ndim == 3 else output
            slots = self.punica_wrapper.token_lora_indices[: flat.shape[0]]
            flat.mul_(table[slots].to(flat.dtype))
            return output

        LoRAModelManager._create_lora_modules = create_lora_modules  # type: ignore[method-assign]
        patched = apply_lora_fused if fused else apply_lora_to_output
        layer_cls._apply_lora_to_output = patched  # type: ignore[method-assign]

        activate: Any = LoRAModelManager.activate_adapter

        def activate_adapter(self: Any, lora_id: int) -> bool:
            activated = activate(self, lora_id)
            if activated:
                began = time.perf_counter()
                if _fill_scales(self, lora_id):
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
                    logger.info(
                        "DoRA scales of adapter %d computed in %.1f ms",
                        lora_id,
                        (time.perf_counter() - began) * 1e3,
                    )
            return bool(activated)

        LoRAModelManager.activate_adapter = activate_adapter  # type: ignore[method-assign]

        add: Any = LoRAModelManager._add_adapter

        def add_adapter(self: Any, lora: Any) -> None:
            _check_servable(self, lora)
            add(self, lora)

        LoRAModelManager._add_adapter = add_adapter  # type: ignore[method-assign]

        _patch_lora_model(LoRAModel)
        setattr(PEFTHelper, _INSTALLED, True)
    logger.info(
        "hi-moe-lora DoRA support installed (%s)",
        "in the fused kernel's epilogue" if fused else "PyTorch scale after the LoRA layers",
    )
    return True


def is_installed() -> bool:
    """Whether this process serves DoRA (``install`` ran)."""
    try:
        from vllm.lora.peft_helper import PEFTHelper
    except ImportError:
        return False
    return bool(getattr(PEFTHelper, _INSTALLED, False))
