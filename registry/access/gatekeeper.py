"""Which scope each surface of the control plane needs, and the caller a request is admitted as.

While no admin secret exists (:attr:`Keyring.closed` is false) access is open: every request is
admitted as ``_anonymous``. Once closed: the admin API needs an ``admin`` token, the resolver's
look-up a ``resolver`` (or admin) token; ``/v1`` needs an ``inference`` (or admin) token when
``require_api_keys``, else a valid key is used for the statistics and anything else is
anonymous; ``/metrics`` and ``/v1/health`` need a ``metrics`` (or admin) token unless public.
No or an unknown token: :class:`UnauthorizedError` (401); a token without the scope:
:class:`ForbiddenError` (403).
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.access.errors import ForbiddenError, UnauthorizedError
from registry.access.keyring import Keyring
from registry.access.scopes import ANONYMOUS_CALLER, Caller, Scope, grants

BEARER = "bearer"


@dataclass(frozen=True)
class Openings:
    """The surfaces the settings leave open while access control is on."""

    require_api_keys: bool = False
    metrics_public: bool = True
    health_public: bool = True


def bearer_secret(authorization: str | None) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header, else ``None``."""
    if not authorization:
        return None
    kind, _, secret = authorization.strip().partition(" ")
    secret = secret.strip()
    if kind.lower() != BEARER or not secret:
        return None
    return secret


class Gatekeeper:
    def __init__(self, keyring: Keyring, openings: Openings) -> None:
        self.keyring = keyring
        self.openings = openings

    @property
    def closed(self) -> bool:
        return self.keyring.closed

    async def admin(self, authorization: str | None) -> Caller:
        return await self._require(authorization, "admin")

    async def resolver(self, authorization: str | None) -> Caller:
        return await self._require(authorization, "resolver")

    async def inference(self, authorization: str | None) -> Caller:
        if self.openings.require_api_keys:
            return await self._require(authorization, "inference")
        return await self._optional(authorization, "inference")

    async def metrics(self, authorization: str | None) -> Caller:
        if self.openings.metrics_public:
            return await self._optional(authorization, "metrics")
        return await self._require(authorization, "metrics")

    async def health(self, authorization: str | None) -> Caller:
        if self.openings.health_public:
            return await self._optional(authorization, "metrics")
        return await self._require(authorization, "metrics")

    async def _require(self, authorization: str | None, needed: Scope) -> Caller:
        await self.keyring.fresh()
        if not self.keyring.closed:
            return ANONYMOUS_CALLER
        secret = bearer_secret(authorization)
        if secret is None:
            raise UnauthorizedError(f"this endpoint needs a bearer token with the {needed} scope")
        caller = await self.keyring.caller(secret)
        if caller is None:
            raise UnauthorizedError("the bearer token is not valid (unknown or revoked)")
        if caller.scope is None or not grants(caller.scope, needed):
            raise ForbiddenError(f"token {caller.name!r} ({caller.scope}) lacks the {needed} scope")
        return caller

    async def _optional(self, authorization: str | None, needed: Scope) -> Caller:
        """A public surface: a valid token of the scope names its caller; nothing is refused."""
        await self.keyring.fresh()
        secret = bearer_secret(authorization)
        if not self.keyring.closed or secret is None:
            return ANONYMOUS_CALLER
        caller = await self.keyring.caller(secret)
        if caller is None or caller.scope is None or not grants(caller.scope, needed):
            return ANONYMOUS_CALLER
        return caller
