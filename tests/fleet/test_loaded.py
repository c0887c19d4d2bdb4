"""The per-replica record of which served names vLLM has loaded."""

from __future__ import annotations

from registry.fleet.loaded import LoadedAdapters


def test_marks_replaces_and_forgets_per_replica() -> None:
    loaded = LoadedAdapters()
    assert not loaded.knows("http://a", "x@1.0.0")
    loaded.mark("http://a", "x@1.0.0")
    assert loaded.knows("http://a", "x@1.0.0")
    assert not loaded.knows("http://b", "x@1.0.0")
    loaded.replace("http://a", ["y@2.0.0"])
    assert loaded.names("http://a") == frozenset({"y@2.0.0"})
    loaded.forget("http://a")
    assert loaded.names("http://a") == frozenset()
    loaded.forget("http://never-seen")
