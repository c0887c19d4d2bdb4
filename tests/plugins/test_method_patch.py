"""A method wrapped once in place, its own method kept under a mark, and put back exactly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from plugins.method_patch import unwrap_method, wrap_method

MARK = "_test_original_greet"


class Greeter:
    def greet(self, name: str) -> str:
        """Say hello."""
        return f"hello {name}"


class Polite(Greeter):
    pass


def shouting(original: Callable[..., Any]) -> Callable[..., Any]:
    def greet(self: Any, name: str) -> str:
        return str(original(self, name)).upper()

    return greet


def test_a_method_is_wrapped_once_and_put_back_exactly() -> None:
    own = Greeter.__dict__["greet"]
    try:
        assert wrap_method(Greeter, "greet", MARK, shouting)
        assert MARK in Greeter.__dict__
        assert Greeter().greet("vllm") == "HELLO VLLM"
        assert Greeter.greet.__doc__ == "Say hello."
        assert not wrap_method(Greeter, "greet", MARK, shouting)  # (a second install: nothing)
        assert Greeter().greet("vllm") == "HELLO VLLM"  # (not shouted twice)
        assert Polite().greet("x") == "HELLO X"  # (subclasses see it)
    finally:
        assert unwrap_method(Greeter, "greet", MARK)
    assert Greeter.__dict__["greet"] is own
    assert MARK not in Greeter.__dict__
    assert not unwrap_method(Greeter, "greet", MARK)  # (nothing left to put back)


def test_only_a_method_defined_on_the_class_itself_is_wrapped() -> None:
    with pytest.raises(KeyError):
        wrap_method(Polite, "greet", MARK, shouting)  # (inherited: wrap it where it is defined)
    assert MARK not in Polite.__dict__
