"""Whether the control plane may start with its access settings, and the warning when open.

Refused (:class:`AccessConfigurationError`): open (no admin secret) on a non-loopback address
unless ``insecure``; API keys required, or ``/metrics`` or the health picture closed, with no
admin secret to close anything with. Open on loopback: allowed, with a WARNING naming the
settings to set. Loopback is ``127.0.0.0/8``, ``::1`` and ``localhost``.
"""

from __future__ import annotations

import logging

from hi_moe_lora.hosts import is_loopback
from registry.access.errors import AccessConfigurationError
from registry.access.gatekeeper import Openings
from registry.db.session import Database
from registry.repositories.tokens import TokenRepository

logger = logging.getLogger(__name__)

SET_SECRETS = (
    "set HI_MOE_LORA_ADMIN_TOKEN (or HI_MOE_LORA_ADMIN_TOKEN_SHA256) and "
    "HI_MOE_LORA_RESOLVER_TOKEN, or create an admin token with `hi-moe-lora tokens create`"
)


def refusal(*, closed: bool, host: str, insecure: bool, openings: Openings) -> str | None:
    """Why the control plane must not start (``None``: it may)."""
    if closed:
        return None
    wanted = [
        setting
        for setting, asked in (
            ("HI_MOE_LORA_REQUIRE_API_KEYS=true", openings.require_api_keys),
            ("HI_MOE_LORA_METRICS_PUBLIC=false", not openings.metrics_public),
            ("HI_MOE_LORA_HEALTH_PUBLIC=false", not openings.health_public),
        )
        if asked
    ]
    if wanted:
        return (
            f"{', '.join(wanted)} needs access control, which is off (no admin secret): "
            + SET_SECRETS
        )
    if not is_loopback(host) and not insecure:
        return (
            f"refusing to serve without access control on {host!r}, which is not a loopback "
            f"address: {SET_SECRETS}; or bind to 127.0.0.1; or accept it with "
            "HI_MOE_LORA_INSECURE=true (`hi-moe-lora serve --insecure`)"
        )
    return None


def check_start(*, closed: bool, host: str, insecure: bool, openings: Openings) -> None:
    """Raise :class:`AccessConfigurationError` if refused; warn loudly when open."""
    reason = refusal(closed=closed, host=host, insecure=insecure, openings=openings)
    if reason is not None:
        raise AccessConfigurationError(reason)
    if not closed:
        logger.warning(
            "ACCESS CONTROL IS OFF: anyone who reaches %s can change the registry and run "
            "inference. To turn it on, %s.",
            host,
            SET_SECRETS,
        )


def admin_token_stored(database: Database) -> bool:
    """Whether the database holds an active admin token (blocking: for a pre-flight check)."""
    return database.run(
        lambda uow: bool(TokenRepository(uow.session).active_names("admin")), write=False
    )
