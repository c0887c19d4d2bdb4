"""The bounded label values: outcomes of statuses, reserved specialist names."""

from __future__ import annotations

import re

import pytest

from hi_moe_lora.served_names import NAME_PATTERN
from registry.metrics.labels import SPECIALIST_BASE, SPECIALIST_NONE, outcome_of


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, "success"),
        (302, "success"),
        (400, "client_error"),
        (404, "client_error"),
        (499, "client_error"),
        (500, "server_error"),
        (501, "server_error"),
        (502, "unavailable"),
        (503, "unavailable"),
        (504, "unavailable"),
    ],
)
def test_outcome_of(status: int, outcome: str) -> None:
    assert outcome_of(status) == outcome


def test_reserved_specialists_cannot_be_adapter_names() -> None:
    for reserved in (SPECIALIST_BASE, SPECIALIST_NONE):
        assert not re.fullmatch(NAME_PATTERN, reserved)
