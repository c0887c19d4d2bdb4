"""One stack for the fault scenarios: a private PostgreSQL server the tests stop and start, and
an embedded stack (``hi-moe-lora serve`` + a real vLLM CPU server) on it whose vLLM the tests
kill and restart.

Its own, because these tests take the database and vLLM away; the session's shared stack must
never see that. Package-scoped: the database and vLLM scenarios share one vLLM start (~1 min).
Health checks run every second (recovery is seen quickly); no warm-ups; the dispatcher re-reads
the fleet every second, so while the database is down ``model="auto"`` must decide with the
fleet it read last.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hi_moe_lora.tinymodel import TinyFleet
from tests.faults import postgres
from tests.faults.postgres import PrivatePostgres
from tests.support.stacks import StackWithoutTier3, stop_control_plane_first

HEALTH_INTERVAL_S = 1.0


@pytest.fixture(scope="package")
def private_postgres() -> Iterator[PrivatePostgres]:
    reason = postgres.available()
    if reason is not None:
        pytest.skip(reason)
    server = PrivatePostgres().init()
    server.start()
    try:
        yield server
    finally:
        server.destroy()


@dataclass
class PostgresStack(StackWithoutTier3):
    """The embedded stack without tier 3, with its registry on a PostgreSQL server instead of
    SQLite."""

    postgres_url: str = ""

    @property
    def database_url(self) -> str:
        return self.postgres_url

    def control_plane_env(self) -> dict[str, str]:
        return {
            **super().control_plane_env(),
            "HI_MOE_LORA_DISPATCH_REFRESH_S": "1",
        }


@pytest.fixture(scope="package")
def faults_stack(
    private_postgres: PrivatePostgres,
    tiny_fleet: TinyFleet,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PostgresStack]:
    stack = PostgresStack(
        workdir=tmp_path_factory.mktemp("faults-stack"),
        model_dir=tiny_fleet.model_dir,
        max_loras=2,
        # the tiny model's whole context: the kill test's stream must outlast the kill
        max_model_len=1024,
        health_interval_s=HEALTH_INTERVAL_S,
        warmup=False,
        postgres_url=private_postgres.url,
    )
    stack.start()
    try:
        yield stack
    finally:
        stop_control_plane_first(stack)  # tests/support/stacks.py: why


def demo_adapter(fleet: TinyFleet, kind: str = "python-lora") -> Path:
    """The first demo adapter of ``kind`` (python-lora, math-lora)."""
    return next(path for key, path in sorted(fleet.adapters.items()) if key.startswith(kind))
