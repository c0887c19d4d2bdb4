"""The front door's own request bodies: shapes and limits, as OpenAI-style 400s."""

from __future__ import annotations

import pytest

from registry.openai.bodies import (
    MAX_BATCH_TASKS,
    MAX_CONTEXT_REFS,
    MAX_OBJECTIVE_CHARS,
    DispatchBatchIn,
    DispatchTaskIn,
    FeedbackIn,
    json_object,
    validated,
)
from registry.openai.errors import InvalidRequest


def test_a_valid_task() -> None:
    task = validated(DispatchTaskIn, {"objective": "fix it", "context_refs": ["a.py"]})
    assert (task.objective, task.context_refs) == ("fix it", ["a.py"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "objective"),
        ({"objective": ""}, "objective"),
        ({"objective": "   "}, None),
        ({"objective": "x" * (MAX_OBJECTIVE_CHARS + 1)}, "objective"),
        ({"objective": 42}, "objective"),
        ({"objective": "x", "context_refs": "a.py"}, "context_refs"),
        ({"objective": "x", "context_refs": [1]}, "context_refs.0"),
        ({"objective": "x", "context_refs": ["a"] * (MAX_CONTEXT_REFS + 1)}, "context_refs"),
        ({"objective": "x", "extra": 1}, "extra"),
    ],
)
def test_bad_tasks_name_the_field(body: object, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        validated(DispatchTaskIn, body)
    assert caught.value.status == 400
    if param is not None:
        assert caught.value.param == param


def test_batches_are_bounded() -> None:
    with pytest.raises(InvalidRequest):
        validated(DispatchBatchIn, {"tasks": []})
    too_many = {"tasks": [{"objective": "x"}] * (MAX_BATCH_TASKS + 1)}
    with pytest.raises(InvalidRequest):
        validated(DispatchBatchIn, too_many)
    with pytest.raises(InvalidRequest) as caught:
        validated(DispatchBatchIn, {"tasks": [{"objective": "x"}, {"objective": ""}]})
    assert caught.value.param == "tasks.1.objective"


def test_feedback_needs_a_real_boolean() -> None:
    assert validated(FeedbackIn, {"request_id": "r", "success": False}).success is False
    with pytest.raises(InvalidRequest):
        validated(FeedbackIn, {"request_id": "r", "success": "yes"})
    with pytest.raises(InvalidRequest):
        validated(FeedbackIn, {"request_id": "r" * 65, "success": True})


def test_json_object() -> None:
    assert json_object(b'{"a": 1}') == {"a": 1}
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        json_object(b"{")
    with pytest.raises(InvalidRequest, match="JSON object"):
        json_object(b"[1]")
