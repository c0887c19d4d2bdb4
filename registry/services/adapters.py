"""The adapter registry's rules: register, promote, rollback, delete, resolve, A/B traffic.

Lifecycle. A version is registered from a local PEFT directory below the configured source roots
(file-system checks in :mod:`registry.services.sources`, then copied into the artifact store,
an AdaLoRA adapter converted there into plain LoRA (:mod:`hi_moe_lora.adapters.adalora`, the
original kept beside it), validated against the served base model, checksummed, given a fresh
``lora_int_id``). An adapter's
first version becomes active; later versions are registered inactive with ``previous_version`` =
the then-active version. ``promote`` makes a version active and records the version it replaced as
its ``previous_version``; ``rollback`` re-activates the active version's ``previous_version`` (so
repeated rollbacks walk the chain back). The database guarantees at most one active version per
adapter (partial unique index); promotion deactivates the old version before activating the new.
``delete`` removes an inactive version and its artifact; the active version cannot be deleted, so
an adapter keeps at least one version. Ids are never reused (``repositories.lora_ids``).

A/B traffic: see :mod:`registry.services.traffic`. Promoting or rolling back to a version ends
its experiment (its weight becomes 0); other candidates keep theirs.

Audit: every change is recorded in ``audit_events`` in its own transaction
(:func:`registry.services.audit.record`), as ``actor`` (the caller's token name; ``_system``
when no one asked through the API), with the small state before and after it. A promote of the
version already active changes nothing and records nothing.

All public methods are coroutines; database and file work runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hi_moe_lora.adapters import (
    AdapterManifest,
    AdapterValidationError,
    check_policy,
    inspect_adapter,
)
from hi_moe_lora.adapters.adalora import convert_adalora, is_adalora
from hi_moe_lora.adapters.architecture import ModelConfigError, ModelShape, load_model_shape
from hi_moe_lora.adapters.checksum import CONFIG_FILE
from hi_moe_lora.adapters.inspection import SAFETENSORS_FILE
from hi_moe_lora.control_api import ArtifactFile, ResolvedAdapter
from registry.access.scopes import SYSTEM
from registry.db.models import Adapter, AdapterVersion
from registry.db.session import Database, UnitOfWork
from registry.errors import (
    ConfigurationError,
    ConflictError,
    InvalidAdapterError,
    InvalidRequestError,
    NotFoundError,
)
from registry.repositories.adapters import AdapterRepository
from registry.repositories.lora_ids import allocate_lora_int_id
from registry.services import traffic
from registry.services.artifacts import ArtifactStore
from registry.services.audit import record
from registry.services.naming import (
    check_name,
    check_version,
    name_or_not_found,
    served_name_or_not_found,
)
from registry.services.records import (
    AdapterInfo,
    AdapterVersionInfo,
    adapter_info,
    resolved,
    traffic_shares,
    version_info,
)
from registry.services.sources import Progress, SourcePolicy

logger = logging.getLogger(__name__)

ActiveChangedListener = Callable[[str], Awaitable[None]]


#: The files of a version the artifact endpoint serves (what the store keeps of an adapter).
ARTIFACT_FILES = (CONFIG_FILE, SAFETENSORS_FILE)


def _artifact_files(directory: str) -> tuple[ArtifactFile, ...]:
    """Name and size of each artifact file present in ``directory``."""
    files = []
    for name in ARTIFACT_FILES:
        try:
            files.append(ArtifactFile(name=name, size=(Path(directory) / name).stat().st_size))
        except OSError:
            continue
    return tuple(files)


@dataclass(frozen=True)
class _Registration:
    name: str
    version: str
    source_uri: str
    domains: tuple[str, ...]
    description: str | None
    manifest: AdapterManifest
    staging: Path
    actor: str


def _served_model_shape(base_model: str) -> ModelShape | None:
    """The served model's architecture when it is a local directory we understand (else None)."""
    try:
        return load_model_shape(base_model)
    except ModelConfigError as exc:
        logger.error("the served base model's config cannot be used: %s", exc)
        raise ConfigurationError(
            "the served base model's config.json cannot be read; see the control plane's log",
            code="base_model_config_unreadable",
        ) from exc


