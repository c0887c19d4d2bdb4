"""The change feed: control-plane instances sharing one PostgreSQL registry see each other's
changes within milliseconds (``LISTEN``/``NOTIFY``), not after their caches expire.

Publishing. Every change to the registry (register, promote, rollback, delete, traffic split,
dispatch hints, token create/revoke) writes one audit event in its own transaction
(:func:`registry.services.audit.record`). While the feed runs, a hook on the insert of that row
adds ``pg_notify(channel, payload)`` to the same transaction. PostgreSQL delivers a notification
when, and only when, its transaction commits: a change is announced exactly if it committed, a
change rolled back is never announced, and no change escapes the feed (a new kind of change is
covered the day it is audited). The payload is small JSON: ``kind`` (the audit action),
``adapter``, ``served_name`` (``name@version`` where a version is concerned) and ``origin``
(:attr:`ChangeFeed.instance`, unique per running app).

Listening. One dedicated psycopg ``AsyncConnection`` (``autocommit``, outside the engine's pool)
per instance, in the app's event loop: the caches a notification makes stale (the version
table, the dispatcher's fleet generation, the health monitor's served list, the keyring) live in
that loop and are not thread-safe, so applying there needs no hand-over, and an idle listener
costs no thread. A notification from this instance itself is ignored (its listeners already ran
when the change committed); another's is applied through the listeners added here, which only
drop local caches: fleet-side effects (unloading bare names on vLLM, warm-ups) stay with the
instance that made the change, so they happen once, not once per instance.

Outages. The connection is pinged every ``ping_s`` while idle. When it drops (server restart,
``pg_terminate_backend``, a network fault) the feed reconnects with exponential backoff and logs
once per outage (a warning, then the recovery); notifications sent meanwhile are lost, so after
each (re)connection every adapter and the tokens are treated as changed (every snapshot is
dropped and read again on next use). ``LISTEN`` is issued before that resynchronisation, so a
change is either seen by it or notified after it.

The channel is per schema (``hi_moe_lora_changes_<schema>``; hashed when too long for an
identifier): registries in separate schemas of one database do not hear each other. SQLite has
no feed (one process owns the file); :func:`wants_change_feed` says when to build one.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import math
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Mapper

from registry.db.engine import normalise_url
from registry.db.models import Adapter, AuditEvent
from registry.db.session import Database, UnitOfWork
from registry.metrics.families import ControlPlaneMetrics
from registry.waiting import wait_event, within

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

CHANNEL_PREFIX = "hi_moe_lora_changes_"
#: PostgreSQL identifiers (channel names) hold at most 63 bytes.
MAX_CHANNEL_BYTES = 63
#: The audit actions announced: every change of the registry or of the access tokens.
ADAPTER_KINDS = frozenset(
    {
        "version.register",
        "version.promote",
        "adapter.rollback",
        "version.delete",
        "adapter.traffic",
        "adapter.dispatch_hints",
    }
)
TOKEN_KINDS = frozenset({"token.create", "token.revoke"})
#: How the listening connection shows in ``pg_stat_activity``.
APPLICATION_NAME = "hi-moe-lora change feed"
DEFAULT_PING_S = 5.0
MIN_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0

#: Called with the name of an adapter another instance changed (may be a plain function).
AdapterListener = Callable[[str], Awaitable[None] | None]
#: Called after another instance changed the access tokens.
TokenListener = Callable[[], Awaitable[None] | None]


class ChangeFeedError(RuntimeError):
    """The feed cannot run with this database (not PostgreSQL, or no psycopg)."""


@dataclass(frozen=True)
class Change:
    """One committed change, as announced on the channel."""

    kind: str
    adapter: str | None
    served_name: str | None
    origin: str

    def payload(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "adapter": self.adapter,
                "served_name": self.served_name,
                "origin": self.origin,
            },
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, payload: str) -> Change | None:
        """The change ``payload`` announces, or ``None`` when it is not one of ours."""
        try:
            data = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        kind, adapter = data.get("kind"), data.get("adapter")
        served, origin = data.get("served_name"), data.get("origin")
        if kind not in ADAPTER_KINDS | TOKEN_KINDS or not isinstance(origin, str):
            return None
        if not (adapter is None or isinstance(adapter, str)) or not (
            served is None or isinstance(served, str)
        ):
            return None
        if kind in ADAPTER_KINDS and not adapter:
            return None
        return cls(kind, adapter, served, origin)


def change_of(event_row: AuditEvent, origin: str) -> Change | None:
    """The change an audit event records (``None`` for one that changes nothing shared)."""
    if event_row.action not in ADAPTER_KINDS | TOKEN_KINDS:
        return None  # a warm-up run: nothing another instance keeps is stale
    served = None
    if event_row.adapter is not None and event_row.version is not None:
        served = f"{event_row.adapter}@{event_row.version}"
    return Change(event_row.action, event_row.adapter, served, origin)


def channel_for(schema: str) -> str:
    """The channel of the registry in ``schema``: readable when it fits, else hashed."""
    channel = CHANNEL_PREFIX + schema
    if len(channel.encode()) <= MAX_CHANNEL_BYTES:
        return channel
    return CHANNEL_PREFIX + hashlib.sha256(schema.encode()).hexdigest()[:32]


def wants_change_feed(database_url: str, enabled: bool) -> bool:
    """Whether this registry gets a feed: enabled, on PostgreSQL (SQLite: never)."""
    return enabled and normalise_url(database_url).get_backend_name() == "postgresql"


def new_instance_id() -> str:
    """A name for this running app, unique among the instances (host, process, random)."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}"


