"""OpenAI-style error bodies, and vLLM's errors normalised to them."""

from __future__ import annotations

import pytest

from registry.openai.errors import (
    InvalidRequest,
    ModelNotFound,
    ServiceUnavailable,
    error_payload,
    normalise_upstream_error,
)


def test_error_classes_carry_status_type_and_code() -> None:
    missing = ModelNotFound("x@1.0.0", "no such version")
    assert missing.status == 404
    assert missing.payload() == {
        "error": {
            "message": "The model 'x@1.0.0' does not exist: no such version",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    assert InvalidRequest("bad", param="prompt").payload()["error"]["param"] == "prompt"
    assert InvalidRequest("bad").status == 400
    assert ServiceUnavailable("down").status == 503
    assert ServiceUnavailable("down").payload()["error"]["type"] == "server_error"


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        # vLLM >= 0.10
        (
            400,
            b'{"error": {"message": "too long", "type": "BadRequestError", "param": null, '
            b'"code": 400}}',
            error_payload("too long", "BadRequestError", None, 400),
        ),
        # older vLLM
        (
            404,
            b'{"object": "error", "message": "The model `x` does not exist.", '
            b'"type": "NotFoundError", "param": null, "code": 404}',
            error_payload("The model `x` does not exist.", "NotFoundError", None, 404),
        ),
        # FastAPI's default
        (
            422,
            b'{"detail": "bad field"}',
            error_payload("bad field", "invalid_request_error", None, 422),
        ),
        # a proxy's plain text
        (502, b"Bad Gateway", error_payload("Bad Gateway", "server_error", None, 502)),
        (500, b"", error_payload("upstream answered HTTP 500", "server_error", None, 500)),
        (400, b'{"error": "flat"}', error_payload("flat", "invalid_request_error", None, 400)),
    ],
)
def test_normalise_upstream_error(status: int, body: bytes, expected: dict[str, object]) -> None:
    assert normalise_upstream_error(status, body) == expected
