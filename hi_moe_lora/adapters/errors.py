"""Typed errors raised when an adapter directory cannot be served."""

from __future__ import annotations

from typing import Literal

ValidationCode = Literal[
    "missing_config",
    "malformed_config",
    "unsupported_peft_type",
    "missing_weights",
    "corrupt_weights",
    "rank_too_high",
    "base_model_mismatch",
    "bad_target_modules",
    "pickle_weights",
    "unsupported_dtype",
    "non_finite_weights",
    "unknown_tensor",
    "unknown_module",
    "tensor_shape_mismatch",
    "unsupported_variant",
    "conversion_unavailable",
]


class AdapterValidationError(Exception):
    """An adapter directory is unusable; ``code`` is stable, ``detail`` is for humans.

    ``detail`` may reach API clients: it names files by their adapter file name only (never a
    directory or host path) and never quotes bytes of a file that failed to parse.
    """

    def __init__(self, code: ValidationCode, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code: ValidationCode = code
        self.detail = detail
