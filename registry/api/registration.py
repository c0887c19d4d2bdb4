"""Registration answered as it happens: NDJSON progress lines, then the outcome.

``POST /admin/v1/adapters/{name}/versions`` with ``Accept: application/x-ndjson`` answers (200)
one JSON line per event while the adapter's files are fetched or copied into staging:
``{"event":"progress","bytes":N,"total":M}`` (``total`` is ``null`` while unknown; at most one
line per :data:`PROGRESS_INTERVAL_S`, plus the last), then one final line,
``{"event":"registered","version":{...}}`` (the 201 answer's JSON) or
``{"event":"error","problem":{...}}`` (the problem+json body the plain call would answer).

The stream starts only once the first byte is about to be copied: every refusal known before
(a malformed name, a URL outside the prefixes, a version that exists, a 404 at the source)
answers a plain problem+json with its status, like the call without the header. A client that
goes away does not stop the registration: it finishes (or fails, changing nothing) on its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response, StreamingResponse

from hi_moe_lora.control_api import paths
from registry.api.problems import PROBLEM_TYPE_BASE
from registry.api.schemas import AdapterVersionOut, Problem
from registry.errors import RegistryError
from registry.services.records import AdapterVersionInfo
from registry.services.sources import Progress

logger = logging.getLogger(__name__)

#: The least time between two progress lines (the last one is always sent).
PROGRESS_INTERVAL_S = 0.25
Register = Callable[[Progress], Awaitable[AdapterVersionInfo]]
_Step = tuple[int, int | None]
#: Registrations whose client went away, kept referenced until they end.
_orphans: set[asyncio.Task[AdapterVersionInfo]] = set()


class _Throttle:
    """The ``progress`` callback handed to the worker thread: steps onto the loop's queue, at
    most one per interval (the first and the one that completes the total always)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[_Step]) -> None:
        self._loop = loop
        self._queue = queue
        self._lock = threading.Lock()
        self._last: float | None = None

    def __call__(self, copied: int, total: int | None) -> None:
        now = time.monotonic()
        with self._lock:
            due = (
                self._last is None
                or now - self._last >= PROGRESS_INTERVAL_S
                or (total is not None and copied >= total)
            )
            if not due:
                return
            self._last = now
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (copied, total))


def problem_body(exc: BaseException) -> dict[str, Any]:
    """The problem+json body the admin API answers for ``exc``."""
    if isinstance(exc, RegistryError):
        problem = Problem(
            type=PROBLEM_TYPE_BASE + exc.code,
            title=exc.title,
            status=exc.status,
            detail=exc.detail,
            code=exc.code,
        )
    else:
        logger.error("registration failed unexpectedly", exc_info=exc)
        problem = Problem(
            title="Internal Server Error",
            status=500,
            detail="internal error",
            code="internal_error",
        )
    return problem.model_dump(mode="json", exclude_none=True)


def _line(event: dict[str, Any]) -> bytes:
    return (json.dumps(event, separators=(",", ":")) + "\n").encode()


def _progress(step: _Step) -> bytes:
    return _line({"event": "progress", "bytes": step[0], "total": step[1]})


def _outcome(task: asyncio.Task[AdapterVersionInfo]) -> bytes:
    try:
        info = task.result()
    except Exception as exc:
        return _line({"event": "error", "problem": problem_body(exc)})
    version = AdapterVersionOut.model_validate(info).model_dump(mode="json")
    return _line({"event": "registered", "version": version})


async def registration_events(register: Register) -> Response:
    """Run ``register`` and answer its progress as NDJSON (module docstring); a refusal before
    the first byte is raised, for the problem handler to answer."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[_Step] = asyncio.Queue()
    task = asyncio.ensure_future(register(_Throttle(loop, queue)))
    first = asyncio.ensure_future(queue.get())
    try:
        await asyncio.wait({task, first}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        first.cancel()
        _keep(task)
        raise
    if not first.done():
        first.cancel()
        task.result()  # a refusal before any byte: raised as a plain problem answer
        return StreamingResponse(_single(_outcome(task)), media_type=paths.NDJSON)
    return StreamingResponse(_follow(task, queue, first.result()), media_type=paths.NDJSON)


async def _single(line: bytes) -> AsyncIterator[bytes]:
    yield line


async def _follow(
    task: asyncio.Task[AdapterVersionInfo], queue: asyncio.Queue[_Step], first: _Step
) -> AsyncIterator[bytes]:
    finished = False
    try:
        yield _progress(first)
        while not task.done():
            getter = asyncio.ensure_future(queue.get())
            try:
                await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                getter.cancel()
            if getter.done() and not getter.cancelled():
                yield _progress(getter.result())
        while not queue.empty():  # steps queued before the task ended
            yield _progress(queue.get_nowait())
        finished = True
        yield _outcome(task)
    finally:
        if not finished:
            _keep(task)


def _keep(task: asyncio.Task[AdapterVersionInfo]) -> None:
    """The client went away: let the registration end on its own, its outcome logged."""
    if task.done():
        _log_orphan(task)
        return
    _orphans.add(task)
    task.add_done_callback(_log_orphan)


def _log_orphan(task: asyncio.Task[AdapterVersionInfo]) -> None:
    _orphans.discard(task)
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        logger.info(
            "registration %s finished after its client went away", task.result().served_name
        )
    elif isinstance(exc, RegistryError):
        logger.info(
            "registration refused after its client went away: %s (%s)", exc.detail, exc.code
        )
    else:
        logger.error("registration failed after its client went away", exc_info=exc)
