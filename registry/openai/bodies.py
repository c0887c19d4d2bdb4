"""Request bodies of the front door's own endpoints (dispatch, feedback), validated with limits.

A body that is not valid JSON, not an object, or not of the documented shape becomes an
:class:`InvalidRequest` (HTTP 400, OpenAI error shape) naming the offending field, before any
work is done.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from registry.openai.errors import InvalidRequest

#: The longest objective the dispatcher accepts (characters); longer is a 400, not a truncation.
MAX_OBJECTIVE_CHARS = 32_000
MAX_CONTEXT_REFS = 64
MAX_REF_CHARS = 1_024
MAX_BATCH_TASKS = 256
MAX_REQUEST_ID_CHARS = 64

Model = TypeVar("Model", bound=BaseModel)


class DispatchTaskIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    objective: str = Field(min_length=1, max_length=MAX_OBJECTIVE_CHARS)
    context_refs: list[str] = Field(default_factory=list, max_length=MAX_CONTEXT_REFS)

    def model_post_init(self, _context: Any) -> None:
        if not self.objective.strip():
            raise ValueError("objective is blank")
        for ref in self.context_refs:
            if not ref.strip() or len(ref) > MAX_REF_CHARS:
                raise ValueError(f"context_refs: each must be 1-{MAX_REF_CHARS} characters")


class DispatchBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    tasks: list[DispatchTaskIn] = Field(min_length=1, max_length=MAX_BATCH_TASKS)


class DispatchHintIn(BaseModel):
    """The optional ``dispatch`` field of a ``model="auto"`` completion request."""

    model_config = ConfigDict(extra="forbid", strict=True)

    context_refs: list[str] = Field(default_factory=list, max_length=MAX_CONTEXT_REFS)


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    # printable ASCII (ids are hex): NUL or look-alikes are a 400, never a database query
    request_id: str = Field(
        min_length=1, max_length=MAX_REQUEST_ID_CHARS, pattern=r"^[\x21-\x7e]+$"
    )
    success: StrictBool


def json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # e.g. 100,000 levels of '[': the parser gives up, not the server
        raise InvalidRequest("request body is not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    return body


def validated(model: type[Model], data: Any, *, prefix: str = "") -> Model:
    """``data`` as ``model``; the first problem becomes an :class:`InvalidRequest`."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        param = prefix + where if where else prefix.rstrip(".") or None
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise InvalidRequest(f"{param or 'body'}: {message}", param=param) from None
