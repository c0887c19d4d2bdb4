"""ReplicaChooser: adapter affinity, home replicas (rendezvous hash), spill-over, other policies."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from registry.fleet.loaded import LoadedAdapters
from registry.fleet.routing import ReplicaChooser, rendezvous_score
from registry.fleet.upstreams import Replica

URLS = ["http://vllm-0:8000", "http://vllm-1:8000", "http://vllm-2:8000"]


def _fleet() -> tuple[list[Replica], LoadedAdapters]:
    return [Replica(url) for url in URLS], LoadedAdapters()


def test_a_loaded_version_goes_to_the_replica_that_has_it() -> None:
    replicas, loaded = _fleet()
    chooser = ReplicaChooser(replicas, loaded)
    home = chooser.choose("python-lora@1.0.0").order[0]
    holder = next(r for r in replicas if r is not home)
    loaded.mark(holder.url, "python-lora@1.0.0")
    choice = chooser.choose("python-lora@1.0.0")
    assert choice.order[0] is holder
    assert choice.reason == "loaded"
    assert set(choice.order) == set(replicas)


def test_among_holders_the_least_busy_leads() -> None:
    replicas, loaded = _fleet()
    for replica in replicas[:2]:
        loaded.mark(replica.url, "a@1")
    replicas[0].outstanding, replicas[1].outstanding = 3, 1
    assert ReplicaChooser(replicas, loaded).choose("a@1").order[0] is replicas[1]


def test_an_unloaded_version_has_one_home_and_homes_spread() -> None:
    replicas, loaded = _fleet()
    chooser = ReplicaChooser(replicas, loaded)
    first = chooser.choose("math-lora@2.0.0")
    assert first.reason == "home"
    assert all(chooser.choose("math-lora@2.0.0").order[0] is first.order[0] for _ in range(10))
    # another chooser (another control-plane instance) agrees without talking to this one
    other = ReplicaChooser([Replica(url) for url in URLS], LoadedAdapters())
    assert other.choose("math-lora@2.0.0").order[0].url == first.order[0].url
    homes = Counter(chooser.choose(f"adapter-{i}@1").order[0].url for i in range(300))
    assert set(homes) == set(URLS)
    assert min(homes.values()) > 60  # about a third each


def test_removing_a_replica_moves_only_the_versions_it_was_home_to() -> None:
    replicas, loaded = _fleet()
    names = [f"adapter-{i}@1" for i in range(200)]
    before = {n: ReplicaChooser(replicas, loaded).choose(n).order[0].url for n in names}
    after = {n: ReplicaChooser(replicas[:2], loaded).choose(n).order[0].url for n in names}
    moved = {n for n in names if before[n] != after[n]}
    assert moved == {n for n in names if before[n] == URLS[2]}


def test_a_busy_preferred_replica_spills_to_the_least_busy() -> None:
    replicas, loaded = _fleet()
    chooser = ReplicaChooser(replicas, loaded, spill_at=4)
    home = chooser.choose("a@1").order[0]
    home.outstanding = 3
    assert chooser.choose("a@1").order[0] is home  # below the threshold: stays
    home.outstanding = 4
    spilled = chooser.choose("a@1")
    assert spilled.reason == "spill"
    assert spilled.order[0] is not home
    for replica in replicas:
        replica.outstanding = 4  # everyone as busy: no point in leaving home
    assert chooser.choose("a@1").order[0] is home


def test_down_replicas_come_last_and_are_still_tried_when_all_are_down() -> None:
    replicas, loaded = _fleet()
    chooser = ReplicaChooser(replicas, loaded)
    home = chooser.choose("a@1").order[0]
    home.healthy = False
    choice = chooser.choose("a@1")
    assert choice.order[0] is not home
    assert choice.order[-1] is home
    loaded.mark(home.url, "a@1")  # loaded there, but down: not preferred
    assert chooser.choose("a@1").order[0] is not home
    for replica in replicas:
        replica.down_until = time.monotonic() + 60
    assert set(chooser.choose("a@1").order) == set(replicas)


def test_base_model_requests_go_to_the_least_busy() -> None:
    replicas, loaded = _fleet()
    replicas[0].outstanding, replicas[1].outstanding, replicas[2].outstanding = 2, 0, 1
    choice = ReplicaChooser(replicas, loaded).choose(None)
    assert choice.reason == "least_outstanding"
    assert [r.url for r in choice.order] == [URLS[1], URLS[2], URLS[0]]


def test_the_other_policies() -> None:
    replicas, loaded = _fleet()
    loaded.mark(URLS[0], "a@1")
    rotating = ReplicaChooser(replicas, loaded, policy="round_robin")
    firsts = [rotating.choose("a@1").order[0].url for _ in range(3)]
    assert sorted(firsts) == sorted(URLS)
    assert rotating.choose("a@1").reason == "round_robin"
    replicas[0].outstanding = 5
    least = ReplicaChooser(replicas, loaded, policy="least_outstanding")
    assert least.choose("a@1").order[0] is not replicas[0]


def test_bad_settings_are_refused() -> None:
    replicas, loaded = _fleet()
    with pytest.raises(ValueError, match="unknown routing policy"):
        ReplicaChooser(replicas, loaded, policy="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="spill_at"):
        ReplicaChooser(replicas, loaded, spill_at=0)


def test_rendezvous_score_is_stable() -> None:
    assert rendezvous_score("a@1", URLS[0]) == rendezvous_score("a@1", URLS[0])
    assert rendezvous_score("a@1", URLS[0]) != rendezvous_score("a@1", URLS[1])


def test_serves_here_follows_affinity() -> None:
    replicas, loaded = _fleet()
    chooser = ReplicaChooser(replicas, loaded)
    home = chooser.choose("a@1").order[0]
    assert [chooser.serves_here(r, "a@1") for r in replicas] == [r is home for r in replicas]
    other = next(r for r in replicas if r is not home)
    loaded.mark(other.url, "a@1")  # loaded elsewhere: probed there, not at home any more
    assert [chooser.serves_here(r, "a@1") for r in replicas] == [r is other for r in replicas]
    everywhere = ReplicaChooser(replicas, loaded, policy="round_robin")
    assert all(everywhere.serves_here(r, "a@1") for r in replicas)
