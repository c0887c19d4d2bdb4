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
#: The dispatcher's keywords and exemplars for one specialist.
DISPATCH_HINTS = "/adapters/{name}/dispatch"
#: The dispatcher's status: which tiers run, the fleet it dispatches to.
DISPATCHER = "/dispatcher"
#: Tasks no specialist matched (newest first), and their summary.
ROUTING_GAPS = "/routing-gaps"
ROUTING_GAP_SUMMARY = "/routing-gaps/summary"
#: Warm-up: POST runs one (answer: JSON, or NDJSON lines as results arrive), GET the last one.
WARMUP = "/warmup"
#: The resolver plugin's lookup: ``name`` (active version) or ``name@version``.
RESOLVE = "/resolve/{served_name}"
#: One file of a registered version (``adapter_config.json`` or ``adapter_model.safetensors``),
#: streamed with ``Range`` support (GET and HEAD), for vLLM hosts that share no file system with
#: the control plane; the resolver's token (or an admin token) opens it.
ARTIFACT = "/artifacts/{name}/{version}/{file}"
#: Access tokens (POST creates: the secret is in that answer only; DELETE revokes).
TOKENS = "/tokens"
TOKEN = "/tokens/{name}"
#: The audit log of state changes (newest first) and whether access control is on.
AUDIT = "/audit"
ACCESS = "/access"


def admin_path(template: str, **params: str) -> str:
    """``ADMIN_PREFIX + template`` with each parameter percent-encoded (``@`` kept)."""
    quoted = {key: urllib.parse.quote(value, safe="@") for key, value in params.items()}
    return ADMIN_PREFIX + template.format(**quoted)


# The front door's own endpoints (OpenAI-style errors, not problems).
V1_DISPATCH = "/v1/dispatch"
V1_DISPATCH_BATCH = "/v1/dispatch/batch"
V1_FEEDBACK = "/v1/feedback"
#: Health of every upstream and served adapter version (the monitor's last probes).
V1_HEALTH = "/v1/health"
#: Prometheus exposition of the control plane's metrics.
METRICS = "/metrics"
#: ``Accept`` value asking ``POST /admin/v1/warmup`` for one JSON line per result.
NDJSON = "application/x-ndjson"
