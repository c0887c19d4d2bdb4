"""Fuzzing the admin API and the front door from their OpenAPI document (schemathesis).

Every operation gets valid (positive) and invalid (negative) requests generated from the schema,
sent in-process (ASGI) to an app built with ``create_app`` (SQLite, no health checks, no
warm-up, no embeddings, vLLM behind a closed port). Required: no 5xx, and every answer conforms
to the document (status, content type, headers, body schema); invalid requests are refused.

The one allowed 5xx: 503 from the operations that must reach vLLM (completions, the model list,
the dispatcher's base-model fallback), since nothing listens behind the closed port; that is
the correct answer there, and its body must still be the documented OpenAI error.

Bounded in time: ``HI_MOE_LORA_FUZZ_EXAMPLES`` examples per operation and mode (default 15),
deterministic (derandomized), no shrinking.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error, positive_data_acceptance  # noqa: E402
from schemathesis.python.asgi import shutdown_lifespans  # noqa: E402

from registry.app import create_app  # noqa: E402
from registry.db.migrate import upgrade_to_head  # noqa: E402
from registry.settings import ControlPlaneSettings  # noqa: E402
from tests.support.adapter_files import DEFAULT_BASE_MODEL  # noqa: E402

EXAMPLES = int(os.environ.get("HI_MOE_LORA_FUZZ_EXAMPLES", "15"))
#: Operations that forward to vLLM (or ask it for its base model): 503 is their right answer.
NEEDS_UPSTREAM = {
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "GET /v1/models",
    "POST /v1/dispatch",
    "POST /v1/dispatch/batch",
}
BUDGET_S = 90.0
#: 5xx are judged above (503 allowed where vLLM is needed). Schema-valid requests may still be
#: refused by the registry's rules, which depend on state a schema cannot express (the source
#: directory must exist and hold an adapter, the adapter must be registered, weights must sum
#: to at most 1): those refusals are documented 4xx, checked for shape like any other answer.
EXCLUDED_CHECKS = [not_a_server_error, positive_data_acceptance]


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("fuzz")
    url = f"sqlite:///{root / 'registry.db'}"
    upgrade_to_head(url)
    app = create_app(
        ControlPlaneSettings(
            database_url=url,
            artifact_dir=root / "artifacts",
            base_model=DEFAULT_BASE_MODEL,
            vllm_urls=["http://127.0.0.1:9"],  # closed: /v1 completions answer 503
            dispatch_embeddings=False,
            health_checks=False,
            warmup=False,
        )
    )
    loaded = schemathesis.openapi.from_asgi("/openapi.json", app)  # starts the lifespan
    try:
        yield loaded
    finally:
        shutdown_lifespans()


def _label(operation: Any) -> str:
    return f"{operation.method.upper()} {operation.path}"


def _fuzz(operation: Any, mode: GenerationMode, failures: list[str]) -> int:
    label = _label(operation)
    sent = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        nonlocal sent
        sent += 1
        response = case.call()
        status = response.status_code
        if status >= 500 and not (status == 503 and label in NEEDS_UPSTREAM):
            raise AssertionError(f"{status}: {response.text[:300]}")
        case.validate_response(response, excluded_checks=EXCLUDED_CHECKS)

    try:
        run()
    except Unsatisfiable:
        # negative mode, nothing to negate: no parameters or body, or unconstrained strings
        assert mode is GenerationMode.NEGATIVE, label
    except Exception as exc:
        failures.append(f"{label} [{mode.value}]: {type(exc).__name__}: {str(exc)[:1500]}")
    return sent


@pytest.mark.timeout(300)
def test_the_api_survives_fuzzing(schema: Any) -> None:
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = {_label(op) for op in operations}
    assert {"POST /admin/v1/adapters/{name}/versions", "POST /v1/chat/completions"} <= labels
    failures: list[str] = []
    started = time.monotonic()
    sent = 0
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            sent += _fuzz(operation, mode, failures)
    elapsed = time.monotonic() - started
    assert not failures, "\n\n".join(failures)
    assert sent >= len(operations)
    assert elapsed < BUDGET_S * max(1.0, EXAMPLES / 25), f"fuzzing took {elapsed:.0f} s"


def test_the_document_declares_every_error_shape(schema: Any) -> None:
    """Admin errors are problem+json, /v1 errors OpenAI-style; both have a body schema."""
    document = schema.raw_schema
    for path, operations in document["paths"].items():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                if status == "default" or int(status) >= 400:
                    (media_type,) = response["content"]
                    expected = (
                        "application/json"
                        if path.startswith("/v1/")
                        else ("application/problem+json")
                    )
                    assert media_type == expected, (path, status)
                    assert response["content"][media_type]["schema"], (path, status)
    assert "HTTPValidationError" not in document["components"]["schemas"]
