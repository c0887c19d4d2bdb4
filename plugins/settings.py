"""Settings of the vLLM plugins, read from the environment of the vLLM process.

The plugins run inside vLLM (API server, engine core, every worker), so this module uses only the
standard library: no pydantic-settings, which belongs to the control plane. It is the one place
that names the plugin's variables: the plugins read them through :meth:`PluginSettings.from_env`,
and launchers write them through :meth:`PluginSettings.to_env` (vLLM's ``envs.py`` is the model).

Variables (all optional):

- ``HI_MOE_LORA_REGISTRY_URL``: base URL of the control plane (``http://registry:8080``). Unset:
  the resolver stays off.
- ``HI_MOE_LORA_RESOLVER_TIMEOUT_S``: timeout of one registry lookup, seconds (default 10).
- ``HI_MOE_LORA_RESOLVER_TOKEN``: the bearer token the resolver sends to the control plane (a
  ``resolver`` token: the control plane's bootstrap secret of the same name, or one made with
  ``hi-moe-lora tokens create NAME --scope resolver``). Needed once access control is on.
- ``HI_MOE_LORA_KERNELS``: ``ours`` (default), ``vllm`` or ``reference`` (float64, correctness
  probes only): which Punica kernels serve LoRA.
- ``HI_MOE_LORA_DORA``: ``on`` (default) or ``off``: serve DoRA adapters (:mod:`plugins.dora`).
  Off, vLLM refuses them and LoRA layers carry no DoRA scale table.
- ``HI_MOE_LORA_NARROW_B``: ``on`` (default) or ``off``: under ``--max-lora-rank`` above 16, keep
  a copy of every slot's first 16 rank columns of B (a quarter of B's memory again under max rank
  64) so adapters of rank 16 or less read B in whole rows (:mod:`hi_moe_lora.kernels.narrow_b`).
- ``HI_MOE_LORA_FUSED_GEMM``: ``auto`` (default), ``on`` or ``off``: decode-sized calls of
  unquantized LoRA layers run their base GEMM in our Triton kernel, with the LoRA inside it in
  steps that serve one adapter (:mod:`hi_moe_lora.kernels.gemm_lora`), instead of cuBLAS then our
  launch, with the tiles measured for the GPU (:mod:`hi_moe_lora.kernels.gemm_tiles`). With
  vLLM's ``--specialize-active-lora`` the choice is made per CUDA graph (one active adapter: the
  fused GEMM alone), else per step on the device; several adapters take the split form (a shrink
  launch, then the expand in the GEMM's epilogue) where the tile plan says so, else the GEMM then
  our launch.
  ``auto``: on where the tile table holds this GPU (:func:`plugins.fused_gemm.enabled`; an
  H200 today), as measured end to end and probed inside vLLM against float64 LoRA in the steps
  it serves (benchmarks/README.md, thirteenth window); off elsewhere.
- ``HI_MOE_LORA_COMPILE_THREADS``: threads that compile our kernels' variants before vLLM
  captures its CUDA graphs (:mod:`plugins.kernel_warmup`): a count, ``auto`` (the CPUs this
  process may use, at most 16; the default) or ``0`` (none: each variant compiles when the
  capture first meets it, one after the other). On an H200 at max rank 64 a server started in
  313 s with it; without it, an estimated 9-11 minutes (benchmarks/README.md, twenty-third and
  twenty-fourth windows).
- ``HI_MOE_LORA_ARTIFACT_CACHE_DIR``: an absolute directory where the resolver keeps adapter
  versions it downloads from the control plane (``/admin/v1/artifacts/...``) when the
  registry's path does not exist on this host. Unset: shared file system only (the path must
  exist here).
- ``HI_MOE_LORA_ARTIFACT_CACHE_BYTES``: that cache's size budget, bytes or with a binary suffix
  (``500M``, ``10G``, ``1T``; ``GiB`` and ``GB`` mean the same); default 20 GiB.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

ENV_REGISTRY_URL = "HI_MOE_LORA_REGISTRY_URL"
ENV_RESOLVER_TIMEOUT_S = "HI_MOE_LORA_RESOLVER_TIMEOUT_S"
ENV_KERNELS = "HI_MOE_LORA_KERNELS"
ENV_DORA = "HI_MOE_LORA_DORA"
ENV_NARROW_B = "HI_MOE_LORA_NARROW_B"
ENV_FUSED_GEMM = "HI_MOE_LORA_FUSED_GEMM"
ENV_RESOLVER_TOKEN = "HI_MOE_LORA_RESOLVER_TOKEN"
ENV_COMPILE_THREADS = "HI_MOE_LORA_COMPILE_THREADS"
ENV_ARTIFACT_CACHE_DIR = "HI_MOE_LORA_ARTIFACT_CACHE_DIR"
ENV_ARTIFACT_CACHE_BYTES = "HI_MOE_LORA_ARTIFACT_CACHE_BYTES"

KernelsChoice = Literal["ours", "vllm", "reference"]
FusedGemmChoice = Literal["auto", "on", "off"]
FUSED_GEMM_CHOICES: tuple[FusedGemmChoice, ...] = ("auto", "on", "off")
KERNEL_CHOICES: tuple[KernelsChoice, ...] = ("ours", "vllm", "reference")
DEFAULT_RESOLVER_TIMEOUT_S = 10.0
DEFAULT_ARTIFACT_CACHE_BYTES = 20 << 30
#: The most compile threads ``auto`` picks (a 16-core H200 host's cores).
MAX_AUTO_COMPILE_THREADS = 16
_BYTE_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class PluginSettingsError(ValueError):
    """An environment variable of the plugins holds a value that cannot be used."""

    def __init__(self, variable: str, value: str, expected: str) -> None:
        super().__init__(f"{variable}={value!r}: expected {expected}")
        self.variable = variable
        self.value = value


@dataclass(frozen=True)
class PluginSettings:
    """What the vLLM plugins need to know; build it with :meth:`from_env`."""

    registry_url: str | None = None
    resolver_timeout_s: float = DEFAULT_RESOLVER_TIMEOUT_S
    kernels: KernelsChoice = "ours"
    dora: bool = True
    narrow_b: bool = True
    fused_gemm: FusedGemmChoice = "auto"
    #: Threads compiling our kernels' variants ahead of vLLM's capture (None: ``auto``).
    compile_threads: int | None = None
    #: Never in ``repr`` (the settings may be logged).
    resolver_token: str | None = field(default=None, repr=False)
    #: Where fetched adapter versions are kept; ``None``: shared file system only.
    artifact_cache_dir: str | None = None
    artifact_cache_bytes: int = DEFAULT_ARTIFACT_CACHE_BYTES

    @property
    def resolver_enabled(self) -> bool:
        return self.registry_url is not None

    @property
    def compile_thread_count(self) -> int:
        """The compile threads these settings give (``auto`` resolved on this host)."""
        if self.compile_threads is None:
            return auto_compile_threads()
        return self.compile_threads

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        """Read the settings from ``environ`` (default: ``os.environ``).

        Raises :class:`PluginSettingsError` for a malformed value; empty values count as unset.
        """
        env = os.environ if environ is None else environ
        return cls(
            registry_url=_registry_url(env.get(ENV_REGISTRY_URL, "")),
            resolver_timeout_s=_timeout(env.get(ENV_RESOLVER_TIMEOUT_S, "")),
            kernels=_kernels(env.get(ENV_KERNELS, "")),
            dora=_on_off(ENV_DORA, env.get(ENV_DORA, "")),
            narrow_b=_on_off(ENV_NARROW_B, env.get(ENV_NARROW_B, "")),
            fused_gemm=_fused_gemm(env.get(ENV_FUSED_GEMM, "")),
            compile_threads=_compile_threads(env.get(ENV_COMPILE_THREADS, "")),
            resolver_token=env.get(ENV_RESOLVER_TOKEN, "").strip() or None,
            artifact_cache_dir=_cache_dir(env.get(ENV_ARTIFACT_CACHE_DIR, "")),
            artifact_cache_bytes=parse_bytes(env.get(ENV_ARTIFACT_CACHE_BYTES, "")),
        )

    @classmethod
    def from_env_or_defaults(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        """:meth:`from_env`, or every default when a value cannot be read: for code that runs
        inside vLLM after the plugin's registration has already warned about that value."""
        try:
            return cls.from_env(environ)
        except PluginSettingsError:
            return cls()

    def to_env(self) -> dict[str, str]:
        """These settings as the environment of a vLLM process (what :meth:`from_env` reads)."""
        env = {
            ENV_RESOLVER_TIMEOUT_S: repr(self.resolver_timeout_s),
            ENV_KERNELS: self.kernels,
            ENV_DORA: "on" if self.dora else "off",
            ENV_NARROW_B: "on" if self.narrow_b else "off",
            ENV_FUSED_GEMM: self.fused_gemm,
            ENV_COMPILE_THREADS: (
                "auto" if self.compile_threads is None else str(self.compile_threads)
            ),
        }
        if self.registry_url is not None:
            env[ENV_REGISTRY_URL] = self.registry_url
        if self.resolver_token is not None:
            env[ENV_RESOLVER_TOKEN] = self.resolver_token
        if self.artifact_cache_dir is not None:
            env[ENV_ARTIFACT_CACHE_DIR] = self.artifact_cache_dir
            env[ENV_ARTIFACT_CACHE_BYTES] = str(self.artifact_cache_bytes)
        return env


