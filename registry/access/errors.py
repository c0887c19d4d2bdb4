"""Refusals of access control, as typed registry errors.

The admin API renders them as problems (``unauthorized``, ``forbidden``), ``/v1`` in OpenAI's
error shape (``registry/api/access_errors.py``); 401 answers carry ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

from registry.errors import ConfigurationError, RegistryError


class AccessError(RegistryError):
    """A request refused by access control."""


class UnauthorizedError(AccessError):
    """No token, or one that is unknown or revoked."""

    status = 401
    title = "Unauthorized"
    default_code = "unauthorized"


class ForbiddenError(AccessError):
    """A valid token whose scope does not cover the request."""

    status = 403
    title = "Forbidden"
    default_code = "forbidden"


class AccessConfigurationError(ConfigurationError):
    """The settings ask for something access control cannot give: the control plane refuses to
    start (open on a non-loopback address, API keys required without an admin secret)."""

    default_code = "access_misconfigured"
