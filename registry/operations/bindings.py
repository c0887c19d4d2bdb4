"""Foreign bindings: served names a vLLM replica binds to weights the registry did not issue.

vLLM's ``/v1/load_lora_adapter`` (and, on 0.32, SageMaker's ``POST /adapters``) binds any name
to any path, and vLLM then answers that name from those weights without asking our resolver
again. Whoever reaches vLLM's port could thus make ``python-lora@1.0.0`` mean other weights,
which the front door would serve under the registry's name. Each health round,
:class:`BindingGuard` compares the LoRA cards of a replica's ``/v1/models`` (name → ``root``,
the path vLLM loaded from) with what the registry issues:

- a name that parses as ours (``name`` or ``name@version``, :mod:`hi_moe_lora.served_names`) is
  *foreign* when the registry does not know it, or when vLLM's path is not the one the resolver
  hands out for it: the version's ``local_path`` (as written, or with its symbolic links
  resolved, as the resolver gives it to vLLM); a bare name may be bound to any registered
  version of its adapter (a stale bare name after a promotion is
  :mod:`registry.fleet.invalidation`'s work). Suspects are confirmed against a fresh read of the
  registry before anything is done, so a version registered during the round is not one.
- a foreign name is quarantined (the front door refuses it), unloaded on that replica
  (``POST /v1/unload_lora_adapter``, bounded by the unload deadline), logged as a WARNING (name
  and replica) and counted (``hi_moe_lora_foreign_bindings_total{outcome}``); once vLLM
  confirms the unload the quarantine is lifted and the next request resolves the registry's
  weights again. A failed unload keeps the quarantine and is retried next round.
- names that cannot be ours (upper case, ``/``, a version that is not semantic) are left alone:
  the front door never forwards such a name, so they cannot shadow a registry name. They are
  reported in the health picture.

A replica that sees the artifact store gets the registry's ``local_path``; one that does not
(``HI_MOE_LORA_ARTIFACT_CACHE_DIR``, :mod:`hi_moe_lora.fetching`) gets the resolver's verified
download, a directory named by the version's checksum: both count as issued. (Whoever can write
a directory of that name on the vLLM host can already change what vLLM serves.)
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from hi_moe_lora.served_names import parse_served_name
from registry.fleet.model_cards import LoraCard
from registry.fleet.quarantine import Quarantine
from registry.fleet.upstreams import Replica, UpstreamPool, UpstreamUnavailable
from registry.metrics.families import ControlPlaneMetrics
from registry.metrics.labels import UnloadOutcome
from registry.operations.health_picture import ForeignBinding
from registry.services.adapters import AdapterService
from registry.services.records import AdapterInfo

logger = logging.getLogger(__name__)

UNLOAD_PATH = "/v1/unload_lora_adapter"
NOT_REGISTERED = "a name of ours that the registry does not know"
OTHER_WEIGHTS = "bound to weights the registry did not issue"


@dataclass(frozen=True)
class BindingReport:
    """One replica's bindings as one check found them."""

    foreign: tuple[ForeignBinding, ...] = ()
    outside: tuple[str, ...] = ()

    @property
    def still_bound(self) -> frozenset[str]:
        return frozenset(f.served_name for f in self.foreign if not f.removed)


def _forms(path: str) -> frozenset[str]:
    """``path`` as written (normalised) and with its symbolic links resolved."""
    return frozenset({os.path.normpath(path), os.path.realpath(path)})


class IssuedPaths:
    """Served name → the paths the registry would hand vLLM for it, and the checksums a
    resolver's download cache names its verified copies by."""

    def __init__(self, adapters: Iterable[AdapterInfo]) -> None:
        self._paths: dict[str, frozenset[str]] = {}
        self._digests: dict[str, frozenset[str]] = {}
        for adapter in adapters:
            every: set[str] = set()
            digests: set[str] = set()
            for version in adapter.versions:
                forms = _forms(version.local_path)
                self._paths[version.served_name] = forms
                self._digests[version.served_name] = frozenset({version.sha256})
                every |= forms
                digests.add(version.sha256)
            self._paths[adapter.name] = frozenset(every)
            self._digests[adapter.name] = frozenset(digests)

    def problem(self, name: str, root: str | None) -> str | None:
        """Why ``name`` bound to ``root`` is foreign; ``None`` when the registry issued it."""
        issued = self._paths.get(name)
        if issued is None:
            return NOT_REGISTERED
        if root is None:
            return OTHER_WEIGHTS
        if os.path.normpath(root) in issued:
            return None
        # a host without the artifact store: the resolver downloaded the version, verified its
        # checksum, and handed vLLM the cache entry named by that checksum
        if os.path.basename(os.path.normpath(root)) in self._digests.get(name, ()):
            return None
        return OTHER_WEIGHTS


