"""Named access tokens: create (the secret shown once), list, revoke; each change audited.

A token's name is what the statistics and the audit log show for its holder; names follow the
adapters' rule and are never reused (a revoked token keeps its row). ``admin`` and ``resolver``
are reserved for the bootstrap secrets of the settings. Only the secret's SHA-256 is stored.
Revoking the last active admin token is refused while no bootstrap admin secret is configured:
without an admin secret access control would switch off and leave the control plane open.
Listeners (the keyring) run after every committed change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from hi_moe_lora.served_names import is_valid_name
from registry.access.scopes import SCOPES, Scope
from registry.access.secrets import digest, new_secret
from registry.db.models import AccessToken, utcnow
from registry.db.session import Database, UnitOfWork
from registry.errors import ConflictError, InvalidRequestError, NotFoundError
from registry.repositories.tokens import TokenRepository
from registry.services.audit import record
from registry.services.naming import shown
from registry.services.records import as_utc

logger = logging.getLogger(__name__)

#: Names of the bootstrap secrets (settings ``ADMIN_TOKEN``, ``RESOLVER_TOKEN``).
RESERVED_NAMES = frozenset({"admin", "resolver"})

ChangedListener = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class TokenInfo:
    """A token as it is shown: never its secret or hash."""

    name: str
    scope: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True)
class CreatedToken:
    info: TokenInfo
    #: The plaintext, returned once to the caller that created it.
    secret: str


def _info(row: AccessToken) -> TokenInfo:
    return TokenInfo(
        name=row.name,
        scope=row.scope,
        created_at=as_utc(row.created_at),
        revoked_at=as_utc(row.revoked_at),
        last_used_at=as_utc(row.last_used_at),
    )


def _check_name(name: str) -> None:
    if not is_valid_name(name):
        raise InvalidRequestError(
            f"invalid token name {shown(name)}: lower-case letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 64 characters",
            code="invalid_token_name",
        )
    if name in RESERVED_NAMES:
        raise InvalidRequestError(
            f"token name {name!r} is reserved for the bootstrap secret of the settings",
            code="reserved_token_name",
        )


class TokenService:
    def __init__(self, database: Database, *, bootstrap_admin: bool) -> None:
        self.database = database
        self.bootstrap_admin = bootstrap_admin
        self._listeners: list[ChangedListener] = []

    def add_changed_listener(self, listener: ChangedListener) -> None:
        """Called after every committed create or revoke."""
        self._listeners.append(listener)

    async def create(self, name: str, scope: Scope, *, actor: str) -> CreatedToken:
        _check_name(name)
        if scope not in SCOPES:
            raise InvalidRequestError(f"unknown scope {shown(scope)}", code="invalid_scope")
        secret = new_secret()

        def work(uow: UnitOfWork) -> TokenInfo:
            repo = TokenRepository(uow.session)
            if repo.get(name) is not None:
                raise ConflictError(
                    f"a token named {name!r} exists (names are never reused)", code="token_exists"
                )
            row = repo.add(AccessToken(name=name, scope=scope, sha256=digest(secret)))
            record(uow, actor, "token.create", after={"name": name, "scope": scope})
            return _info(row)

        info = await asyncio.to_thread(self.database.run, work)
        logger.info("token %r (%s) created by %s", name, scope, actor)
        await self._changed()
        return CreatedToken(info, secret)

    async def list_tokens(self) -> list[TokenInfo]:
        def work(uow: UnitOfWork) -> list[TokenInfo]:
            return [_info(row) for row in TokenRepository(uow.session).list_all()]

        return await asyncio.to_thread(self.database.run, work, write=False)

    async def revoke(self, name: str, *, actor: str) -> TokenInfo:
        if not is_valid_name(name):
            raise NotFoundError(f"no token named {shown(name)}", code="token_not_found")

        def work(uow: UnitOfWork) -> TokenInfo:
            repo = TokenRepository(uow.session)
            row = repo.get(name, lock=True)
            if row is None:
                raise NotFoundError(f"no token named {name!r}", code="token_not_found")
            if row.revoked_at is not None:
                raise ConflictError(f"token {name!r} is already revoked", code="token_revoked")
            if (
                row.scope == "admin"
                and not self.bootstrap_admin
                and repo.active_names("admin", lock=True) == [name]
            ):
                raise ConflictError(
                    f"{name!r} is the last admin token: revoking it would leave the control "
                    "plane open; create another admin token (or set HI_MOE_LORA_ADMIN_TOKEN) first",
                    code="last_admin_token",
                )
            row.revoked_at = utcnow()
            uow.session.flush()
            record(
                uow,
                actor,
                "token.revoke",
                before={"name": name, "scope": row.scope, "revoked": False},
                after={"name": name, "scope": row.scope, "revoked": True},
            )
            return _info(row)

        info = await asyncio.to_thread(self.database.run, work)
        logger.info("token %r revoked by %s", name, actor)
        await self._changed()
        return info

    async def _changed(self) -> None:
        for listener in list(self._listeners):
            try:
                await listener()
            except Exception:
                logger.exception("token listener %r failed", listener)
