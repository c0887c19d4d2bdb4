"""Typed errors carry stable codes."""

from __future__ import annotations

from registry.dispatch.errors import (
    DispatchError,
    EmbeddingsUnavailableError,
    InvalidConfigurationError,
    InvalidFleetError,
)


def test_codes_and_hierarchy() -> None:
    assert InvalidFleetError("x").code == "invalid_fleet"
    assert InvalidConfigurationError("x").code == "invalid_dispatch_configuration"
    assert EmbeddingsUnavailableError("x").code == "embeddings_unavailable"
    assert DispatchError("x", code="custom").code == "custom"
    assert isinstance(InvalidFleetError("x"), ValueError)
    assert isinstance(EmbeddingsUnavailableError("why").detail, str)
