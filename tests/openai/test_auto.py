"""``model="auto"``: what the task says, the hints field, and the answer's headers."""

from __future__ import annotations

from typing import Any

import pytest

from registry.openai.auto import HINT_FIELD, objective_of, take_hints
from registry.openai.bodies import MAX_OBJECTIVE_CHARS
from registry.openai.errors import InvalidRequest


def test_the_last_user_message_is_the_objective() -> None:
    body: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "an answer"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "fix"}, {"type": "text", "text": "this"}],
            },
        ]
    }
    assert objective_of(body, "messages") == "fix\nthis"


def test_the_prompt_is_the_objective_of_a_completion() -> None:
    assert objective_of({"prompt": "def f(x):"}, "prompt") == "def f(x):"
    assert objective_of({"prompt": ["first", "second"]}, "prompt") == "first"
    with pytest.raises(InvalidRequest, match="text prompt"):
        objective_of({"prompt": [1, 2, 3]}, "prompt")


def test_a_long_objective_is_cut_not_refused() -> None:
    body = {"messages": [{"role": "user", "content": "y" * (MAX_OBJECTIVE_CHARS + 10)}]}
    assert len(objective_of(body, "messages")) == MAX_OBJECTIVE_CHARS


@pytest.mark.parametrize(
    "messages",
    [[], [{"role": "assistant", "content": "hi"}], [{"role": "user", "content": "  "}]],
)
def test_no_user_text_is_a_400(messages: list[Any]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        objective_of({"messages": messages}, "messages")
    assert caught.value.param == "messages"


def test_hints_are_taken_out_of_the_body() -> None:
    body: dict[str, Any] = {"model": "auto", HINT_FIELD: {"context_refs": ["Dockerfile"]}}
    assert take_hints(body) == ("Dockerfile",)
    assert HINT_FIELD not in body
    assert take_hints({"model": "auto"}) == ()
    with pytest.raises(InvalidRequest) as caught:
        take_hints({HINT_FIELD: {"context_refs": "Dockerfile"}})
    assert caught.value.param == "dispatch.context_refs"
