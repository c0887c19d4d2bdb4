"""benchmarks/fleet/change_feed_delay.py: two real control-plane processes on PostgreSQL (a check
of the script; the delays it measures are not asserted here, only that each change arrived)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fleet import change_feed_delay


@pytest.mark.postgres
def test_every_change_through_a_reaches_b(postgres_url: str, tmp_path: Path) -> None:
    result = change_feed_delay.measure(postgres_url, rounds=2, timeout_s=20.0, workdir=tmp_path)
    assert result.missed == dict.fromkeys(change_feed_delay.KINDS, 0)
    for kind in change_feed_delay.KINDS:
        assert len(result.delays_ms[kind]) == 2, kind
        # every cache of B lives a minute: sooner than that, only the feed brought the change
        assert all(0 < ms < 1e3 * change_feed_delay.CACHE_S for ms in result.delays_ms[kind])
    assert set(result.probe_ms_p50) == {"route", "token"}
    table = change_feed_delay.report(result)
    assert table.count("| 2 of 2 |") == len(change_feed_delay.KINDS)


def test_the_report_names_what_was_missed() -> None:
    result = change_feed_delay.FeedDelays(
        rounds=2,
        delays_ms={"promote": [5.0, 150.0], "token made": [], "token revoked": [3.0]},
        missed={"promote": 0, "token made": 2, "token revoked": 1},
        probe_ms_p50={"route": 4.0, "token": 2.0},
    )
    rows = change_feed_delay.report(result).splitlines()
    assert rows[2] == "| promote | 2 of 2 | 150.0 | 150.0 | 150.0 | 150.0 | no |"
    assert rows[3] == "| token made | 0 of 2 | - | - | - | - | no |"
    assert rows[4].startswith("| token revoked | 1 of 2 | 3.0 |")
    assert rows[4].endswith("| no |")
