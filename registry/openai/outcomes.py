"""Per-request outcomes (which model served it, latency, success), recorded off the request path.

The front door hands every finished request to :meth:`OutcomeRecorder.record`, which only
appends it to a :class:`registry.background.BatchWriter`; a background task hands the batch to
:meth:`registry.services.requests.RequestLog.record` (statistics of each adapter version, and
the request records feedback needs), so a slow or failing write never delays or breaks a
request. While the database is unavailable the outcomes stay buffered (bounded) and are written
when it is back, or at shutdown.
This is also where request metrics (Prometheus) plug in: the recorder sees every finished request.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.background import FLUSH_INTERVAL_S, MAX_BACKOFF_S, MAX_PENDING, BatchWriter
from registry.openai.targets import Target
from registry.services.requests import FinishedRequest, RequestLog


@dataclass(frozen=True)
class Outcome:
    request_id: str
    target: Target
    endpoint: str
    status: int
    latency_ms: float
    stream: bool

    @property
    def ok(self) -> bool:
        return self.status < 400

    def finished(self) -> FinishedRequest:
        return FinishedRequest(
            request_id=self.request_id,
            served_name=self.target.served_name,
            is_adapter=self.target.is_adapter,
            latency_ms=self.latency_ms,
            ok=self.ok,
        )


class OutcomeRecorder(BatchWriter[FinishedRequest]):
    """Buffers finished requests and writes them to the request log in the background."""

    def __init__(
        self,
        requests: RequestLog,
        *,
        max_pending: int = MAX_PENDING,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        super().__init__(
            "request outcome",
            requests.record,
            max_pending=max_pending,
            flush_interval_s=flush_interval_s,
            max_backoff_s=max_backoff_s,
        )

    def record(self, outcome: Outcome) -> None:
        self.add(outcome.finished())
