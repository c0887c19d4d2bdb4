"""Which versions are served (active, or with a traffic share) and in which order warm-up picks
them (most recently used first)."""

from __future__ import annotations

from datetime import timedelta

from registry.operations.served import by_recent_use, served_versions
from tests.operations.versions import NOW, adapter, version


def test_served_versions_are_the_active_ones_and_ab_candidates() -> None:
    fleet = [
        adapter(
            "a",
            version("a", "1.0.0"),  # retired: not served
            version("a", "1.1.0", share=0.2),  # candidate with a share
            version("a", "2.0.0", active=True),
        ),
        adapter("b", version("b", "1.0.0")),  # nothing active
    ]
    assert [v.served_name for v in served_versions(fleet)] == ["a@2.0.0", "a@1.1.0"]


def test_recent_use_orders_the_plan() -> None:
    old = version("old", "1.0.0", active=True, requests=500, last_used=NOW - timedelta(days=3))
    recent = version("recent", "1.0.0", active=True, requests=2, last_used=NOW)
    naive_recent = version(  # SQLite hands back naive UTC times
        "naive", "1.0.0", active=True, last_used=(NOW - timedelta(hours=1)).replace(tzinfo=None)
    )
    never_busy = version("never-busy", "1.0.0", active=True, requests=9)
    never = version("never", "1.0.0", active=True)
    ordered = by_recent_use([never, old, never_busy, naive_recent, recent])
    assert [v.name for v in ordered] == ["recent", "naive", "old", "never-busy", "never"]
