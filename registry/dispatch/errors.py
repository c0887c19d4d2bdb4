"""Typed errors of the dispatch engine.

Owns the exception classes the engine raises; each carries a stable ``code``. Imports only the
standard library (the control plane maps these onto its own problem responses).
"""

from __future__ import annotations

from typing import ClassVar


class DispatchError(Exception):
    """Base class: ``code`` names the problem, the message explains this occurrence."""

    default_code: ClassVar[str] = "dispatch_error"

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code


class InvalidConfigurationError(DispatchError, ValueError):
    """Weights, thresholds or a catalogue entry are out of range or malformed."""

    default_code = "invalid_dispatch_configuration"


class InvalidFleetError(DispatchError, ValueError):
    """The fleet handed to ``set_fleet`` is malformed (duplicate names, no domains, ...)."""

    default_code = "invalid_fleet"


class EmbeddingsUnavailableError(DispatchError):
    """Tier 3 cannot run: the optional model is not installed or failed to load."""

    default_code = "embeddings_unavailable"
