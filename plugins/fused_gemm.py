"""Routing vLLM's LoRA linear layers to a Punica wrapper that serves their base GEMM too.

vLLM's ``BaseLinearLayerWithLoRA._apply_sync`` runs the base layer's quantization method, then
the wrapper's ``add_lora_linear``: two launches (three with vLLM's kernels), and the base GEMM
never sees the LoRA. Installed (``HI_MOE_LORA_FUSED_GEMM`` resolved on, our CUDA wrapper), it
first asks the layer's wrapper for the whole output (``base_and_lora_linear(layer, x, bias)``,
:class:`plugins.punica_wrapper.HiMoePunicaWrapperGPU`) and keeps vLLM's path wherever the
wrapper has no such method or returns None (quantized bases, a bias, LoRA layers of other
kinds). Fully sharded layers and vLLM's dual-stream path override ``apply`` and never get here.
The same method exists in vLLM 0.26 and 0.32.

:func:`enabled` resolves ``HI_MOE_LORA_FUSED_GEMM``: ``auto`` turns it on where the fused GEMM's
tile table holds measured tiles for this GPU (:mod:`hi_moe_lora.kernels.gemm_tiles`), read by
name through vLLM's platform (NVML on CUDA: no CUDA context in the processes that only route).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

from plugins.method_patch import unwrap_method, wrap_method

logger = logging.getLogger(__name__)

#: Where the original ``_apply_sync`` is kept on the patched class.
_MARK = "_hi_moe_lora_apply_sync"


def enabled(choice: str) -> bool:
    """Whether the LoRA layers' base GEMM goes through the wrapper under this setting."""
    if choice in ("on", "off"):
        return choice == "on"
    return measured_gpu() is not None


@functools.cache
def measured_gpu() -> str | None:
    """This process's first GPU's name when the tile table holds it, else None (no CUDA GPU, a
    GPU not measured, or a name that cannot be read: the fused GEMM then stays off)."""
    try:
        from vllm.platforms import current_platform

        from hi_moe_lora.kernels.gemm_tiles import measured_devices

        if not current_platform.is_cuda():
            return None
        name = str(current_platform.get_device_name(0))
        measured = measured_devices()
    except Exception:
        logger.exception("hi-moe-lora: cannot tell whether this GPU's GEMM tiles were measured")
        return None
    if name not in measured:
        logger.info(
            "hi-moe-lora: no measured GEMM tiles for %s (measured: %s); LoRA stays outside the "
            "base GEMM (benchmarks/kernels/tune_gemm_tiles.py measures them)",
            name,
            ", ".join(sorted(measured)) or "none",
        )
        return None
    return name


def specialization_advice(fused: bool, specialized: bool) -> str | None:
    """A line for the log where the fused GEMM is on but vLLM's ``--specialize-active-lora``
    is not (None otherwise). Without the flag the op cannot tell one-adapter steps apart when
    a CUDA graph is captured, so those steps also run the launch for the rest of the step's
    tokens, which is empty then: a one-adapter decode step at 64 concurrent took 7,062 µs against
    6,665 with the flag (H200, benchmarks/README.md, fourteenth window)."""
    if not fused or specialized:
        return None
    return (
        "hi-moe-lora: LoRA in the base GEMM is on without vLLM's --specialize-active-lora; "
        "with it, one-adapter decode steps skip a near-empty launch per layer (about 6 % "
        "faster on an H200 at 64 concurrent)"
    )


def install() -> bool:
    """Patch ``BaseLinearLayerWithLoRA._apply_sync`` (idempotent); True once installed."""
    from vllm.lora.layers import base_linear

    if wrap_method(base_linear.BaseLinearLayerWithLoRA, "_apply_sync", _MARK, _routed_apply_sync):
        logger.info("hi-moe-lora: LoRA layers' base GEMM routed to the Punica wrapper when it can")
    return True


def _routed_apply_sync(original: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's ``_apply_sync`` preceded by the wrapper's whole layer output, where it has one."""

    def _apply_sync(self: Any, x: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
        whole = getattr(self.punica_wrapper, "base_and_lora_linear", None)
        if whole is not None:
            output = whole(self, x, bias)
            if output is not None:
                return output
        return original(self, x, bias)

    return _apply_sync


def uninstall() -> None:
    """Restore vLLM's own ``_apply_sync`` (tests, switching back)."""
    from vllm.lora.layers import base_linear

    unwrap_method(base_linear.BaseLinearLayerWithLoRA, "_apply_sync", _MARK)
