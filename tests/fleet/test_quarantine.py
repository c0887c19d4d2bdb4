"""The quarantine: served names never to forward, replaced whole by each health check."""

from __future__ import annotations

from registry.fleet.quarantine import Quarantine


def test_replace_blocks_and_releases() -> None:
    quarantine = Quarantine()
    assert quarantine.reason("a@1.0.0") is None
    quarantine.replace({"a@1.0.0": "its artifact is missing"})
    assert quarantine.reason("a@1.0.0") == "its artifact is missing"
    quarantine.replace({})
    assert quarantine.reason("a@1.0.0") is None
