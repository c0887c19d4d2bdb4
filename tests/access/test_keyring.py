"""The keyring on a real database: bootstrap keys (secret or hash only), the table's tokens, the
refresh bound (a controlled clock), revoked tokens gone after a refresh, constant-time look-up."""

from __future__ import annotations

import logging

import pytest

from hi_moe_lora.app.processes import free_port
from registry.access.keyring import Key, Keyring
from registry.access.scopes import Caller
from registry.access.secrets import digest, is_digest, new_secret
from registry.app import bootstrap_keys
from registry.db.engine import make_engine
from registry.db.session import Database
from registry.services.tokens import TokenService
from registry.settings import ControlPlaneSettings


def test_secrets_are_random_and_hashed() -> None:
    first, second = new_secret(), new_secret()
    assert first != second
    assert first.startswith("hml_")
    assert len(first) >= 40
    assert is_digest(digest(first))
    assert digest(first) != digest(second)


def test_a_deployed_hash_is_as_good_as_the_secret() -> None:
    secret = new_secret()
    from_hash = ControlPlaneSettings(admin_token_sha256=digest(secret))
    assert bootstrap_keys(from_hash) == [Key("admin", "admin", digest(secret))]


async def test_refresh_bound_and_revocation(migrated_url: str) -> None:
    database = Database(make_engine(migrated_url))
    now = [1000.0]
    admin = new_secret()
    keyring = Keyring(
        database, [Key("admin", "admin", digest(admin))], refresh_s=2.0, clock=lambda: now[0]
    )
    other = Keyring(database, [], refresh_s=2.0, clock=lambda: now[0])  # another instance
    tokens = TokenService(database, bootstrap_admin=True)
    tokens.add_changed_listener(keyring.refresh)
    try:
        assert await keyring.caller(admin) is not None
        assert await other.caller(admin) is None  # bootstrap keys are per instance
        assert not other.closed
        created = await tokens.create("key-1", "inference", actor="admin")
        caller = await keyring.caller(created.secret)
        assert caller is not None
        assert (caller.name, caller.scope) == ("key-1", "inference")
        assert await other.caller(created.secret) is None  # its view is younger than 2 s
        now[0] += 2.1
        assert await other.caller(created.secret) is not None  # re-read
        await tokens.revoke("key-1", actor="admin")
        assert await keyring.caller(created.secret) is None  # the listener refreshed it
        now[0] += 1.9
        assert await other.caller(created.secret) is not None  # within the bound: cached
        now[0] += 0.2
        assert await other.caller(created.secret) is None  # past it: re-read
        assert await keyring.caller(created.secret + "x") is None
        listed = await tokens.list_tokens()
        assert listed[0].last_used_at is not None  # written at a refresh after its use
    finally:
        database.dispose()


KEYRING = "registry.access.keyring"


async def test_an_unreadable_database_keeps_the_last_view_and_warns_once(
    migrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    dead = Database(make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test"))
    now = [1000.0]
    admin = new_secret()
    keyring = Keyring(
        dead, [Key("admin", "admin", digest(admin))], refresh_s=2.0, clock=lambda: now[0]
    )
    caplog.set_level(logging.DEBUG, logger=KEYRING)
    try:
        for _ in range(3):  # three refresh periods while the database cannot be reached
            assert await keyring.caller(admin) == Caller("admin", "admin")
            now[0] += 2.0
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == KEYRING]
        assert len(warnings) == 1
        assert "keeping the last view" in warnings[0].getMessage()
        assert admin not in caplog.text
        keyring.database = Database(make_engine(migrated_url))  # the database is back
        assert await keyring.caller(admin) == Caller("admin", "admin")
        assert "access tokens readable again" in caplog.text
    finally:
        dead.dispose()
        keyring.database.dispose()