def is_ours(name: str) -> bool:
    """Whether ``name`` lies in the registry's namespace (``name`` or ``name@version``)."""
    return parse_served_name(name) is not None


class BindingGuard:
    """Finds foreign bindings on a replica, quarantines and unloads them (see the module doc)."""

    def __init__(
        self,
        adapters: AdapterService,
        upstreams: UpstreamPool,
        metrics: ControlPlaneMetrics,
        quarantine: Quarantine,
        *,
        unload_timeout_s: float,
    ) -> None:
        self._adapters = adapters
        self._upstreams = upstreams
        self._metrics = metrics
        self._quarantine = quarantine
        self._unload_timeout_s = unload_timeout_s
        #: replica URL → served name → reason, for names still bound to foreign weights
        self._held: dict[str, dict[str, str]] = {}

    async def check(
        self, replica: Replica, cards: Sequence[LoraCard], adapters: Sequence[AdapterInfo]
    ) -> BindingReport:
        """Compare ``replica``'s cards with ``adapters`` (the round's registry reading); unload
        every foreign binding. Never raises for vLLM's or the registry's failures."""
        ours = [card for card in cards if is_ours(card.name)]
        outside = tuple(sorted(card.name for card in cards if not is_ours(card.name)))
        suspects = await self._suspects(ours, adapters)
        if suspects:
            try:
                # a fresh reading: versions registered since the round began are not foreign
                suspects = await self._suspects(suspects, await self._adapters.list_adapters())
            except Exception:
                logger.exception("could not re-read the registry to confirm foreign bindings")
        held = {card.name: reason for card, reason in suspects.items()}
        self._held[replica.url] = dict(held)
        self._publish()
        found: list[ForeignBinding] = []
        for card, reason in suspects.items():
            removed = await self._unload(replica, card.name, reason)
            if removed:
                held.pop(card.name, None)
            found.append(ForeignBinding(card.name, reason, removed, datetime.now(timezone.utc)))
        self._held[replica.url] = held
        self._publish()
        return BindingReport(tuple(found), outside)

    def forget(self, replica: Replica) -> None:
        """The replica went down: whatever it had bound went with it."""
        if self._held.pop(replica.url, None):
            self._publish()

    async def _suspects(
        self, cards: Iterable[LoraCard], adapters: Sequence[AdapterInfo]
    ) -> dict[LoraCard, str]:
        cards = list(cards)
        if not cards:
            return {}
        # realpath reads the file system: off the event loop
        issued = await asyncio.to_thread(IssuedPaths, adapters)
        found: dict[LoraCard, str] = {}
        for card in cards:
            problem = issued.problem(card.name, card.root)
            if problem is not None:
                found[card] = problem
        return found

    def _publish(self) -> None:
        merged: dict[str, str] = {}
        for names in self._held.values():
            for name, reason in names.items():
                merged.setdefault(name, f"{name} on a vLLM replica: {reason} (being unloaded)")
        self._quarantine.replace_bindings(merged)

    async def _unload(self, replica: Replica, name: str, reason: str) -> bool:
        """Unload ``name`` on ``replica``; whether it is gone now."""
        logger.warning("vLLM %s: %r: %s; unloading it", replica.url, name, reason)
        outcome: UnloadOutcome
        try:
            answer = await self._upstreams.send_to(
                replica,
                "POST",
                UNLOAD_PATH,
                json_body={"lora_name": name},
                timeout_s=self._unload_timeout_s,
            )
        except UpstreamUnavailable as exc:
            logger.warning("vLLM %s: unloading %r failed: %s", replica.url, name, exc.message)
            outcome = "failed"
        else:
            if answer.status_code == 200:
                outcome = "unloaded"
            elif answer.status_code == 404:
                outcome = "not_loaded"  # gone already (someone else unloaded it)
            else:
                logger.warning(
                    "vLLM %s: unloading %r answered %s", replica.url, name, answer.failure()
                )
                outcome = "failed"
        self._metrics.foreign_binding_unloaded(outcome)
        if outcome != "failed":
            logger.info("vLLM %s: foreign binding %r removed", replica.url, name)
        return outcome != "failed"
