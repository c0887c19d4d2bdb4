"""Allocation of ``lora_int_id``: one counter row, incremented atomically, never rewound.

``UPDATE ... SET next_id = next_id + 1 RETURNING next_id`` takes the row lock on PostgreSQL
(concurrent allocators queue behind it and read the committed value) and runs under the write
lock on SQLite (``BEGIN IMMEDIATE``). Deleting a version never touches the counter, so ids are
not reused; an allocation in a transaction that rolls back was never visible to anyone.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from registry.db.models import LoraIdCounter
from registry.errors import RegistryError


def allocate_lora_int_id(session: Session) -> int:
    statement = (
        update(LoraIdCounter)
        .where(LoraIdCounter.id == 1)
        .values(next_id=LoraIdCounter.next_id + 1)
        .returning(LoraIdCounter.next_id)
    )
    next_id = session.execute(statement).scalar_one_or_none()
    if next_id is None:
        raise RegistryError(
            "the lora_id_counter row is missing: run `hi-moe-lora db upgrade`",
            code="lora_id_counter_missing",
        )
    return int(next_id) - 1