def _conninfo(database_url: str) -> str:
    """The SQLAlchemy URL as a libpq URI (``postgresql://``, query such as ``options`` kept)."""
    url = normalise_url(database_url).set(drivername="postgresql")
    return make_url(url).render_as_string(hide_password=False)


class ChangeFeed:
    """Announces this instance's changes and applies the other instances' (see the module)."""

    def __init__(
        self,
        database: Database,
        database_url: str,
        metrics: ControlPlaneMetrics,
        *,
        connect_timeout_s: float,
        ping_s: float = DEFAULT_PING_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        instance: str | None = None,
    ) -> None:
        if not wants_change_feed(database_url, True):
            raise ChangeFeedError("the change feed needs PostgreSQL")
        self.database = database
        self.instance = instance or new_instance_id()
        self._conninfo = _conninfo(database_url)
        self._metrics = metrics
        self._connect_timeout_s = connect_timeout_s
        self._ping_s = ping_s
        self._max_backoff_s = max(max_backoff_s, MIN_BACKOFF_S)
        self._adapter_listeners: list[AdapterListener] = []
        self._token_listeners: list[TokenListener] = []
        self._channel: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._resyncs = 0
        #: The server process of the listening connection (``pg_stat_activity.pid``), if any.
        self.backend_pid: int | None = None
        self._hooked = False
        self._failing = False

    # ------------------------------------------------------------------ wiring

    def add_adapter_listener(self, listener: AdapterListener) -> None:
        """Called with the adapter's name after another instance changed it, and for every
        adapter after each (re)connection (changes may have been missed)."""
        self._adapter_listeners.append(listener)

    def add_token_listener(self, listener: TokenListener) -> None:
        """Called after another instance created or revoked a token, and after each
        (re)connection."""
        self._token_listeners.append(listener)

    @property
    def channel(self) -> str | None:
        """The channel, once :meth:`start` has read the schema."""
        return self._channel

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def resyncs(self) -> int:
        """How many times every cache was dropped after a (re)connection."""
        return self._resyncs

    async def wait_connected(self, timeout_s: float) -> bool:
        """Wait until the listener is connected (and resynchronised); False on timeout."""
        return await wait_event(self._connected, timeout_s)

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Read the channel, announce this instance's changes from now on, start listening.

        Does not wait for the listener's connection: a registry that cannot be listened to
        still serves (with its caches' time limits), and the listener keeps trying."""
        if self._task is not None:
            return
        schema = await asyncio.to_thread(self.database.run, _current_schema, write=False)
        self._channel = channel_for(schema)
        event.listen(AuditEvent, "after_insert", self._announce)
        self._hooked = True
        self._task = asyncio.get_running_loop().create_task(self._run(), name="change-feed")
        logger.info("change feed: instance %s on channel %s", self.instance, self._channel)

    async def stop(self) -> None:
        """Stop announcing and listening."""
        if self._hooked:
            event.remove(AuditEvent, "after_insert", self._announce)
            self._hooked = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._set_connected(False)

    # ------------------------------------------------------------------ publishing

    def _announce(self, _mapper: Mapper[Any], connection: Connection, target: AuditEvent) -> None:
        """After an audit event's INSERT (any engine in this process): if it is this
        registry's, NOTIFY in the same transaction (delivered on commit, dropped on rollback)."""
        if connection.engine is not self.database.engine or self._channel is None:
            return
        change = change_of(target, self.instance)
        if change is not None:
            connection.execute(select(func.pg_notify(self._channel, change.payload())))

    # ------------------------------------------------------------------ listening

    async def _run(self) -> None:
        backoff = MIN_BACKOFF_S
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure of the connection: reconnect
                if self.connected:  # it was up: a new outage, retried soon
                    backoff = MIN_BACKOFF_S
                self._set_connected(False)
                if not self._failing:
                    self._failing = True
                    logger.warning(
                        "change feed lost (%s: %s); reconnecting, caches expire meanwhile",
                        type(exc).__name__,
                        exc,
                    )
                else:
                    logger.debug("change feed still unavailable: %s", exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff_s)

    async def _listen(self) -> None:
        import psycopg
        from psycopg import sql

        assert self._channel is not None
        connection = await psycopg.AsyncConnection.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=max(2, math.ceil(self._connect_timeout_s)),
            application_name=APPLICATION_NAME,
        )
        self.backend_pid = connection.info.backend_pid
        async with connection:
            await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
            await self._resync()
            if self._failing:
                self._failing = False
                logger.warning("change feed listening again; every snapshot was dropped")
            self._set_connected(True)
            while True:
                async for notification in connection.notifies(timeout=self._ping_s):
                    await self.receive(notification.payload)
                await self._ping(connection)

    async def _ping(self, connection: psycopg.AsyncConnection[Any]) -> None:
        """A query on the idle connection, bounded: a silently dead peer is found in time."""
        await within(connection.execute("SELECT 1"), max(self._connect_timeout_s, self._ping_s))

    async def receive(self, payload: str) -> Change | None:
        """Apply one notification's ``payload``; the change applied, or ``None`` if ignored."""
        change = Change.parse(payload)
        if change is None:
            self._metrics.change_notification("malformed")
            logger.warning("change feed: ignoring a malformed notification: %.200r", payload)
            return None
        if change.origin == self.instance:
            self._metrics.change_notification("own")
            return None
        self._metrics.change_notification("applied")
        logger.debug("change feed: %s %s from %s", change.kind, change.adapter, change.origin)
        if change.kind in TOKEN_KINDS:
            await self._tokens_changed()
        elif change.adapter is not None:
            await self._adapter_changed(change.adapter)
        return change

    async def _resync(self) -> None:
        """Every adapter and the tokens may have changed unseen: drop every snapshot."""
        names = await asyncio.to_thread(self.database.run, _adapter_names, write=False)
        for name in names:
            await self._adapter_changed(name)
        await self._tokens_changed()
        self._resyncs += 1

    async def _adapter_changed(self, name: str) -> None:
        for listener in list(self._adapter_listeners):
            await _call(listener, name)

    async def _tokens_changed(self) -> None:
        for listener in list(self._token_listeners):
            await _call(listener)

    def _set_connected(self, connected: bool) -> None:
        if connected:
            self._connected.set()
        else:
            self._connected.clear()
            self.backend_pid = None
        self._metrics.change_feed_listening(connected)


async def _call(listener: Callable[..., Awaitable[None] | None], *args: str) -> None:
    try:
        result = listener(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:  # one failing cache must not stop the feed
        logger.exception("change feed listener %r failed", listener)


def _current_schema(uow: UnitOfWork) -> str:
    schema = uow.session.execute(text("SELECT current_schema()")).scalar_one()
    return str(schema)


def _adapter_names(uow: UnitOfWork) -> list[str]:
    return list(uow.session.scalars(select(Adapter.name)))
