"""lora_int_id allocation: monotonic, never reused, safe under concurrent transactions."""

from __future__ import annotations

import threading

from sqlalchemy.orm import Session

from registry.db.engine import make_engine, writer
from registry.repositories.lora_ids import allocate_lora_int_id


def test_allocation_is_monotonic_and_rollback_safe(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    try:
        with Session(writer(engine)) as session:
            assert [allocate_lora_int_id(session) for _ in range(3)] == [1, 2, 3]
            session.commit()
        with Session(writer(engine)) as session:
            assert allocate_lora_int_id(session) == 4
            session.rollback()  # never visible: may be handed out again
        with Session(writer(engine)) as session:
            assert allocate_lora_int_id(session) == 4
            session.commit()
    finally:
        engine.dispose()


def test_concurrent_transactions_never_share_an_id(migrated_url: str) -> None:
    engine = make_engine(migrated_url, pool_size=8)
    barrier = threading.Barrier(8)
    allocated: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        for _ in range(10):
            with Session(writer(engine)) as session:
                value = allocate_lora_int_id(session)
                session.commit()
            with lock:
                allocated.append(value)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.dispose()
    assert sorted(allocated) == list(range(1, 81))
