"""The embedded default: vLLM (CPU build) + our plugins + the control plane on SQLite.

:class:`EmbeddedStack` starts both servers on free loopback ports under one work directory and
stops them again. The demo and the integration tests use it, so both exercise exactly what a
user runs: ``hi-moe-lora db upgrade``, ``hi-moe-lora serve`` and vLLM's OpenAI server started by
:class:`hi_moe_lora.app.vllm_launch.VllmLaunch` with the resolver plugin pointing at the registry.
vLLM requires an API key, random per stack unless given, which the control plane sends.

Several replicas (``vllm_replicas``) make a small fleet on one machine: each vLLM has its own
port, log and metrics directory, and the control plane routes between them. With
``private_artifacts`` each replica also gets its own artifact cache and does not see the control
plane's artifact directory at all: it runs in a mount namespace of its own where that directory
is an empty tmpfs (``unshare``; Linux, root), as on a host that shares no filesystem with the
control plane, so the resolver plugin must download every version it serves.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hi_moe_lora.app.host_support import unservable_reason
from hi_moe_lora.app.processes import (
    ManagedProcess,
    ProcessStartError,
    StartStop,
    free_port,
)
from hi_moe_lora.app.vllm_launch import VllmLaunch
from registry.fleet.routing import RoutingPolicy
from registry.settings import ControlPlaneSettings

logger = logging.getLogger(__name__)

#: vLLM on 2 CPU cores takes 20-90 s to start; leave room for a loaded CI machine.
VLLM_START_TIMEOUT_S = 600.0
#: How often a starting vLLM's ``/health`` is asked. Its API server listens only once its engine
#: is up, so until then each try is a refused connection (microseconds); a short interval only
#: shortens the wait after it is up (2 s cost a second on average, per start and restart).
VLLM_POLL_INTERVAL_S = 0.25
#: The control plane starts while vLLM does (:meth:`EmbeddedStack.start`): on 2 cores beside two
#: vLLM replicas its dispatcher's embeddings took 57 s to load and encode (12-38 s in the same
#: CI run's other stacks), so a minute was not enough. A process that exits fails the wait at
#: once, whatever the timeout.
CONTROL_PLANE_START_TIMEOUT_S = 300.0
#: The control plane's process name among the stack's processes (and in its log lines).
CONTROL_PLANE_PROCESS = "control plane"


@dataclass
class EmbeddedStack(StartStop):
    """Control plane + vLLM serving ``model_dir``; SQLite, artifacts and logs under ``workdir``."""

    workdir: Path
    model_dir: Path
    max_lora_rank: int = 64
    max_loras: int = 4
    #: vLLM's ``--max-cpu-loras`` (adapters kept in host memory); ``None``: vLLM's default.
    max_cpu_loras: int | None = None
    max_model_len: int = 512
    #: vLLM's ``--dtype``: float32 by default (tests compare answers with PEFT's in float32);
    #: a quantized model's kernels may need ``bfloat16`` or ``float16``.
    dtype: str = "float32"
    #: How often the control plane probes vLLM and every served adapter version.
    health_interval_s: float = 30.0
    #: The control plane's background traffic to vLLM: health probes and warm-ups.
    health_checks: bool = True
    warmup: bool = True
    host: str = "127.0.0.1"
    #: Where registration may read adapters (``HI_MOE_LORA_SOURCE_ROOTS``). ``None``: the work
    #: directory and the directory that holds the model (the tiny fleet keeps its adapters
    #: beside its model).
    source_roots: list[Path] | None = None
    control_plane_port: int = field(default_factory=free_port)
    vllm_port: int = field(default_factory=free_port)
    #: How many vLLM servers to run (the first on ``vllm_port``, the others on free ports).
    vllm_replicas: int = 1
    #: Each replica in a mount namespace where the control plane's artifact directory is empty,
    #: downloading what it serves into its own cache (see the module doc): needs ``unshare``.
    private_artifacts: bool = False
    #: The byte budget of each replica's artifact cache (``None``: the plugin's default).
    artifact_cache_bytes: int | None = None
    #: How the control plane picks a replica (``routing_policy``).
    routing_policy: RoutingPolicy = "affinity"
    #: More ``vllm serve`` arguments for every replica (benchmarks: the prefix cache, memory).
    vllm_extra_args: tuple[str, ...] = ()
    #: vLLM's API key, shared with the control plane (``HI_MOE_LORA_API_KEY``). Random per stack
    #: by default; ``None`` runs vLLM without one (then anyone who reaches its port may call it).
    vllm_api_key: str | None = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    #: Access control's bootstrap secrets (``HI_MOE_LORA_ADMIN_TOKEN``, ``..._RESOLVER_TOKEN``;
    #: the resolver plugin sends the latter). ``None``: access open (loopback only).
    admin_token: str | None = field(default=None, repr=False)
    resolver_token: str | None = field(default=None, repr=False)
    _processes: list[ManagedProcess] = field(default_factory=list, init=False, repr=False)
    _replica_ports: list[int] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.vllm_replicas < 1:
            raise ValueError("vllm_replicas must be at least 1")
        others = [free_port() for _ in range(self.vllm_replicas - 1)]
        self._replica_ports = [self.vllm_port, *others]

    @property
    def control_plane_url(self) -> str:
        return f"http://{self.host}:{self.control_plane_port}"

    @property
    def vllm_url(self) -> str:
        """The first replica's URL."""
        return f"http://{self.host}:{self.vllm_port}"

    @property
    def vllm_urls(self) -> list[str]:
        """Every replica's URL, in replica order."""
        return [f"http://{self.host}:{port}" for port in self._replica_ports]

    @property
    def vllm_headers(self) -> dict[str, str]:
        """What a client of vLLM itself (a test, an operator) must send: the API key."""
        return {"Authorization": f"Bearer {self.vllm_api_key}"} if self.vllm_api_key else {}

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.workdir / 'registry.db'}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    def control_plane_settings(self) -> ControlPlaneSettings:
        return ControlPlaneSettings(
            database_url=self.database_url,
            artifact_dir=self.workdir / "artifacts",
            base_model=str(self.model_dir),
            max_lora_rank=self.max_lora_rank,
            source_roots=self.source_roots
            if self.source_roots is not None
            else [self.workdir, self.model_dir.parent],
            vllm_urls=self.vllm_urls,
            host=self.host,
            port=self.control_plane_port,
            max_loras=self.max_loras,
            max_cpu_loras=self.max_cpu_loras,
            health_interval_s=self.health_interval_s,
            health_checks=self.health_checks,
            warmup=self.warmup,
            api_key=self.vllm_api_key,
            admin_token=self.admin_token,
            resolver_token=self.resolver_token,
            routing_policy=self.routing_policy,
        )

    def control_plane_env(self) -> dict[str, str]:
        """This process's environment plus the control plane's settings (as variables)."""
        return {**os.environ, **self.control_plane_settings().to_env()}

    def vllm_launch(self, replica: int = 0) -> VllmLaunch:
        """How replica ``replica`` (0: the first) is started."""
        suffix = "" if replica == 0 else f"-{replica}"
        cache_dir = self.artifact_cache_dir(replica)
        return VllmLaunch(
            model=str(self.model_dir),
            registry_url=self.control_plane_url,
            host=self.host,
            port=self._replica_ports[replica],
            max_lora_rank=self.max_lora_rank,
            max_loras=self.max_loras,
            max_cpu_loras=self.max_cpu_loras,
            max_model_len=self.max_model_len,
            dtype=self.dtype,
            extra_args=self.vllm_extra_args,
            # vLLM's /metrics then also shows the worker's adapter load times (plugins/README.md)
            metrics_dir=str(self.workdir / f"vllm-metrics{suffix}"),
            api_key=self.vllm_api_key,
            resolver_token=self.resolver_token,
            artifact_cache_dir=str(cache_dir) if cache_dir is not None else None,
            artifact_cache_bytes=self.artifact_cache_bytes if cache_dir is not None else None,
        )

    def artifact_cache_dir(self, replica: int) -> Path | None:
        """Where replica ``replica`` keeps the versions it downloads (private artifacts only)."""
        return self.workdir / f"vllm-{replica}-artifacts" if self.private_artifacts else None

    def _vllm_command(self, launch: VllmLaunch) -> list[str]:
        argv = launch.command()
        if not self.private_artifacts:
            return argv
        hidden = self.workdir / "artifacts"
        hidden.mkdir(parents=True, exist_ok=True)
        # a private mount namespace in which the control plane's artifact directory is an
        # empty tmpfs: vLLM (and its resolver) cannot read the registry's copies
        return [
            private_view_tool(),
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs -o size=1m hidden-artifacts "$0" && exec "$@"',
            str(hidden),
            *argv,
        ]

    def migrate(self) -> None:
        """``hi-moe-lora db upgrade`` against the stack's database."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [sys.executable, "-m", "hi_moe_lora.app.cli", "db", "upgrade"],
            env=self.control_plane_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ProcessStartError(f"db upgrade failed:\n{result.stdout}\n{result.stderr}")

    def start_control_plane(self) -> ManagedProcess:
        process = ManagedProcess(
            CONTROL_PLANE_PROCESS,
            [sys.executable, "-m", "hi_moe_lora.app.cli", "serve"],
            self.log_dir / "control-plane.log",
            env=self.control_plane_env(),
        ).start()
        self._processes.append(process)
        # alive, not ready: readiness needs a healthy vLLM (its resolver plugin calls the
        # control plane)
        process.wait_http_ok(f"{self.control_plane_url}/healthz", CONTROL_PLANE_START_TIMEOUT_S)
        return process

    def stop_control_plane(self) -> None:
        """Stop the control plane only; vLLM keeps running and :meth:`start_control_plane`
        starts it again."""
        for process in [p for p in self._processes if p.name == CONTROL_PLANE_PROCESS]:
            process.stop()
            self._processes.remove(process)

    def restart_control_plane(self) -> ManagedProcess:
        """Stop the control plane and start a new process on the same database and port."""
        self.stop_control_plane()
        process = self.start_control_plane()
        self.wait_ready()
        return process

    def start_vllm(self, replica: int | None = None) -> list[ManagedProcess]:
        """Start replica ``replica`` (``None``: every replica, side by side) and wait until
        each answers ``/health``."""
        indices = self._replica_indices(replica)
        started = self._launch_vllm(indices)
        self._wait_vllm(indices, started)
        return started

    def _replica_indices(self, replica: int | None) -> list[int]:
        return list(range(self.vllm_replicas)) if replica is None else [replica]

    def _launch_vllm(self, indices: list[int]) -> list[ManagedProcess]:
        """Start these replicas' processes without waiting for them."""
        started: list[ManagedProcess] = []
        for index in indices:
            launch = self.vllm_launch(index)
            launch.prepare_metrics_dir()
            process = ManagedProcess(
                _vllm_process_name(index),
                self._vllm_command(launch),
                self.log_dir / ("vllm.log" if index == 0 else f"vllm-{index}.log"),
                env=launch.environment(),
            ).start()
            self._processes.append(process)
            started.append(process)
        return started

    def _wait_vllm(self, indices: list[int], started: list[ManagedProcess]) -> None:
        for index, process in zip(indices, started, strict=True):
            process.wait_http_ok(
                f"{self.vllm_urls[index]}/health",
                VLLM_START_TIMEOUT_S,
                interval_s=VLLM_POLL_INTERVAL_S,
            )

    def stop_vllm(self, replica: int | None = None) -> None:
        """Stop vLLM replica ``replica`` (``None``: all) only; the control plane keeps running
        and :meth:`start_vllm` starts it again."""
        names = {
            _vllm_process_name(i)
            for i in (range(self.vllm_replicas) if replica is None else [replica])
        }
        for process in [p for p in self._processes if p.name in names]:
            process.stop()
            self._processes.remove(process)

    def wait_ready(self) -> None:
        """Until the control plane's health monitor has found vLLM healthy (``/readyz``)."""
        process = next(p for p in self._processes if p.name == CONTROL_PLANE_PROCESS)
        process.wait_http_ok(f"{self.control_plane_url}/readyz", CONTROL_PLANE_START_TIMEOUT_S)

    def start(self) -> EmbeddedStack:
        """Start vLLM, and while it comes up (most of a start: three processes each importing
        vLLM) migrate and start the control plane; wait for both, then for the control plane's
        readiness. Stop everything again on failure. A model this host's vLLM cannot serve
        (:func:`unservable_reason`) fails before any of it starts.

        vLLM does not need the control plane to start: its resolver plugin calls the registry
        only when a request names an adapter vLLM has not loaded."""
        reason = unservable_reason(self.model_dir)
        if reason is not None:
            raise ProcessStartError(reason)
        try:
            indices = self._replica_indices(None)
            vllm = self._launch_vllm(indices)
            self.migrate()
            self.start_control_plane()
            logger.info("control plane ready at %s", self.control_plane_url)
            self._wait_vllm(indices, vllm)
            logger.info("vLLM ready at %s", ", ".join(self.vllm_urls))
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop vLLM first (it may call the registry while stopping), then the control plane."""
        # vLLM starts before the control plane: stop in reverse order, the control plane last.
        self._processes.sort(key=lambda process: process.name != CONTROL_PLANE_PROCESS)
        while self._processes:
            self._processes.pop().stop()


def _vllm_process_name(replica: int) -> str:
    """``vLLM`` for the first replica (its log stays ``vllm.log``), ``vLLM 1``, … after it."""
    return "vLLM" if replica == 0 else f"vLLM {replica}"


def private_view_tool() -> str:
    """``unshare``'s path, if this machine lets us make a mount namespace (Linux, root);
    raises :class:`ProcessStartError` otherwise."""
    tool = shutil.which("unshare")
    if tool is None or sys.platform != "linux" or os.geteuid() != 0:
        raise ProcessStartError(
            "private_artifacts needs unshare(1) and root on Linux (a mount namespace per vLLM)"
        )
    return tool
