"""OpenAI-style errors of the front door.

OpenAI clients expect ``{"error": {"message", "type", "param", "code"}}`` with a meaningful status;
the ``openai`` package maps 400/404/503 to its own exception classes from that. The front door
raises :class:`OpenAIError` subclasses and one exception handler renders them; errors vLLM returns
are normalised to the same shape by :func:`normalise_upstream_error`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse, Response


class OpenAIError(Exception):
    """An error answered to an OpenAI client; ``status``/``type``/``code`` are per class."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def payload(self) -> dict[str, Any]:
        return error_payload(self.message, self.type, self.param, self.code)


class InvalidRequest(OpenAIError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ModelNotFound(OpenAIError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"

    def __init__(self, model: str, reason: str | None = None) -> None:
        message = f"The model '{model}' does not exist"
        super().__init__(f"{message}: {reason}" if reason else message, param="model")
        self.model = model


class ServiceUnavailable(OpenAIError):
    """No vLLM replica could be reached (or every one is known to be down)."""

    status = 503
    type = "server_error"
    code = "upstream_unavailable"


class GatewayTimeout(OpenAIError):
    """The vLLM replica that took the request did not answer within the read timeout."""

    status = 504
    type = "server_error"
    code = "upstream_timeout"


class RegistryRefusal(OpenAIError):
    """A registry error met on ``/v1`` (e.g. feedback for an unknown request id)."""

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = "invalid_request_error" if status < 500 else "server_error"
        self.code = code


def error_payload(
    message: str, type_: str, param: str | None = None, code: str | int | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(error: OpenAIError, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse(error.payload(), status_code=error.status, headers=headers)


def normalise_upstream_error(status: int, body: bytes) -> dict[str, Any]:
    """vLLM's error body in OpenAI form, whatever vLLM version or proxy produced it.

    vLLM >= 0.10 answers ``{"error": {...}}``; older versions ``{"object": "error", "message",
    "type", "param", "code"}``; a proxy in between may answer plain text.
    """
    try:
        parsed: Any = json.loads(body) if body else None
    except ValueError:
        parsed = None
    default_type = "invalid_request_error" if status < 500 else "server_error"
    if isinstance(parsed, Mapping):
        inner = parsed.get("error")
        source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else parsed
        if isinstance(inner, str):
            source = {"message": inner}
        message = source.get("message") or source.get("detail")
        if message is not None:
            return error_payload(
                str(message),
                str(source.get("type") or default_type),
                _optional_str(source.get("param")),
                _code(source.get("code"), status),
            )
    text = body.decode("utf-8", "replace").strip()[:2000]
    return error_payload(text or f"upstream answered HTTP {status}", default_type, None, status)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _code(value: Any, status: int) -> str | int | None:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return value
    return status
