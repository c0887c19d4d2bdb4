"""The layouts the fused LoRA kernel takes, and the checks a layer's arguments pass before its
first launch: activations and outputs, stacked A and B per slice, B's narrow copies, and the
DoRA epilogue's scales."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import RANK_CHUNK
from .worklist import MAX_SLICES


class FusedLoRAShapeError(ValueError):
    """The stacked weights or activations do not have the layout the kernel needs."""


@dataclass(frozen=True)
class DoraEpilogue:
    """A layer's DoRA scales, applied by the kernel as ``y = g * (y + delta)``.

    ``scales``: float32 ``[rows, width]``, a row per slot (more rows are ignored), a column per
    output column of the layer (``y``'s, from its first); ``live``: int32 ``[slots]``, non-zero
    where the slot holds a DoRA adapter (other slots' tokens are not scaled). Both persistent,
    so a captured CUDA graph reads what activation last wrote into them.
    """

    scales: torch.Tensor
    live: torch.Tensor

    def check(self, y: torch.Tensor, n_slots: int, offset_start: int, add_inputs: bool) -> None:
        if not add_inputs or offset_start != 0:
            raise FusedLoRAShapeError("the DoRA epilogue needs add_inputs and offset_start 0")
        scales, live = self.scales, self.live
        if scales.dtype != torch.float32 or scales.dim() != 2 or scales.stride(1) != 1:
            raise FusedLoRAShapeError("DoRA scales must be a float32 matrix, rows contiguous")
        if scales.shape[0] < n_slots or scales.shape[1] != y.shape[1]:
            raise FusedLoRAShapeError(
                f"DoRA scales {tuple(scales.shape)} do not cover {n_slots} slots x {y.shape[1]}"
            )
        if live.dtype != torch.int32 or live.dim() != 1 or live.numel() < n_slots:
            raise FusedLoRAShapeError(f"DoRA flags must be int32 with {n_slots} entries")
        if scales.device != y.device or live.device != y.device:
            raise FusedLoRAShapeError("DoRA scales and flags must be on the output's device")


def check_weights(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    """Stacked ``(slots, rank, in)`` A and ``(slots, out, rank_b)`` B per slice (3-D views)."""
    if not 1 <= len(a) <= MAX_SLICES or len(a) != len(b):
        raise FusedLoRAShapeError(f"need 1..{MAX_SLICES} slices with A and B, got {len(a)}")
    first = a[0]
    b_rank = b[0].shape[2]  # B's stored rank: the kernel takes one row stride for every slice
    for a_s, b_s in zip(a, b, strict=True):
        if a_s.shape != first.shape or a_s.dtype != first.dtype or b_s.dtype != first.dtype:
            raise FusedLoRAShapeError("all slices' A must share shape and dtype with B")
        if not (a_s.is_contiguous() and b_s.is_contiguous()):
            raise FusedLoRAShapeError("stacked LoRA weights must be contiguous")
        if b_s.shape[0] != a_s.shape[0] or not 1 <= b_s.shape[2] <= a_s.shape[1]:
            raise FusedLoRAShapeError(
                f"B {tuple(b_s.shape)} does not match A {tuple(a_s.shape)} (slots; B's stored "
                "rank at most A's)"
            )
        if b_s.shape[2] != b_rank:
            raise FusedLoRAShapeError(
                f"B is stored at rank {b_s.shape[2]} in one slice and {b_rank} in another"
            )


def check_activations(x: torch.Tensor, y: torch.Tensor, k: int, y_end: int) -> None:
    """``x`` of ``k`` inputs and ``y`` at least ``y_end`` columns wide, both ``(tokens, ...)``.
    Checked on every call (activations change between calls, weights do not)."""
    if x.dim() != 2 or y.dim() != 2:
        raise FusedLoRAShapeError("x and y must be 2-D (tokens, features)")
    if x.shape[0] != y.shape[0]:
        raise FusedLoRAShapeError(f"x has {x.shape[0]} rows, y has {y.shape[0]}")
    if x.shape[1] != k:
        raise FusedLoRAShapeError(f"A takes {k} inputs, x has {x.shape[1]}")
    if y_end > y.shape[1]:
        raise FusedLoRAShapeError(f"slices end at {y_end} > {y.shape[1]}")


def check_narrow_b(b: list[torch.Tensor], narrow_b: list[torch.Tensor]) -> None:
    """Narrow copies: one per slice, B's slots and rows, ``RANK_CHUNK`` rank columns."""
    if len(narrow_b) != len(b):
        raise FusedLoRAShapeError(f"{len(narrow_b)} narrow B copies for {len(b)} slices")
    for b_s, nb_s in zip(b, narrow_b, strict=True):
        want = (b_s.shape[0], b_s.shape[1], RANK_CHUNK)
        if tuple(nb_s.shape) != want or nb_s.dtype != b_s.dtype or not nb_s.is_contiguous():
            raise FusedLoRAShapeError(
                f"narrow B copy {tuple(nb_s.shape)} {nb_s.dtype} is not a contiguous {want} "
                f"{b_s.dtype} (B {tuple(b_s.shape)})"
            )
        if nb_s.device != b_s.device:
            raise FusedLoRAShapeError("narrow B copies must be on B's device")
