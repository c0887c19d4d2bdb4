"""Records of one logger, whether or not it propagates to the root (our loggers stop
propagating once a plugin routes them to vLLM's log, which an earlier test may have done)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def records_of(name: str, level: int = logging.WARNING) -> Iterator[list[logging.LogRecord]]:
    """The records of logger ``name`` at ``level`` and above while the block runs."""
    logger = logging.getLogger(name)
    keep = _Keep()
    keep.setLevel(level)
    before = logger.level
    logger.addHandler(keep)
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    try:
        yield keep.records
    finally:
        logger.removeHandler(keep)
        logger.setLevel(before)
