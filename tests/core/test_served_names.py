"""The one parse/format pair for ``name`` and ``name@version``."""

from __future__ import annotations

import pytest

from hi_moe_lora.served_names import (
    ServedName,
    format_served_name,
    is_valid_name,
    is_valid_version,
    parse_served_name,
)


def test_format_and_parse_are_inverse() -> None:
    served = format_served_name("python-lora", "1.2.0-rc.1+build.7")
    assert served == "python-lora@1.2.0-rc.1+build.7"
    assert parse_served_name(served) == ServedName("python-lora", "1.2.0-rc.1+build.7")
    assert str(parse_served_name(served)) == served


def test_a_bare_name_means_the_active_version() -> None:
    assert parse_served_name("math-lora") == ServedName("math-lora", None)
    assert str(ServedName("math-lora")) == "math-lora"


@pytest.mark.parametrize(
    "text",
    ["", "@1.0.0", "Python-lora", "python-lora@", "python-lora@latest", "a@1.0.0@2.0.0", "a b"],
)
def test_what_cannot_be_an_adapter_parses_to_none(text: str) -> None:
    assert parse_served_name(text) is None


def test_names_and_versions() -> None:
    assert is_valid_name("a")
    assert is_valid_name("x" * 64)
    assert not is_valid_name("x" * 65)
    assert not is_valid_name("-a")
    assert not is_valid_name("a/b")
    assert is_valid_version("0.0.1")
    assert not is_valid_version("01.0.0")
    assert not is_valid_version("1.0.0-" + "a" * 130)
