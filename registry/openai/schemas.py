"""The front door's OpenAPI documentation: request bodies and answers of ``/v1``.

The endpoints read raw bodies (completions are forwarded untouched; the front door's own bodies
are validated by :mod:`.bodies`, answering OpenAI-style errors), so FastAPI does not parse them;
these declarations make the OpenAPI document say what the endpoints take and answer.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from registry.openai.bodies import DispatchBatchIn, DispatchTaskIn, FeedbackIn


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | int | None


class OpenAIErrorOut(BaseModel):
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""

    error: OpenAIErrorBody


class ChatCompletionIn(BaseModel):
    """What the front door needs of a chat request; the rest goes to vLLM untouched."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description="a base model, an adapter, name@version, auto")
    messages: list[dict[str, Any]]


class CompletionIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description="a base model, an adapter, name@version, auto")
    prompt: str | list[Any]


class SignalOut(BaseModel):
    tier: str
    domain: str
    term: str
    weight: float


class DispatchDecisionOut(BaseModel):
    specialist: str | None
    version: str | None
    model: str
    tier: str
    domains: list[str]
    scores: dict[str, float]
    signals: list[SignalOut]
    fallback_reason: str | None


class DispatchGroupOut(BaseModel):
    specialist: str | None
    model: str
    version: str | None
    tasks: list[int]


class DispatchBatchOut(BaseModel):
    groups: list[DispatchGroupOut]
    decisions: list[DispatchDecisionOut]


class FeedbackOut(BaseModel):
    request_id: str
    served_model: str
    success: bool
    recorded: bool


class ModelCardOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: str


class ModelListOut(BaseModel):
    object: str
    data: list[ModelCardOut]


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route: these statuses answer :class:`OpenAIErrorOut`."""
    return {status: {"model": OpenAIErrorOut} for status in statuses}


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra=`` declaring a required JSON body of ``model``'s schema (inlined)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inlined(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                return inlined(definitions[ref.rsplit("/", 1)[-1]])
            return {key: inlined(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inlined(item) for item in node]
        return node

    content = {"application/json": {"schema": inlined(schema)}}
    return {"requestBody": {"required": True, "content": content}}


CHAT_BODY = json_body(ChatCompletionIn)
COMPLETION_BODY = json_body(CompletionIn)
DISPATCH_BODY = json_body(DispatchTaskIn)
DISPATCH_BATCH_BODY = json_body(DispatchBatchIn)
FEEDBACK_BODY = json_body(FeedbackIn)


class HealthOut(BaseModel):
    """``GET /v1/health``: the monitor's last picture (see ``HealthSnapshot.as_json``)."""

    model_config = ConfigDict(extra="allow")

    status: str
    upstreams: list[dict[str, Any]]
