"""Which vLLM replica a request goes to: adapter affinity, spill-over, and the other policies.

A LoRA request is cheapest on a replica that already has its version loaded: elsewhere vLLM
first asks the resolver, may download the artifact, and reads the weights from disk (a cold
start costs seconds). :class:`ReplicaChooser` orders the replicas to try for one request; the
upstream pool sends to the first that accepts a connection and falls over to the next.

Policies (setting ``routing_policy``):

- ``affinity`` (default). An adapter request goes to a replica that has the version loaded
  (:class:`registry.fleet.loaded.LoadedAdapters`: learned from our own routing, each replica's
  ``/v1/models`` and ``vllm:lora_requests_info``), the least busy of them when several have it.
  When none has it, it goes to the version's *home* replica: the highest rendezvous hash of
  ``(served name, replica URL)``, so every request for a version (and every control-plane
  instance, without talking to each other) picks the same replica, and adding or removing one
  replica moves only the versions whose home it was. When the preferred replica already has
  ``spill_at`` requests outstanding and another has fewer, the request spills to the least busy
  replica instead. Base-model requests go to the least busy replica.
- ``least_outstanding``: always the replica with the fewest requests in flight.
- ``round_robin``: the replicas in turn (the behaviour before affinity).

Replicas found down (health monitor, refused connections) come last, so they are tried only
when every other one failed. Every decision has a :data:`RouteReason`, counted per replica in
``hi_moe_lora_upstream_routes_total`` by the front door.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from registry.fleet.loaded import LoadedAdapters
from registry.fleet.upstreams import Replica

RoutingPolicy = Literal["affinity", "least_outstanding", "round_robin"]
ROUTING_POLICIES: tuple[RoutingPolicy, ...] = get_args(RoutingPolicy)

#: Why a replica was first in line: it has the version ``loaded``; it is the version's ``home``
#: (nobody has it yet); the preferred one was busy, so it ``spill``-ed to the least busy; the
#: ``least_outstanding`` or ``round_robin`` policy (base-model requests: least outstanding);
#: ``failover``: the first choice could not be reached, another answered.
RouteReason = Literal["loaded", "home", "spill", "least_outstanding", "round_robin", "failover"]
ROUTE_REASONS: tuple[RouteReason, ...] = get_args(RouteReason)

#: Default number of outstanding requests on the preferred replica from which a request spills
#: over to a less busy one (vLLM batches continuously: a few concurrent requests cost little).
DEFAULT_SPILL_AT = 8


@dataclass(frozen=True)
class ReplicaChoice:
    """The replicas to try, in order, and why the first one leads."""

    order: list[Replica]
    reason: RouteReason


def rendezvous_score(served_name: str, replica_url: str) -> int:
    """Highest-random-weight hash of a version on a replica (stable across processes)."""
    key = f"{served_name}\x00{replica_url}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


class ReplicaChooser:
    """Orders a pool's replicas for one request by the configured policy."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        loaded: LoadedAdapters,
        *,
        policy: RoutingPolicy = "affinity",
        spill_at: int = DEFAULT_SPILL_AT,
    ) -> None:
        if policy not in ROUTING_POLICIES:
            raise ValueError(f"unknown routing policy {policy!r} (one of {ROUTING_POLICIES})")
        if spill_at < 1:
            raise ValueError("spill_at must be at least 1")
        self._replicas = list(replicas)
        self._loaded = loaded
        self.policy: RoutingPolicy = policy
        self.spill_at = spill_at
        self._turn = itertools.count()

    def choose(self, served_name: str | None) -> ReplicaChoice:
        """The order to try the replicas in for ``served_name`` (``None``: the base model)."""
        now = time.monotonic()
        up = [r for r in self._replicas if r.is_up(now)]
        down = [r for r in self._replicas if not r.is_up(now)]
        if not up:  # all down: try them anyway (round-robin), the pool reports the failure
            return ReplicaChoice(self._rotated(down), "round_robin")
        if self.policy == "round_robin":
            return ReplicaChoice(self._rotated(up) + down, "round_robin")
        if self.policy == "least_outstanding" or served_name is None:
            return ReplicaChoice(self._by_load(up) + down, "least_outstanding")
        return self._affinity(served_name, up, down)

    def serves_here(self, replica: Replica, served_name: str) -> bool:
        """Whether requests for ``served_name`` go to ``replica`` under this policy: it has the
        version loaded, or no replica that is up has it and ``replica`` is its home. Under the
        other policies every replica serves every version. The health monitor probes a version
        only where this holds, so its probes do not load every version on every replica."""
        if self.policy != "affinity":
            return True
        if self._loaded.knows(replica.url, served_name):
            return True
        now = time.monotonic()
        up = [r for r in self._replicas if r.is_up(now)] or self._replicas
        if any(self._loaded.knows(r.url, served_name) for r in up):
            return False
        return max(up, key=lambda r: rendezvous_score(served_name, r.url)) is replica

    def _affinity(self, served_name: str, up: list[Replica], down: list[Replica]) -> ReplicaChoice:
        holders = [r for r in up if self._loaded.knows(r.url, served_name)]
        reason: RouteReason
        if holders:
            preferred = min(
                holders, key=lambda r: (r.outstanding, -rendezvous_score(served_name, r.url))
            )
            reason = "loaded"
        else:
            preferred = max(up, key=lambda r: rendezvous_score(served_name, r.url))
            reason = "home"
        least = min(up, key=lambda r: r.outstanding)
        if preferred.outstanding >= self.spill_at and least.outstanding < preferred.outstanding:
            preferred, reason = least, "spill"
        # after the first choice: replicas holding the version, then by load
        rest = sorted(
            (r for r in up if r is not preferred),
            key=lambda r: (not self._loaded.knows(r.url, served_name), r.outstanding),
        )
        return ReplicaChoice([preferred, *rest, *down], reason)

    def _rotated(self, replicas: list[Replica]) -> list[Replica]:
        if not replicas:
            return []
        start = next(self._turn) % len(replicas)
        return replicas[start:] + replicas[:start]

    def _by_load(self, replicas: list[Replica]) -> list[Replica]:
        rotated = self._rotated(replicas)  # ties broken in turn, not always the first replica
        return sorted(rotated, key=lambda r: r.outstanding)