def _cleaned(values: Iterable[str], *, what: str, code: str, fold_case: bool) -> tuple[str, ...]:
    """Stripped, non-empty, de-duplicated in order (``fold_case``: ignoring case); linear."""
    cleaned: list[str] = []
    seen: set[str] = set()
    for value in values:
        text = value.strip()
        if not text:
            raise InvalidRequestError(f"{what} must be non-empty strings", code=code)
        key = text.lower() if fold_case else text
        if key not in seen:
            seen.add(key)
            cleaned.append(text)
    return tuple(cleaned)


def _candidate_weights(weights: Iterable[tuple[str, float]]) -> dict[str, float]:
    """The A/B split as the audit log keeps it: the candidates with a weight."""
    return {version: weight for version, weight in weights if weight > 0}


def _hints_state(keywords: Sequence[str], exemplars: Sequence[str]) -> dict[str, object]:
    """Dispatch hints as the audit log keeps them: the keywords, and how many exemplars."""
    return {"keywords": list(keywords), "exemplars": len(exemplars)}


class AdapterService:
    def __init__(
        self,
        database: Database,
        store: ArtifactStore,
        *,
        base_model: str | None,
        max_lora_rank: int,
        sources: SourcePolicy,
    ) -> None:
        self.database = database
        self.store = store
        self.sources = sources
        self.base_model = base_model
        self.max_lora_rank = max_lora_rank
        self._listeners: list[ActiveChangedListener] = []
        self._served_listeners: list[ActiveChangedListener] = []
        self._deleted_listeners: list[ActiveChangedListener] = []
        #: Bumped after every committed change made through this service (registrations,
        #: promotions, rollbacks, deletions, traffic and dispatch hints), so readers that keep
        #: a snapshot of the fleet (the dispatcher) know when to read it again.
        self.generation = 0

    def add_active_changed_listener(self, listener: ActiveChangedListener) -> None:
        """Called with the adapter name after a promote/rollback has committed."""
        self._listeners.append(listener)

    def add_served_changed_listener(self, listener: ActiveChangedListener) -> None:
        """Called with the adapter name after the set of versions it serves changed: a first
        version registered (it is active at once), a promote, a rollback, a traffic split."""
        self._served_listeners.append(listener)

    def add_version_deleted_listener(self, listener: ActiveChangedListener) -> None:
        """Called with the served name (``name@version``) after a delete has committed, before
        the call answers: nothing may route to, or keep serving, the deleted version."""
        self._deleted_listeners.append(listener)

    def changed_elsewhere(self, name: str) -> None:
        """Another control-plane instance changed ``name`` (the change feed): bump
        :attr:`generation` so readers of a fleet snapshot (the dispatcher) read it again. No
        listener runs here: they ran on that instance, fleet-side effects included."""
        self.generation += 1

    # ---------------------------------------------------------------- registration

    async def register(
        self,
        name: str,
        version: str,
        source: str,
        *,
        domains: Iterable[str] = (),
        description: str | None = None,
        actor: str = SYSTEM,
        progress: Progress | None = None,
    ) -> AdapterVersionInfo:
        """Register ``name@version`` from ``source`` (a local directory or an allowed URL);
        ``progress`` is told the bytes copied (from a worker thread) as they are."""
        check_name(name)
        check_version(version)
        cleaned = _cleaned(domains, what="domains", code="invalid_domain", fold_case=False)
        if self.base_model is None:
            raise ConfigurationError(
                "no served base model configured: set HI_MOE_LORA_BASE_MODEL",
                code="base_model_not_configured",
            )
        info = await asyncio.to_thread(
            self._register,
            name,
            version,
            source,
            cleaned,
            description,
            self.base_model,
            actor,
            progress,
        )
        self.generation += 1
        if info.is_active:
            await self._notify(name, self._served_listeners)
        return info

    def _register(
        self,
        name: str,
        version: str,
        source: str,
        domains: tuple[str, ...],
        description: str | None,
        base_model: str,
        actor: str,
        progress: Progress | None = None,
    ) -> AdapterVersionInfo:
        checked = self.sources.check(source)  # reads nothing outside the roots, writes nothing
        self.database.run(lambda uow: self._ensure_version_free(uow, name, version), write=False)
        model = _served_model_shape(base_model)
        staging = self.store.stage(checked, progress)
        try:
            try:
                converted = is_adalora(staging)
                if converted:
                    convert_adalora(staging)  # the original kept under original/
                manifest = inspect_adapter(staging)
                if converted:
                    manifest = dataclasses.replace(manifest, variant="adalora")
                check_policy(
                    manifest, max_rank=self.max_lora_rank, base_model=base_model, model=model
                )
            except AdapterValidationError as exc:
                logger.info(
                    "registration of %s@%s from %s refused: %s", name, version, checked.uri, exc
                )
                raise InvalidAdapterError(exc.detail, code=exc.code) from exc
            registration = _Registration(
                name, version, checked.uri, domains, description, manifest, staging, actor
            )
            info = self.database.run(lambda uow: self._insert_version(uow, registration))
        finally:
            self.store.discard(staging)  # gone already once published
        logger.info(
            "registered %s (lora_int_id=%d, active=%s)",
            info.served_name,
            info.lora_int_id,
            info.is_active,
        )
        return info

    def _ensure_version_free(self, uow: UnitOfWork, name: str, version: str) -> None:
        repo = AdapterRepository(uow.session)
        adapter = repo.get(name)
        if adapter is not None and repo.version(adapter.id, version) is not None:
            raise ConflictError(f"{name}@{version} is already registered", code="version_exists")

    def _insert_version(self, uow: UnitOfWork, reg: _Registration) -> AdapterVersionInfo:
        repo = AdapterRepository(uow.session)
        adapter = repo.get(reg.name, lock=True)
        if adapter is None:
            adapter = repo.add(Adapter(name=reg.name, description=reg.description))
        elif reg.description is not None:
            adapter.description = reg.description
        self._ensure_version_free(uow, reg.name, reg.version)
        active = repo.active_version(adapter.id)
        manifest = reg.manifest
        assert manifest.base_model is not None  # check_policy rejects adapters without one
        row = repo.add_version(
            AdapterVersion(
                adapter_id=adapter.id,
                version=reg.version,
                lora_int_id=allocate_lora_int_id(uow.session),
                source_uri=reg.source_uri,
                local_path=str(self.store.path_for(reg.name, reg.version)),
                sha256=manifest.sha256,
                rank=manifest.rank,
                alpha=manifest.alpha,
                target_modules=list(manifest.target_modules),
                variant=manifest.variant,
                domains=list(reg.domains),
                base_model=manifest.base_model,
                previous_version=active.version if active else None,
                status="inactive" if active else "active",
                is_active=active is None,
                traffic_weight=0.0,
                request_count=0,
                success_count=0,
            )
        )
        record(
            uow,
            reg.actor,
            "version.register",
            adapter=reg.name,
            version=reg.version,
            before={"active_version": active.version if active else None},
            after={
                "active_version": active.version if active else reg.version,
                "lora_int_id": row.lora_int_id,
                "sha256": row.sha256,
            },
        )
        final = self.store.publish(reg.staging, reg.name, reg.version)
        uow.on_rollback(lambda: self.store.unpublish(final, reg.staging))
        return version_info(reg.name, row, 1.0 if row.is_active else 0.0)

    # ---------------------------------------------------------------- reads

    async def list_adapters(self) -> list[AdapterInfo]:
        return await asyncio.to_thread(self.database.run, self._list, write=False)

    def _list(self, uow: UnitOfWork) -> list[AdapterInfo]:
        return [adapter_info(a) for a in AdapterRepository(uow.session).list_with_versions()]

    async def get_adapter(self, name: str) -> AdapterInfo:
        name_or_not_found(name)

        def work(uow: UnitOfWork) -> AdapterInfo:
            adapter = AdapterRepository(uow.session).get_with_versions(name)
            if adapter is None:
                raise NotFoundError(f"no adapter named {name!r}", code="adapter_not_found")
            return adapter_info(adapter)

        return await asyncio.to_thread(self.database.run, work, write=False)

    async def get_version(self, name: str, version: str) -> AdapterVersionInfo:
        name_or_not_found(name, version)
        info = await self.get_adapter(name)
        for candidate in info.versions:
            if candidate.version == version:
                return candidate
        raise NotFoundError(f"{name}@{version} is not registered", code="version_not_found")

    # ---------------------------------------------------------------- promote / rollback

    async def promote(self, name: str, version: str, *, actor: str = SYSTEM) -> AdapterVersionInfo:
        name_or_not_found(name, version)
        info, changed = await asyncio.to_thread(
            self.database.run, lambda uow: self._promote(uow, name, version, actor)
        )
        if changed:
            self.generation += 1
            logger.info("promoted %s", info.served_name)
            await self._notify(name, self._listeners + self._served_listeners)
        return info

    def _promote(
        self, uow: UnitOfWork, name: str, version: str, actor: str
    ) -> tuple[AdapterVersionInfo, bool]:
        repo = AdapterRepository(uow.session)
        adapter = self._locked_adapter(repo, name)
        target = self._version(repo, adapter, version)
        current = repo.active_version(adapter.id)
        if current is not None and current.id == target.id:
            return self._info(repo, adapter, target), False
        if current is not None:
            repo.set_active(current, False)
            target.previous_version = current.version
        target.traffic_weight = 0.0
        repo.set_active(target, True)
        record(
            uow,
            actor,
            "version.promote",
            adapter=name,
            version=version,
            before={"active_version": current.version if current else None},
            after={"active_version": version, "previous_version": target.previous_version},
        )
        return self._info(repo, adapter, target), True

    async def rollback(self, name: str, *, actor: str = SYSTEM) -> AdapterVersionInfo:
        name_or_not_found(name)
        info = await asyncio.to_thread(
            self.database.run, lambda uow: self._rollback(uow, name, actor)
        )
        self.generation += 1
        logger.info("rolled %s back to %s", name, info.version)
        await self._notify(name, self._listeners + self._served_listeners)
        return info

    def _rollback(self, uow: UnitOfWork, name: str, actor: str) -> AdapterVersionInfo:
        repo = AdapterRepository(uow.session)
        adapter = self._locked_adapter(repo, name)
        current = repo.active_version(adapter.id)
        if current is None:
            raise ConflictError(f"{name} has no active version", code="no_active_version")
        if current.previous_version is None:
            raise ConflictError(
                f"{name}@{current.version} has no previous version to roll back to",
                code="no_previous_version",
            )
        target = repo.version(adapter.id, current.previous_version)
        if target is None:
            raise ConflictError(
                f"rollback target {name}@{current.previous_version} was deleted",
                code="rollback_target_missing",
            )
        repo.set_active(current, False)
        target.traffic_weight = 0.0
        repo.set_active(target, True)
        record(
            uow,
            actor,
            "adapter.rollback",
            adapter=name,
            version=target.version,
            before={"active_version": current.version},
            after={"active_version": target.version},
        )
        return self._info(repo, adapter, target)

    async def _notify(self, name: str, listeners: list[ActiveChangedListener]) -> None:
        for listener in list(listeners):
            try:
                await listener(name)
            except Exception:
                logger.exception("listener %r failed for %s", listener, name)

    # ---------------------------------------------------------------- delete

    async def delete(self, name: str, version: str, *, actor: str = SYSTEM) -> None:
        name_or_not_found(name, version)
        await asyncio.to_thread(
            self.database.run, lambda uow: self._delete(uow, name, version, actor)
        )
        self.generation += 1
        logger.info("deleted %s@%s", name, version)
        await self._notify(f"{name}@{version}", self._deleted_listeners)

    def _delete(self, uow: UnitOfWork, name: str, version: str, actor: str) -> None:
        repo = AdapterRepository(uow.session)
        adapter = self._locked_adapter(repo, name)
        row = self._version(repo, adapter, version)
        if row.is_active:
            raise ConflictError(
                f"{name}@{version} is active: promote another version first",
                code="version_is_active",
            )
        final = Path(row.local_path)
        record(
            uow,
            actor,
            "version.delete",
            adapter=name,
            version=version,
            before={"lora_int_id": row.lora_int_id, "sha256": row.sha256},
        )
        repo.delete_version(row)
        if not self.store.owns(final):
            logger.warning("not deleting %s: outside the artifact store", final)
            return
        trash = self.store.retire(final)
        if trash is not None:
            uow.on_rollback(lambda: self.store.restore(trash, final))
            uow.after_commit(lambda: self.store.purge(trash, final))

    # ---------------------------------------------------------------- serving

    async def resolve(self, served_name: str) -> ResolvedAdapter:
        """``name`` -> its active version; ``name@version`` -> that version."""

        def work(uow: UnitOfWork) -> ResolvedAdapter:
            name, row = self._served_row(AdapterRepository(uow.session), served_name)
            return dataclasses.replace(resolved(name, row), files=_artifact_files(row.local_path))

        return await asyncio.to_thread(self.database.run, work, write=False)

    async def artifact_file(self, name: str, version: str, file: str) -> tuple[Path, str]:
        """The path of one file of ``name@version`` in the artifact store, and the version's
        sha256 (the file's content never changes while the version exists).

        ``file`` must be one of :data:`ARTIFACT_FILES`; the path comes from the registered
        version's ``local_path``, never from the caller. Raises :class:`NotFoundError` for an
        unknown adapter, version or file name, or a file missing from the store.
        """
        name_or_not_found(name, version)
        if file not in ARTIFACT_FILES:
            raise NotFoundError(f"{file!r} is not an artifact file", code="artifact_not_found")
        wanted = ARTIFACT_FILES[ARTIFACT_FILES.index(file)]  # our constant, not the caller's text

        def work(uow: UnitOfWork) -> tuple[Path, str]:
            repo = AdapterRepository(uow.session)
            row = self._version(repo, self._adapter(repo, name), version)
            return Path(row.local_path) / wanted, row.sha256

        path, sha256 = await asyncio.to_thread(self.database.run, work, write=False)
        if not await asyncio.to_thread(path.is_file):
            raise NotFoundError(
                f"{name}@{version} has no {wanted} in the artifact store", code="artifact_missing"
            )
        return path, sha256

    async def set_traffic(
        self, name: str, weights: Mapping[str, float], *, actor: str = SYSTEM
    ) -> AdapterInfo:
        """Replace the A/B split of ``name`` (see :mod:`registry.services.traffic`)."""
        name_or_not_found(name)
        info = await asyncio.to_thread(
            self.database.run, lambda uow: self._set_traffic(uow, name, dict(weights), actor)
        )
        self.generation += 1
        await self._notify(name, self._served_listeners)
        return info

    async def set_dispatch_hints(
        self,
        name: str,
        *,
        keywords: Sequence[str],
        exemplars: Sequence[str],
        actor: str = SYSTEM,
    ) -> AdapterInfo:
        """Replace the dispatcher's keywords and exemplar tasks for specialist ``name``."""
        name_or_not_found(name)
        cleaned_keywords = _cleaned(keywords, what="keywords", code="invalid_hint", fold_case=True)
        cleaned_exemplars = _cleaned(
            exemplars, what="exemplars", code="invalid_hint", fold_case=True
        )

        def work(uow: UnitOfWork) -> AdapterInfo:
            repo = AdapterRepository(uow.session)
            adapter = self._locked_adapter(repo, name)
            before = _hints_state(adapter.dispatch_keywords, adapter.dispatch_exemplars)
            adapter.dispatch_keywords = list(cleaned_keywords)
            adapter.dispatch_exemplars = list(cleaned_exemplars)
            uow.session.flush()
            record(
                uow,
                actor,
                "adapter.dispatch_hints",
                adapter=name,
                before=before,
                after=_hints_state(cleaned_keywords, cleaned_exemplars),
            )
            refreshed = repo.get_with_versions(name)
            assert refreshed is not None
            return adapter_info(refreshed)

        info = await asyncio.to_thread(self.database.run, work)
        self.generation += 1
        logger.info(
            "dispatch hints of %s: %d keywords, %d exemplars",
            name,
            len(cleaned_keywords),
            len(cleaned_exemplars),
        )
        return info

    def _set_traffic(
        self, uow: UnitOfWork, name: str, split: dict[str, float], actor: str
    ) -> AdapterInfo:
        repo = AdapterRepository(uow.session)
        adapter = self._locked_adapter(repo, name)
        rows = list(repo.versions(adapter.id))
        try:
            weights = traffic.new_weights(
                [traffic.Arm(r.version, r.traffic_weight, r.is_active) for r in rows], split
            )
        except NotFoundError as exc:
            raise NotFoundError(f"{name}: {exc.detail}", code=exc.code) from exc
        before = _candidate_weights((r.version, r.traffic_weight) for r in rows)
        for row in rows:
            row.traffic_weight = weights[row.version]
        uow.session.flush()
        record(
            uow,
            actor,
            "adapter.traffic",
            adapter=name,
            before={"weights": before},
            after={"weights": _candidate_weights(weights.items())},
        )
        refreshed = repo.get_with_versions(name)
        assert refreshed is not None
        return adapter_info(refreshed)

    # ---------------------------------------------------------------- helpers

    def _adapter(self, repo: AdapterRepository, name: str) -> Adapter:
        adapter = repo.get(name)
        if adapter is None:
            raise NotFoundError(f"no adapter named {name!r}", code="adapter_not_found")
        return adapter

    def _locked_adapter(self, repo: AdapterRepository, name: str) -> Adapter:
        adapter = repo.get(name, lock=True)
        if adapter is None:
            raise NotFoundError(f"no adapter named {name!r}", code="adapter_not_found")
        return adapter

    def _version(self, repo: AdapterRepository, adapter: Adapter, version: str) -> AdapterVersion:
        row = repo.version(adapter.id, version)
        if row is None:
            raise NotFoundError(
                f"{adapter.name}@{version} is not registered", code="version_not_found"
            )
        return row

    def _served_row(self, repo: AdapterRepository, served_name: str) -> tuple[str, AdapterVersion]:
        parsed = served_name_or_not_found(served_name)
        row = repo.served_version(parsed.name, parsed.version)
        if row is not None:
            return parsed.name, row
        self._adapter(repo, parsed.name)  # the miss path: say precisely what is missing
        if parsed.version is not None:
            raise NotFoundError(f"{parsed} is not registered", code="version_not_found")
        raise NotFoundError(f"{parsed.name} has no active version", code="no_active_version")

    def _info(
        self, repo: AdapterRepository, adapter: Adapter, row: AdapterVersion
    ) -> AdapterVersionInfo:
        shares = traffic_shares(list(repo.versions(adapter.id)))
        return version_info(adapter.name, row, shares.get(row.id, 0.0))
