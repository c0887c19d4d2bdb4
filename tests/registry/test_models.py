"""Constraints the database itself enforces, exercised with raw SQL (no service code)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import NullPool

from registry.db.engine import make_engine
from registry.db.models import ONE_ACTIVE_INDEX, Base

INSERT_VERSION = text(
    "INSERT INTO adapter_versions (adapter_id, version, lora_int_id, source_uri, local_path,"
    " sha256, rank, alpha, target_modules, variant, domains, base_model, created_at, status,"
    " is_active, traffic_weight, request_count, success_count) VALUES (:adapter_id, :version,"
    " :lora_int_id, 'file:///x', '/x', :sha, 8, 16.0, '[]', :variant, '[]', 'm',"
    " CURRENT_TIMESTAMP, :status, :active, 0, 0, 0)"
)


@pytest.fixture
def connection(migrated_url: str) -> Iterator[Connection]:
    engine = make_engine(migrated_url, poolclass=NullPool)
    with engine.connect() as conn:
        conn.execute(
            text("INSERT INTO adapters (id, name, created_at) VALUES (1, 'x', CURRENT_TIMESTAMP)")
        )
        conn.commit()
        yield conn
    engine.dispose()


def _insert(
    conn: Connection, version: str, lora_int_id: int, *, active: bool, variant: str = "lora"
) -> None:
    conn.execute(
        INSERT_VERSION,
        {
            "adapter_id": 1,
            "version": version,
            "lora_int_id": lora_int_id,
            "sha": "0" * 64,
            "variant": variant,
            "status": "active" if active else "inactive",
            "active": active,
        },
    )


def test_a_second_active_version_is_refused(connection: Connection) -> None:
    _insert(connection, "1.0.0", 1, active=True)
    _insert(connection, "1.1.0", 2, active=False)
    connection.commit()
    with pytest.raises(IntegrityError):
        _insert(connection, "1.2.0", 3, active=True)
    connection.rollback()
    with pytest.raises(IntegrityError):
        connection.execute(
            text(
                "UPDATE adapter_versions SET is_active = :t, status = 'active'"
                " WHERE version = '1.1.0'"
            ),
            {"t": True},
        )
    connection.rollback()


@pytest.mark.parametrize(
    ("version", "lora_int_id", "variant"),
    [
        ("1.0.0", 2, "lora"),  # duplicate (adapter, version)
        ("2.0.0", 1, "lora"),  # duplicate lora_int_id
        ("3.0.0", 0, "lora"),  # ids start at 1
        ("4.0.0", 4, "qlora"),  # unknown variant
    ],
)
def test_other_constraints(
    connection: Connection, version: str, lora_int_id: int, variant: str
) -> None:
    _insert(connection, "1.0.0", 1, active=True)
    connection.commit()
    with pytest.raises(IntegrityError):
        _insert(connection, version, lora_int_id, active=False, variant=variant)
    connection.rollback()


def test_status_and_is_active_agree(connection: Connection) -> None:
    with pytest.raises(IntegrityError):
        connection.execute(
            INSERT_VERSION,
            {
                "adapter_id": 1,
                "version": "1.0.0",
                "lora_int_id": 1,
                "sha": "0" * 64,
                "variant": "lora",
                "status": "inactive",
                "active": True,
            },
        )
    connection.rollback()


def test_counter_is_a_single_row(connection: Connection) -> None:
    with pytest.raises(IntegrityError):
        connection.execute(text("INSERT INTO lora_id_counter (id, next_id) VALUES (2, 5)"))
    connection.rollback()


def test_the_one_active_index_is_in_the_models() -> None:
    table = Base.metadata.tables["adapter_versions"]
    index = next(i for i in table.indexes if i.name == ONE_ACTIVE_INDEX)
    assert index.unique
    assert [c.name for c in index.columns] == ["adapter_id"]
