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


def test_foreign_bindings_are_held_apart_from_artifact_findings() -> None:
    quarantine = Quarantine()
    quarantine.replace_bindings({"a@1.0.0": "bound to foreign weights"})
    quarantine.replace({"b@1.0.0": "its artifact is missing"})  # an artifact check
    assert quarantine.reason("a@1.0.0") == "bound to foreign weights"
    assert quarantine.reason("b@1.0.0") == "its artifact is missing"
    quarantine.replace({})  # the next artifact check does not release the binding
    assert quarantine.reason("a@1.0.0") == "bound to foreign weights"
    quarantine.replace_bindings({})
    assert quarantine.reason("a@1.0.0") is None
