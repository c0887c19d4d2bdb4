"""Programmatic dependent launch (PDL) of the fused kernel: whether it is on, and how far the
kernel runs before it waits for the kernel launched before it.

Hopper (sm_90) and later can start a kernel before the one before it on the stream has finished,
when the later launch says so (``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``; Triton's
``launch_pdl``). The later kernel then waits (``griddepcontrol.wait``, Triton's ``gdc_wait``)
before it touches anything the earlier one writes; whatever comes before the wait overlaps the
earlier kernel's tail and the launch itself. Everything launched before the earlier kernel has
finished by then, as usual.

In vLLM the kernel before ours is the base layer's GEMM: it writes ``y``, which our expand jobs
read and write, and it reads ``x``, made before it. So the modes:

- ``off``: a plain launch (the default until a GPU A/B says otherwise);
- ``launch``: every program waits first thing; only the launch and the programs' start overlap.
  Safe whatever the kernel before ours writes;
- ``overlap``: the shrink jobs (``x`` and ``A``), the tickets and the tile records run before the
  wait; only the expand jobs wait, before they touch ``y``. Safe when the kernel launched just
  before ours writes nothing of ``x``, the work list, the counters or the weights, as in vLLM's
  LoRA layers (``y = base(x)``, then the LoRA op on ``x`` and ``y``).

``HI_MOE_LORA_PDL`` picks the mode (read once; ``SWITCH.set`` in tests and benchmarks). Off on
devices older than sm_90 and without a GPU whatever it says: the wait is a Hopper instruction.
"""

from __future__ import annotations

import enum
import functools
import os

import torch

ENV = "HI_MOE_LORA_PDL"


class PdlMode(enum.IntEnum):
    """Where the kernel waits for the kernel before it (the value is the kernel's
    ``GDC_WAIT``)."""

    OFF = 0
    LAUNCH = 1
    OVERLAP = 2


class PdlSettingError(ValueError):
    """``HI_MOE_LORA_PDL`` names no mode."""


def parse_mode(value: str | None) -> PdlMode:
    """The mode ``HI_MOE_LORA_PDL`` names (unset or empty: off)."""
    text = (value or "").strip().lower()
    if text in ("", "0", "off", "no", "false"):
        return PdlMode.OFF
    if text in ("launch", "1"):
        return PdlMode.LAUNCH
    if text in ("overlap", "2"):
        return PdlMode.OVERLAP
    raise PdlSettingError(f"{ENV}={value!r}: expected off, launch or overlap")


class PdlSwitch:
    """The process's PDL mode (read once from the environment; tests and benchmarks set it)."""

    def __init__(self) -> None:
        self.mode = parse_mode(os.environ.get(ENV))

    def set(self, mode: PdlMode) -> None:
        self.mode = mode


SWITCH = PdlSwitch()


@functools.cache
def supports_pdl(device_index: int) -> bool:
    """Whether the CUDA device runs programmatic dependent launches (sm_90 and later)."""
    major, _ = torch.cuda.get_device_capability(device_index)
    return major >= 9


def mode_for(x: torch.Tensor) -> PdlMode:
    """The mode a launch on ``x``'s device takes: the switch's, or off where PDL cannot run."""
    mode = SWITCH.mode
    if mode is PdlMode.OFF or not x.is_cuda or not supports_pdl(x.get_device()):
        return PdlMode.OFF
    return mode
