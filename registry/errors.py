"""Typed domain errors of the control plane.

Every error carries a stable ``code`` and an HTTP ``status``; the API turns them into RFC 9457
``application/problem+json`` responses in one exception handler.
"""

from __future__ import annotations

from typing import ClassVar


class RegistryError(Exception):
    """Base class: ``code`` identifies the problem, ``detail`` explains this occurrence."""

    status: ClassVar[int] = 500
    title: ClassVar[str] = "Registry error"
    default_code: ClassVar[str] = "registry_error"

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code


class NotFoundError(RegistryError):
    status = 404
    title = "Not found"
    default_code = "not_found"


class ConflictError(RegistryError):
    status = 409
    title = "Conflict"
    default_code = "conflict"


class InvalidRequestError(RegistryError):
    status = 422
    title = "Invalid request"
    default_code = "invalid_request"


class InvalidAdapterError(InvalidRequestError):
    """The artifact failed inspection or policy; ``code`` is the validation code."""

    title = "Invalid adapter"
    default_code = "invalid_adapter"


class ConfigurationError(RegistryError):
    status = 503
    title = "Control plane misconfigured"
    default_code = "misconfigured"


class SchemaNotAtHeadError(RegistryError):
    status = 503
    title = "Database schema out of date"
    default_code = "schema_not_at_head"

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(
            detail or "database is not at the latest schema: run `hi-moe-lora db upgrade`"
        )


class ServiceUnavailableError(RegistryError):
    status = 503
    title = "Service unavailable"
    default_code = "unavailable"


class DatabaseUnavailable(ServiceUnavailableError):
    """The database could not be reached (refused, timed out, connection lost): transient."""

    title = "Database unavailable"
    default_code = "database_unavailable"


class BodyTooLargeError(RegistryError):
    """The request body exceeds ``max_body_bytes`` (raised while it streams in)."""

    status = 413
    title = "Request body too large"
    default_code = "body_too_large"
