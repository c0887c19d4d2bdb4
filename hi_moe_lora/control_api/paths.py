"""Paths of the admin API: the templates the control plane routes and the URLs clients build."""

from __future__ import annotations

import urllib.parse

ADMIN_PREFIX = "/admin/v1"

# Templates relative to ADMIN_PREFIX; the admin router declares its routes with these.
ADAPTERS = "/adapters"
ADAPTER = "/adapters/{name}"
VERSIONS = "/adapters/{name}/versions"
VERSION = "/adapters/{name}/versions/{version}"
PROMOTE = "/adapters/{name}/versions/{version}/promote"
ROLLBACK = "/adapters/{name}/rollback"
TRAFFIC = "/adapters/{name}/traffic"
#: The resolver plugin's lookup: ``name`` (active version) or ``name@version``.
RESOLVE = "/resolve/{served_name}"


def admin_path(template: str, **params: str) -> str:
    """``ADMIN_PREFIX + template`` with each parameter percent-encoded (``@`` kept)."""
    quoted = {key: urllib.parse.quote(value, safe="@") for key, value in params.items()}
    return ADMIN_PREFIX + template.format(**quoted)
