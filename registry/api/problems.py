"""RFC 9457 ``application/problem+json`` for every error the API returns (one handler)."""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from registry.api.schemas import Problem
from registry.errors import RegistryError

logger = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
PROBLEM_TYPE_BASE = "https://hi-moe-lora.dev/problems/"


def problem_response(problem: Problem, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(
        jsonable_encoder(problem.model_dump(exclude_none=True)),
        status_code=problem.status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _problem_for(exc: Exception) -> tuple[Problem, dict[str, str] | None]:
    if isinstance(exc, RegistryError):
        problem = Problem(
            type=PROBLEM_TYPE_BASE + exc.code,
            title=exc.title,
            status=exc.status,
            detail=exc.detail,
            code=exc.code,
        )
        return problem, None
    if isinstance(exc, RequestValidationError):
        errors: list[dict[str, Any]] = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
        problem = Problem(
            type=PROBLEM_TYPE_BASE + "request_validation",
            title="Invalid request",
            status=422,
            detail=detail or "request validation failed",
            code="request_validation",
            errors=errors,
        )
        return problem, None
    if isinstance(exc, StarletteHTTPException):
        if isinstance(exc.__cause__, RecursionError):  # FastAPI's JSON parsing gave up
            problem = Problem(
                type=PROBLEM_TYPE_BASE + "malformed_json",
                title="Malformed JSON",
                status=400,
                detail="request body is not valid JSON: nested too deeply",
                code="malformed_json",
            )
            return problem, None
        phrase = HTTPStatus(exc.status_code).phrase
        code = phrase.lower().replace(" ", "_").replace("-", "_")
        problem = Problem(title=phrase, status=exc.status_code, detail=str(exc.detail), code=code)
        return problem, dict(exc.headers) if exc.headers else None
    logger.error("unhandled error", exc_info=exc)
    problem = Problem(
        title="Internal Server Error", status=500, detail="internal error", code="internal_error"
    )
    return problem, None


async def problem_handler(request: Request, exc: Exception) -> Response:
    problem, headers = _problem_for(exc)
    return problem_response(problem, headers)


def install_problem_handler(app: FastAPI) -> None:
    """Route domain errors, validation errors and HTTP errors through one handler, and say so
    in the OpenAPI document (:func:`document_problems`)."""
    for exc_type in (RegistryError, RequestValidationError, StarletteHTTPException):
        app.add_exception_handler(exc_type, problem_handler)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_problems(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


#: Paths that answer in OpenAI's error shape (the front door documents its own errors).
OPENAI_PREFIX = "/v1/"
_BODY_ERRORS = (400, 413, 422)


def document_problems(schema: dict[str, Any]) -> dict[str, Any]:
    """Every error answer outside ``/v1`` as what it is: ``application/problem+json`` with the
    :class:`Problem` schema (FastAPI documents its own 422 body and puts a response ``model``
    under ``application/json``); operations with a body also answer 400 (malformed JSON), 413
    (too large) and 422."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault(
        "Problem", Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    )
    content = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path, operations in schema.get("paths", {}).items():
        if path.startswith(OPENAI_PREFIX):
            continue
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if "requestBody" in operation:
                for status in _BODY_ERRORS:
                    responses.setdefault(str(status), {})
            for status, response in responses.items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = dict(content)
                    response["description"] = HTTPStatus(int(status)).phrase
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422 body, now unused
        if f'"#/components/schemas/{name}"' not in json.dumps(schema):
            components.pop(name, None)
    return schema
