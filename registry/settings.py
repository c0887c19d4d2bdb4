"""Settings of the control plane (one ``BaseSettings``, environment prefix ``HI_MOE_LORA_``).

The one declaration of the control plane's variables: the service reads them through
:class:`ControlPlaneSettings`, and launchers (the embedded stack) write them with
:meth:`ControlPlaneSettings.to_env`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "HI_MOE_LORA_"


class ControlPlaneSettings(BaseSettings):
    """Configuration of the registry/front-door service.

    Lists are given as JSON in the environment, e.g.
    ``HI_MOE_LORA_VLLM_URLS='["http://10.0.0.1:8000","http://10.0.0.2:8000"]'``.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str = "sqlite:///./.hi-moe-lora/registry.db"
    # A server database (PostgreSQL) that cannot be reached fails a request with 503 after
    # this long (making a connection, or waiting for a pooled one); SQLite ignores it.
    database_connect_timeout_s: float = Field(default=5.0, gt=0)
    # Several instances on one PostgreSQL registry (registry/fleet/change_feed.py): each change
    # is announced with NOTIFY and every other instance drops its stale caches at once (routing
    # snapshots, the dispatcher's fleet, tokens). SQLite has no feed whatever this says.
    change_feed: bool = True
    artifact_dir: Path = Path("./.hi-moe-lora/artifacts")
    # The served base model path/id; adapters are validated against it at registration.
    base_model: str | None = None
    max_lora_rank: int = Field(default=64, ge=1)
    # Registration reads adapter sources only below these directories (JSON list; symbolic links
    # must resolve inside them too). Empty, the default, refuses every source: name the
    # directories adapters are published to. Limits per file, per adapter, entries per directory.
    source_roots: list[Path] = Field(default_factory=list)
    source_max_file_bytes: int = Field(default=4 << 30, ge=1)
    source_max_artifact_bytes: int = Field(default=4 << 30, ge=1)
    source_max_files: int = Field(default=1000, ge=2)
    # Remote sources (registry/services/remote_sources.py): a URL (https://, or an fsspec
    # protocol such as s3:// with the `remote` extra and its backend) is read only when it
    # starts with one of these prefixes (JSON list; plain http:// only where a prefix names it).
    # Empty, the default, accepts no remote source. Each connect/read, and the whole fetch, are
    # bounded; the CA bundle is trusted besides the system's (SSL_CERT_FILE also works).
    source_url_prefixes: list[str] = Field(default_factory=list)
    source_read_timeout_s: float = Field(default=30.0, gt=0)
    source_fetch_timeout_s: float = Field(default=1800.0, gt=0)
    source_ca_bundle: Path | None = None
    vllm_urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:8000"])
    # Which replica serves a request (registry/fleet/routing.py): "affinity" (the replica that
    # has the adapter version loaded, else its home replica by rendezvous hash; spilling to the
    # least busy replica once the preferred one has `routing_spill_at` requests outstanding),
    # "least_outstanding" or "round_robin".
    routing_policy: Literal["affinity", "least_outstanding", "round_robin"] = "affinity"
    routing_spill_at: int = Field(default=8, ge=1)
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    # On SIGTERM/SIGINT `serve` stops accepting, lets requests and streams in flight finish for
    # at most this long (then cuts them), writes buffered statistics and exits.
    shutdown_grace_s: int = Field(default=30, ge=0)
    # uvicorn's access log (one INFO line per HTTP request). Off by default: under load the line
    # cost about 8 % of the front door's event loop, and the metrics and request records count
    # every request anyway.
    access_log: bool = False
    # `serve --workers N`: N processes on one port (the kernel spreads connections), for hosts
    # with more cores than one event loop uses. Needs PostgreSQL (the workers are instances of
    # one registry: the change feed keeps their caches in step). `serve` sets
    # worker_metrics_dir, where each worker offers its metrics to the one that gets a scrape
    # (registry/metrics/workers.py); don't set it yourself.
    workers: int = Field(default=1, ge=1, le=64)
    worker_metrics_dir: Path | None = None
    # `serve` sets this: once started, the objects that live as long as the process are moved
    # out of the garbage collector's sight (gc.freeze). Off for apps built in-process (tests),
    # where a frozen app that is thrown away could never be collected.
    freeze_heap_at_start: bool = False
    # Bounds on talking to vLLM: making a connection (a refused or silent replica fails over,
    # then 503) and each read of an answer (a hung replica: 504; long, for slow generations).
    upstream_connect_timeout_s: float = Field(default=3.0, gt=0)
    upstream_read_timeout_s: float = Field(default=600.0, gt=0)
    # After a promote/rollback, each replica's unload of the bare name (in the background).
    upstream_unload_timeout_s: float = Field(default=10.0, gt=0)
    # Deprecated: the former name of upstream_read_timeout_s (used when that one is not set).
    request_timeout_s: float | None = Field(default=None, gt=0)
    # The front door's routing snapshot of an adapter (its versions and traffic split) is reused
    # at most this long. A promote, rollback or delete through this instance drops it at once, as
    # does any change through another instance while the change feed (PostgreSQL) runs; other
    # changes through this one (a traffic split, a new version) apply within it.
    routing_snapshot_ttl_s: float = Field(default=1.0, gt=0)
    # Bearer token vLLM expects (vLLM's --api-key), if any.
    api_key: SecretStr | None = None
    # The dispatcher (model="auto"): tier 3 compares tasks with exemplars by embeddings (needs
    # the `dispatch` extra); the fleet is re-read after changes and at least this often.
    dispatch_embeddings: bool = True
    dispatch_refresh_s: float = Field(default=5.0, gt=0)
    # Scoring among matched specialists (the seed's weights): success rate, usage, match.
    dispatch_weight_success: float = Field(default=0.6, ge=0)
    dispatch_weight_usage: float = Field(default=0.3, ge=0)
    dispatch_weight_match: float = Field(default=0.1, ge=0)
    # Health (registry/operations/health.py): every upstream and served adapter version is
    # probed this often, with this timeout, at most this many probes at once.
    health_checks: bool = True
    health_interval_s: float = Field(default=30.0, gt=0)
    health_probe_timeout_s: float = Field(default=10.0, gt=0)
    health_probe_concurrency: int = Field(default=4, ge=1)
    health_probe_tokens: int = Field(default=8, ge=1, le=64)
    # An upstream not up yet is logged as starting until this long after its first check, then
    # warned about once (vLLM may come up after the control plane; large models load for minutes).
    health_start_grace_s: float = Field(default=600.0, ge=0)
    # Warm-up (registry/operations/warmup.py): vLLM's --max-loras (GPU slots) and
    # --max-cpu-loras (adapters held in host memory; unset: vLLM's default, --max-loras). The
    # default plan loads as many versions as vLLM holds in host memory, so a request for any of
    # them copies it into a slot instead of reading it from disk; background runs when an
    # upstream comes up and after fleet changes.
    max_loras: int = Field(default=4, ge=1)
    max_cpu_loras: int | None = Field(default=None, ge=1)
    warmup: bool = True
    warmup_concurrency: int = Field(default=4, ge=1)
    warmup_timeout_s: float = Field(default=120.0, gt=0)
    # Hostile input: a request body larger than this is refused with 413 (admin API and /v1),
    # from its Content-Length or as it streams in; generous for long chat requests.
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # Access control (registry/access/, docs/security.md): bootstrap secrets, as plaintext or
    # only their SHA-256 (64 lower-case hex digits); named "admin" and "resolver". With no admin
    # secret (here or an admin token in the database) access is open, allowed on loopback only
    # unless `insecure`. Tokens made through the admin API are re-read this often.
    admin_token: SecretStr | None = None
    admin_token_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    resolver_token: SecretStr | None = None
    resolver_token_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    access_refresh_s: float = Field(default=2.0, gt=0)
    # With access on: /v1 needs an API key (an `inference` token); /metrics and /v1/health
    # need a `metrics` token unless public.
    require_api_keys: bool = False
    metrics_public: bool = True
    health_public: bool = True
    insecure: bool = False

    @model_validator(mode="after")
    def _deprecated_names(self) -> ControlPlaneSettings:
        if self.request_timeout_s is not None and "upstream_read_timeout_s" not in (
            self.model_fields_set
        ):
            self.upstream_read_timeout_s = self.request_timeout_s
        return self

    @model_validator(mode="after")
    def _host_memory_holds_the_slots(self) -> ControlPlaneSettings:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"max_cpu_loras ({self.max_cpu_loras}) must be at least max_loras "
                f"({self.max_loras}), as vLLM requires"
            )
        return self

    @model_validator(mode="after")
    def _one_form_per_secret(self) -> ControlPlaneSettings:
        for plain, hashed in (
            ("admin_token", "admin_token_sha256"),
            ("resolver_token", "resolver_token_sha256"),
        ):
            if getattr(self, plain) is not None and getattr(self, hashed) is not None:
                raise ValueError(f"set {plain} or {hashed}, not both")
        return self

    def to_env(self) -> dict[str, str]:
        """Every setting that has a value, as the environment variable that sets it."""
        env: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, list):
                value = json.dumps(value, default=str)  # Path items as strings
            env[ENV_PREFIX + name.upper()] = str(value)
        return env
