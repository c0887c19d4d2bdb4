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


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_listing_keeps_the_names_marked_while_it_was_read() -> None:
    """A health round reads ``/v1/models``, and a warm-up marks its load before the round
    applies that reading: the mark stays (the listing predates the load). A mark made before
    the reading began does not, when the listing lacks the name (vLLM dropped it)."""
    clock = _Clock()
    loaded = LoadedAdapters(clock)
    loaded.mark("http://a", "old@1.0.0")
    clock.t = 101.0
    read_since = loaded.now()
    clock.t = 102.0
    loaded.mark("http://a", "warm@1.0.0")  # loaded while the listing was under way
    loaded.replace("http://a", ["listed@1.0.0"], read_since)
    assert loaded.names("http://a") == frozenset({"listed@1.0.0", "warm@1.0.0"})
    # the next round's listing has it: it stays listed; without a reading time, a listing is
    # the whole truth
    loaded.replace("http://a", ["warm@1.0.0"], loaded.now())
    assert loaded.names("http://a") == frozenset({"warm@1.0.0"})
    loaded.replace("http://a", [])
    assert loaded.names("http://a") == frozenset()


def test_a_later_listing_without_the_name_drops_an_older_mark() -> None:
    clock = _Clock()
    loaded = LoadedAdapters(clock)
    loaded.mark("http://a", "x@1.0.0")
    clock.t = 105.0
    loaded.replace("http://a", ["y@1.0.0"], loaded.now())
    assert loaded.names("http://a") == frozenset({"y@1.0.0"})
    assert not loaded.knows("http://a", "x@1.0.0")


def test_an_unloaded_name_is_gone_whenever_it_was_marked() -> None:
    clock = _Clock()
    loaded = LoadedAdapters(clock)
    read_since = loaded.now()
    clock.t = 101.0
    loaded.mark("http://a", "foreign@1.0.0")
    loaded.replace("http://a", [], read_since)
    assert loaded.knows("http://a", "foreign@1.0.0")  # marked during the reading: kept
    loaded.unload("http://a", "foreign@1.0.0")
    assert not loaded.knows("http://a", "foreign@1.0.0")
    loaded.unload("http://never-seen", "x@1.0.0")