def _registry_url(raw: str) -> str | None:
    value = raw.strip()
    if not value:
        return None
    if not value.startswith(("http://", "https://")):
        raise PluginSettingsError(ENV_REGISTRY_URL, raw, "an http:// or https:// URL")
    return value.rstrip("/")


def _timeout(raw: str) -> float:
    value = raw.strip()
    if not value:
        return DEFAULT_RESOLVER_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        raise PluginSettingsError(ENV_RESOLVER_TIMEOUT_S, raw, "a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise PluginSettingsError(ENV_RESOLVER_TIMEOUT_S, raw, "a positive number of seconds")
    return seconds


def _on_off(name: str, raw: str) -> bool:
    value = raw.strip().lower() or "on"
    if value not in ("on", "off"):
        raise PluginSettingsError(name, raw, "on or off")
    return value == "on"


def _fused_gemm(raw: str) -> FusedGemmChoice:
    value = raw.strip().lower() or "auto"
    if value not in FUSED_GEMM_CHOICES:
        raise PluginSettingsError(ENV_FUSED_GEMM, raw, "auto, on or off")
    return value


def _compile_threads(raw: str) -> int | None:
    value = raw.strip().lower() or "auto"
    if value == "auto":
        return None
    if not value.isdigit():
        raise PluginSettingsError(ENV_COMPILE_THREADS, raw, "auto or a count of threads (0: none)")
    return int(value)


def auto_compile_threads() -> int:
    """What ``auto`` means here: the CPUs this process may run on, at most
    :data:`MAX_AUTO_COMPILE_THREADS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_AUTO_COMPILE_THREADS))


def _kernels(raw: str) -> KernelsChoice:
    value = raw.strip().lower() or "ours"
    if value not in KERNEL_CHOICES:
        raise PluginSettingsError(ENV_KERNELS, raw, ", ".join(KERNEL_CHOICES))
    return value


def _cache_dir(raw: str) -> str | None:
    value = raw.strip()
    if not value:
        return None
    if not os.path.isabs(os.path.expanduser(value)):
        raise PluginSettingsError(ENV_ARTIFACT_CACHE_DIR, raw, "an absolute directory")
    return os.path.expanduser(value)


def parse_bytes(raw: str) -> int:
    """A byte count: plain (``1048576``) or with a binary suffix (``10G``, ``500MiB``)."""
    value = raw.strip().upper().replace(" ", "")
    if not value:
        return DEFAULT_ARTIFACT_CACHE_BYTES
    for unit in ("IB", "B"):
        if value.endswith(unit) and value[: -len(unit)][-1:].isalpha():
            value = value[: -len(unit)]
            break
    else:
        if value.endswith("B"):
            value = value[:-1]
    suffix = value[-1:] if value[-1:].isalpha() else ""
    number = value[: len(value) - len(suffix)]
    expected = "a positive size in bytes, optionally with K, M, G or T (e.g. 10G)"
    if suffix not in _BYTE_SUFFIXES:
        raise PluginSettingsError(ENV_ARTIFACT_CACHE_BYTES, raw, expected)
    try:
        amount = float(number)
    except ValueError:
        raise PluginSettingsError(ENV_ARTIFACT_CACHE_BYTES, raw, expected) from None
    if not math.isfinite(amount) or int(amount * _BYTE_SUFFIXES[suffix]) <= 0:
        raise PluginSettingsError(ENV_ARTIFACT_CACHE_BYTES, raw, expected)
    return int(amount * _BYTE_SUFFIXES[suffix])
