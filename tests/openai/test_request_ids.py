"""Request ids: 32 hex characters of fresh randomness each, never repeated, fresh after fork."""

from __future__ import annotations

import os
import re

from registry.openai.request_ids import BATCH, RequestIds, new_request_id


def test_ids_are_32_hex_characters_and_distinct_across_batches() -> None:
    ids = [new_request_id() for _ in range(BATCH * 4 + 3)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_consecutive_ids_share_no_structure() -> None:
    # not a counter: no common prefix between neighbours beyond chance
    ids = RequestIds()
    pairs = [(ids.new(), ids.new()) for _ in range(200)]
    same_prefix = sum(a[:8] == b[:8] for a, b in pairs)
    assert same_prefix == 0


def test_a_forked_child_does_not_repeat_the_parents_ids() -> None:
    new_request_id()  # the parent holds a buffer with ids still to hand out
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child != new_request_id()
